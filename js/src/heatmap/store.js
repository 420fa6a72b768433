// Latest attention maps per layer, fed by `attention` messages (PROTOCOL.md "Attention").

import { decode } from "../codec.js";

/** @typedef {import("../types.js").BinaryRef} BinaryRef */
/** @typedef {ArrayLike<DataView | ArrayBuffer | ArrayBufferView>} Buffers */

/**
 * One attention item as sent by Python (`buffer` indexes the message's buffers).
 * @typedef {{
 *   layer: string, head: number | "mean", batch: number, batches?: number, heads?: number,
 *   step?: number, shape: number[], full_shape?: number[], lo: number, hi: number,
 *   buffer: number, dtype?: string, exact?: BinaryRef, tokens_q?: string[], tokens_k?: string[],
 *   training?: boolean, range?: [number, number]
 * }} WireMap
 */

/**
 * A decoded map: `values[r * cols + c]`, weight = lo + v / 255 * (hi - lo), or `exact` when sent.
 * @typedef {{
 *   head: number | "mean", rows: number, cols: number, fullRows: number, fullCols: number,
 *   lo: number, hi: number, values: Uint8Array, exact: Float32Array | null
 * }} AttentionMap
 */

/**
 * Everything shown for one layer: the maps of one batch item, by head key ("mean", "0", ...).
 * @typedef {{
 *   layer: string, batch: number, batches: number, heads: number, step: number,
 *   training?: boolean, maps: Map<string, AttentionMap>, tokensQ: string[] | null,
 *   tokensK: string[] | null, range: [number, number] | null
 * }} LayerMaps
 */

/**
 * @param {WireMap} w
 * @param {Buffers | undefined} buffers
 * @returns {AttentionMap}
 */
export function decodeMap(w, buffers) {
  const [rows, cols] = w.shape;
  const values = /** @type {Uint8Array} */ (decode({ buffer: w.buffer, dtype: w.dtype ?? "uint8", shape: w.shape }, buffers));
  const exact = w.exact ? /** @type {Float32Array} */ (decode(w.exact, buffers)) : null;
  const [fullRows, fullCols] = w.full_shape ?? w.shape;
  return { head: w.head, rows, cols, fullRows, fullCols, lo: w.lo, hi: w.hi, values, exact };
}

export class AttentionStore {
  constructor() {
    /** @type {Map<string, LayerMaps>} */
    this.layers = new Map();
  }

  /** @param {string} layer */
  get(layer) {
    return this.layers.get(layer);
  }

  /** @param {string} layer */
  delete(layer) {
    this.layers.delete(layer);
  }

  /**
   * Apply one `attention` message; returns the layers it touched. Items of one layer replace
   * what was shown for it when their step or batch item differ.
   * @param {{ items?: WireMap[] }} msg
   * @param {Buffers | undefined} buffers
   * @returns {Set<string>}
   */
  apply(msg, buffers) {
    /** @type {Set<string>} */
    const touched = new Set();
    for (const w of msg.items ?? []) {
      let entry = this.layers.get(w.layer);
      const step = w.step ?? 0;
      if (!entry || !touched.has(w.layer)) {
        entry = {
          layer: w.layer, batch: w.batch, batches: w.batches ?? 1, heads: w.heads ?? 0, step,
          training: w.training, maps: new Map(), tokensQ: entry?.tokensQ ?? null, tokensK: entry?.tokensK ?? null,
          range: null,
        };
        this.layers.set(w.layer, entry);
        touched.add(w.layer);
      }
      entry.maps.set(String(w.head), decodeMap(w, buffers));
      if (w.range) entry.range = w.range;
      if (w.head === "mean") {
        entry.tokensQ = w.tokens_q ?? null;
        entry.tokensK = w.tokens_k ?? null;
      }
      if (typeof w.head === "number") entry.heads = Math.max(entry.heads, w.head + 1);
    }
    return touched;
  }
}
