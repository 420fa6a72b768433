// Pure logic of the front end under Node's test runner (`npm test`); the DOM is covered by
// the browser tests in ../../tests/browser/.
import assert from "node:assert/strict";
import { test } from "node:test";

import { decode } from "../src/codec.js";
import { fullNum, num, percent, rangeText, statsText } from "../src/histogram/format.js";
import { HistoryStore } from "../src/histogram/store.js";
import { firstBadOfLayers, noFiniteText, nonfiniteText, placeText } from "../src/nonfinite.js";
import { TreeIndex, visibleRows } from "../src/tree/flatten.js";
import { keyAction } from "../src/tree/keys.js";

/** @param {string} name @param {string | null} parent @param {number} depth @param {string} [cls] @param {"module" | "node"} [kind] */
const row = (name, parent, depth, cls = "Linear", kind = "module") =>
  ({ name, parent, depth, cls, kind, params: 1, children: 0 });

const ROWS = [
  row("a", null, 0, "Seq"), row("a.b", "a", 1, "Seq"), row("a.b.c", "a.b", 2, "Block"),
  row("a.b.c.d", "a.b.c", 3, "Attention"), row("e", null, 0), row("relu", null, 0, "relu", "node"),
];
const names = (/** @type {import("../src/tree/flatten.js").VisibleRow[]} */ v) => v.map((r) => r.row.name);

test("collapsed beyond depth 2 by default; graph nodes only when asked", () => {
  assert.deepEqual(names(visibleRows(new TreeIndex(ROWS, false), new Map(), "")), ["a", "a.b", "a.b.c", "e"]);
  assert.deepEqual(names(visibleRows(new TreeIndex(ROWS, true), new Map(), "")), ["a", "a.b", "a.b.c", "e", "relu"]);
  const open = visibleRows(new TreeIndex(ROWS, false), new Map([["a.b.c", true], ["a", false]]), "");
  assert.deepEqual(names(open), ["a", "e"]);
});

test("search matches name or class and keeps ancestors, opened", () => {
  const v = visibleRows(new TreeIndex(ROWS, false), new Map([["a", false]]), "ATTENTION");
  assert.deepEqual(names(v), ["a", "a.b", "a.b.c", "a.b.c.d"]);
  assert.deepEqual(v.map((r) => r.match), [false, false, false, true]);
  assert.deepEqual(v.map((r) => [r.level, r.posinset, r.setsize, r.expanded]),
    [[1, 1, 1, true], [2, 1, 1, true], [3, 1, 1, true], [4, 1, 1, false]]);
});

test("keys follow the WAI-ARIA tree pattern", () => {
  const v = visibleRows(new TreeIndex(ROWS, false), new Map(), "");
  const k = (/** @type {string} */ key, /** @type {number} */ i) => keyAction({ key, shiftKey: false }, v, i);
  assert.deepEqual(k("ArrowDown", -1), { type: "move", index: 0, extend: false });
  assert.deepEqual(k("End", 0), { type: "move", index: 3, extend: false });
  assert.deepEqual(k("ArrowRight", 2), { type: "expand", name: "a.b.c" });
  assert.deepEqual(k("ArrowLeft", 2), { type: "move", index: 1, extend: false });
  assert.deepEqual(k("ArrowLeft", 0), { type: "collapse", name: "a" });
  assert.deepEqual(k(" ", 3), { type: "select", index: 3, mode: "toggle" });
  assert.equal(k("x", 0), null);
});

test("codec decodes unaligned views and names bad dtypes", () => {
  const raw = new Uint8Array(4 * 3 + 1);
  raw.set(new Uint8Array(new Float32Array([1.5, 0, -2]).buffer), 1);
  const out = decode({ buffer: 0, dtype: "float32", shape: [3] }, [new DataView(raw.buffer, 1, 12)]);
  assert.deepEqual(Array.from(out), [1.5, 0, -2]);
  assert.deepEqual(Array.from(decode({ buffer: 0, dtype: "int32", shape: [1] }, [new Int32Array([7]).buffer])), [7]);
  assert.throws(() => decode({ buffer: 0, dtype: "float16", shape: [1] }, [new ArrayBuffer(2)]), /unknown dtype "float16"/);
  assert.throws(() => decode({ buffer: 1, dtype: "uint8", shape: [1] }, [new ArrayBuffer(1)]), /missing buffer 1/);
});

