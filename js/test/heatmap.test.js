// Pure logic of the attention heatmap: pooled spans, weight decoding, read-out text, store.
import assert from "node:assert/strict";
import { test } from "node:test";

import { COLORMAP } from "../src/colormap.js";
import { cellAt, formatWeight, gridLabels, readout, span, weightAt } from "../src/heatmap/readout.js";
import { AttentionStore } from "../src/heatmap/store.js";

/** @param {Partial<import("../src/heatmap/store.js").AttentionMap>} o */
const map = (o) => ({
  head: /** @type {"mean"} */ ("mean"), rows: 2, cols: 2, fullRows: 2, fullCols: 2, lo: 0, hi: 0.5,
  values: new Uint8Array([0, 51, 255, 102]), exact: null, ...o,
});

test("pooled cells cover adaptive-pooling spans", () => {
  assert.deepEqual(span(0, 256, 4096), [0, 16]);
  assert.deepEqual(span(255, 256, 4096), [4080, 4096]);
  assert.deepEqual(span(1, 3, 4), [1, 3]); // overlapping bins, as torch's adaptive pooling
  assert.deepEqual(cellAt(255.9, 0, 256, 256, 4, 4), [0, 3]);
  assert.equal(cellAt(256, 0, 256, 256, 4, 4), null);
});

test("weights decode from uint8, or come exact", () => {
  assert.equal(weightAt(map({}), 0, 1), 0.1);
  assert.equal(weightAt(map({ exact: new Float32Array([0.25, 0, 0, 0]) }), 0, 0), 0.25);
  assert.equal(formatWeight(0), "0");
  assert.equal(formatWeight(0.00012345), "1.23e-4");
  assert.equal(readout(map({}), 1, 0, ["a", "b"], ["c", "d"]), 'query "b" #1 · key "c" #0 · weight ≈ 0.5000');
  const pooled = map({ fullRows: 4096, fullCols: 4096 });
  assert.equal(readout(pooled, 0, 0, null, null), "query #0–2047 (2048 tokens) · key #0–2047 (2048 tokens) · weight mean ≈ 0");
});

test("store keeps one batch item's maps per layer, tokens from the mean item", () => {
  const store = new AttentionStore();
  const buffers = [new Uint8Array([1, 2, 3, 4]), new Uint8Array([5, 6, 7, 8])];
  const base = { layer: "a", batch: 1, batches: 2, heads: 1, step: 4, shape: [2, 2], lo: 0, hi: 1, dtype: "uint8" };
  const touched = store.apply({ items: [
    { ...base, head: "mean", buffer: 0, tokens_q: ["x", "y"], tokens_k: ["x", "y"] },
    { ...base, head: 0, buffer: 1 },
  ] }, buffers);
  assert.deepEqual([...touched], ["a"]);
  const entry = /** @type {import("../src/heatmap/store.js").LayerMaps} */ (store.get("a"));
  assert.deepEqual([...entry.maps.keys()], ["mean", "0"]);
  assert.deepEqual(Array.from(entry.maps.get("0")?.values ?? []), [5, 6, 7, 8]);
  assert.deepEqual(entry.tokensQ, ["x", "y"]);
  assert.equal(entry.batch, 1);
  assert.equal(COLORMAP.length, 256 * 3);
});

test("grid labels drop the prefix every layer shares, never a name's last part", () => {
  const layers = ["encoder.layer.0.attention.self", "encoder.layer.1.attention.self"];
  assert.deepEqual(gridLabels(layers), ["0.attention.self", "1.attention.self"]);
  assert.deepEqual(gridLabels(["a.attn", "a.attn.inner"]), ["attn", "attn.inner"]);
  assert.deepEqual(gridLabels(["blocks.0.attn"]), ["blocks.0.attn"]);
  assert.deepEqual(gridLabels(["same", "same"]), ["same", "same"]);
});
