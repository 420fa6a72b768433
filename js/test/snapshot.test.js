// The saved snapshot as the views read it (snapshot.js): buffers decoded, label, stores fed.
import assert from "node:assert/strict";
import { test } from "node:test";

import { HistoryStore } from "../src/histogram/store.js";
import { AttentionStore } from "../src/heatmap/store.js";
import { fromBase64, snapshotLabel, snapshotMessages } from "../src/snapshot.js";

const b64 = (/** @type {ArrayBufferView} */ a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("base64");

/** @param {number} step @param {number} buffer */
const item = (step, buffer) => ({
  key: "fc/output", layer: "fc", leaf: "output", kind: /** @type {"activation"} */ ("activation"), step,
  training: true, shape: [2, 3], dtype: "float32", numel: 6, mean: 0, std: 1, min: -1, max: 1,
  zeros: 0, nans: 0, infs: 0, l2: 2, lo: -1, hi: 1, hist: { buffer, dtype: "float32", shape: [2] },
});

test("base64 buffers decode to the bytes Python packed", () => {
  const view = fromBase64(b64(new Float32Array([1.5, -2])));
  assert.equal(view.byteLength, 8);
  assert.equal(view.getFloat32(4, true), -2);
});

test("a snapshot feeds the histogram and attention stores as the live messages do", () => {
  const snap = {
    step: 7, training: false, left_out: 0,
    stats: { items: [item(7, 0)], history: { "fc/output": [item(3, 1), item(5, 2)] } },
    attention: { items: [{ layer: "attn", head: /** @type {"mean"} */ ("mean"), batch: 0, batches: 1, heads: 0, step: 7, shape: [1, 2], lo: 0, hi: 1, buffer: 3, dtype: "uint8" }] },
    buffers: [new Float32Array([4, 2]), new Float32Array([1, 0]), new Float32Array([0, 1]), new Uint8Array([255, 0])].map(b64),
  };
  const { stats, attention, buffers } = snapshotMessages(snap);
  const store = new HistoryStore();
  assert.deepEqual([...store.apply(stats, buffers)], ["fc"]);
  assert.deepEqual(store.history("fc/output").map((i) => i.step), [3, 5, 7]);
  assert.deepEqual([...(store.latest("fc/output")?.counts ?? [])], [4, 2]);
  const maps = new AttentionStore();
  maps.apply(attention, buffers);
  assert.deepEqual([...(maps.get("attn")?.maps.get("mean")?.values ?? [])], [255, 0]);
  assert.equal(snapshotLabel(snap), "snapshot at step 7 · eval, no kernel");
  assert.equal(snapshotLabel({ ...snap, training: null, left_out: 3 }),
    "snapshot at step 7, no kernel (3 left out: over the size bound)");
});
