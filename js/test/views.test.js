// Pure logic of issue 12's views: colour scales, model order, histogram axes, curves, row read-out.
import assert from "node:assert/strict";
import { test } from "node:test";

import { valueRange } from "../src/curves/draw.js";
import { curvePoints } from "../src/curves/view.js";
import { colourIndex, layerScale, mapIndices } from "../src/heatmap/colour.js";
import { rowReadout } from "../src/heatmap/readout.js";
import { barShare, zeroX } from "../src/histogram/draw.js";
import { inModelOrder } from "../src/model_order.js";

/** @param {Partial<import("../src/heatmap/store.js").AttentionMap>} o */
const map = (o) => ({
  head: /** @type {"mean"} */ ("mean"), rows: 1, cols: 3, fullRows: 1, fullCols: 3, lo: 0, hi: 0.0625,
  values: new Uint8Array([255, 128, 0]), exact: null, ...o,
});

test("the colour rule: a near-uniform layer spans the colormap; 0-1 puts it low; flat sits mid", () => {
  const m = map({ lo: 0, hi: 0.09, values: new Uint8Array([0, 128, 255]) });
  const entry = { range: /** @type {[number, number]} */ ([0.075, 0.09]), maps: new Map([["mean", m]]) };
  const own = layerScale(entry, "range");
  assert.deepEqual([own.lo, own.hi], [0.075, 0.09]);
  assert.deepEqual([colourIndex(0.075, own), colourIndex(0.0825, own), colourIndex(0.09, own)], [0, 128, 255]);
  const fixed = layerScale(entry, "fixed");
  assert.deepEqual([colourIndex(0.075, fixed), colourIndex(0.0825, fixed), colourIndex(0.09, fixed)], [19, 21, 23]);
  assert.equal(colourIndex(0.3, { lo: 0.3, hi: 0.3 }), 128);
  // no range sent (an older message): the decoded maps' own [min, max]
  const decoded = layerScale({ range: null, maps: new Map([["mean", m]]) }, "range");
  assert.deepEqual([decoded.lo, decoded.hi], [0, 0.09]);
  assert.deepEqual([...mapIndices(m, decoded)], [0, 128, 255]);
  const exact = map({ exact: new Float32Array([0.075, 0.0825, 0.09]) });
  assert.deepEqual([...mapIndices(exact, own)], [0, 128, 255]);
});

test("panels follow the tree's order; unknown names keep theirs, last", () => {
  const rows = ["a", "b", "c"].map((name) => ({ name, parent: null, depth: 0, cls: "X", kind: /** @type {"module"} */ ("module"), params: 0, children: 0 }));
  assert.deepEqual(inModelOrder(["c", "zz", "a", "yy"], rows), ["a", "c", "zz", "yy"]);
  assert.deepEqual(inModelOrder(["b"], undefined), ["b"]);
});

test("histogram bars on linear and log axes; the zero line only inside the range", () => {
  assert.equal(barShare(1, 32, false), 1 / 32);
  assert.equal(barShare(1, 32, true), Math.log(2) / Math.log(33));
  assert.equal(barShare(0, 32, true), 0);
  assert.equal(zeroX(-1, 2, 256), 85);
  assert.equal(zeroX(0, 2, 256), null);
  assert.equal(zeroX(0.5, 2, 256), null);
});

test("curves: NaN/Inf steps are marked, missing values break the line, flat ranges widen", () => {
  const items = /** @type {any[]} */ ([
    { step: 1, mean: 1, nans: 0, infs: 0 }, { step: 2, mean: null, nans: 3, infs: 0 }, { step: 3, mean: 1, nans: 0, infs: 1 },
  ]);
  const points = curvePoints(items, "mean");
  assert.deepEqual(points.map((p) => p.bad), [false, true, true]);
  assert.equal(points[1].value, null);
  const range = /** @type {[number, number]} */ (valueRange(points));
  assert.ok(range[0] < 1 && range[1] > 1);
  assert.equal(valueRange([{ step: 1, value: null, bad: true }]), null);
});

test("a query row lists the keys it attends to most", () => {
  const m = map({ hi: 1, exact: new Float32Array([0.2, 0.7, 0.1]) });
  assert.equal(rowReadout(m, 0, ["q"], ["a", "b", "c"], 2), 'query "q" #0 attends most to "b" #1 0.7000, "a" #0 0.2000');
});

test("a pinned step shares the latest's value axis; clicks pick history rows", async () => {
  const { rebin, rowAt, sharedRange } = await import("../src/histogram/pin.js");
  /** @param {number} lo @param {number} hi @param {number[]} counts */
  const it = (lo, hi, counts) => /** @type {import("../src/types.js").Item} */ ({ lo, hi, counts });
  const latest = it(0, 4, [1, 0, 0, 1]);
  const pinned = it(-4, 0, [0, 2, 0, 0]);
  assert.deepEqual(sharedRange(latest, pinned), [-4, 4]);
  assert.deepEqual([...rebin(latest, -4, 4, 4)], [0, 0, 1, 1]); // centers 0.5 and 3.5
  assert.deepEqual([...rebin(pinned, -4, 4, 4)], [2, 0, 0, 0]); // center -2.5
  assert.equal(rebin(latest, -4, 4, 4).reduce((a, b) => a + b), 2); // nothing lost
  assert.equal(rowAt(0, 40, 5), 0);
  assert.equal(rowAt(39.9, 40, 5), 4);
  assert.equal(rowAt(45, 40, 5), 4); // a click on the border stays on the last row
});

test("lines view: token or range labels, 12 distinct head colours, heads before the mean", async () => {
  const { axisLabels, headColour, lineMaps } = await import("../src/heatmap/lines.js");
  assert.deepEqual(axisLabels(["a", "b"], 2, 2), ["a", "b"]);
  assert.deepEqual(axisLabels(["a", "b", "c", "d"], 2, 4), ["#0–1", "#2–3"]); // pooled: ranges
  assert.deepEqual(axisLabels(null, 3, 3), ["#0", "#1", "#2"]);
  assert.equal(new Set(Array.from({ length: 12 }, (_, i) => headColour(i))).size, 12);
  const m = map({});
  const entry = { layer: "a", batch: 0, batches: 1, heads: 2, step: 0, maps: new Map([["mean", m], ["0", m], ["1", m]]), tokensQ: null, tokensK: null, range: null };
  assert.deepEqual(lineMaps(entry).map(([k]) => k), ["0", "1"]);
  assert.deepEqual(lineMaps({ ...entry, heads: 0 }).map(([k]) => k), ["mean"]); // a snapshot without heads
});