test("stats text and the history store", () => {
  assert.equal(num(null), "–");
  assert.equal(num(0.000012), "1.2e-5");
  assert.equal(num(7.4512e-8), "7.45e-8");
  assert.equal(num(-3.1749e-5), "-3.17e-5");
  assert.equal(num(123456), "1.23e5");
  assert.equal(num(-0.5), "-0.5");
  assert.equal(fullNum(7.4512e-8), "7.4512e-8");
  assert.equal(fullNum(-Infinity), "-inf");
  // a range shows as many digits as it takes for its ends to differ
  assert.deepEqual(rangeText(0.123401, 0.123449), ["0.1234", "0.12345"]);
  assert.deepEqual(rangeText(2157, 2429), ["2160", "2430"]);
  assert.deepEqual(rangeText(1, 1), ["1", "1"]);
  assert.equal(percent(0.004), "0.4%");
  const store = new HistoryStore();
  const hist = { buffer: 0, dtype: "float32", shape: [2] };
  /** @param {number} step */
  const wire = (step) => ({
    key: "l/output", layer: "l", leaf: "output", kind: /** @type {"activation"} */ ("activation"), step,
    shape: [2], dtype: "float32", numel: 2, mean: 1, std: 0, min: 1, max: 1, zeros: 0.5, nans: 0, infs: 1,
    hist, lo: 0, hi: 1,
  });
  const buffers = [new Float32Array([1, 1]).buffer];
  store.apply({ type: "stats", items: [wire(1), wire(2)] }, buffers);
  store.apply({ type: "stats", items: [wire(1)] }, buffers); // stale: ignored
  assert.deepEqual(store.history("l/output").map((i) => i.step), [1, 2]);
  const latest = /** @type {import("../src/types.js").Item} */ (store.latest("l/output"));
  assert.equal(statsText(latest), "mean 1 std 0 min 1 max 1 zeros 50% NaN 0 Inf 1 shape [2] float32");
  store.apply({ type: "snapshot", items: [wire(5)], history: { "l/output": [wire(4), wire(3)] } }, buffers);
  assert.deepEqual(store.history("l/output").map((i) => i.step), [3, 4, 5]);
});

test("non-finite: the first entry is named, each layer's first kept, empty histograms say why", () => {
  /** @type {[string, string, number, number, number][]} */
  const list = [["fc2", "fc2/output", 12, 1024, 0], ["fc3", "fc3/output", 12, 0, 3], ["fc2", "fc2/grad_output", 12, 5, 0]];
  assert.equal(nonfiniteText(list), "Non-finite values first in fc2 (output) at step 12: 1,024 NaN (then 2 more keys)");
  // located by Python's flags of every module: no counts
  assert.equal(nonfiniteText([["layer3.0.conv1", "layer3.0.conv1/output", 332, 0, 0]]),
    "Non-finite values first in layer3.0.conv1 (output) at step 332");
  assert.equal(nonfiniteText([["", "input", 5, 0, 0], list[0]]), "Non-finite values first in the model's input at step 5 (then 1 more key)");
  assert.equal(placeText("", "grad_output"), "the gradient of the model's output");
  assert.equal(placeText("fc", "fc/weight.grad"), "fc (gradient of weight)");
  assert.equal(placeText("fc", "fc/grad_output[0]"), "fc (gradient of output[0])");
  assert.equal(nonfiniteText([]), "");
  assert.deepEqual([...firstBadOfLayers(list).values()].map((e) => e[1]), ["fc2/output", "fc3/output"]);
  assert.equal(noFiniteText({ numel: 8, nans: 8, infs: 0 }), "all values NaN");
  assert.equal(noFiniteText({ numel: 8, nans: 3, infs: 5 }), "no finite values: 3 NaN, 5 Inf");
  assert.equal(noFiniteText({ numel: 8, nans: 3, infs: 0 }), "");
});
