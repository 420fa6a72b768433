// Per-key history of decoded stats items, fed by `stats` and `snapshot` messages.

import { decode } from "../codec.js";

/** @typedef {import("../types.js").WireItem} WireItem */
/** @typedef {import("../types.js").Item} Item */
/** @typedef {ArrayLike<DataView | ArrayBuffer | ArrayBufferView>} Buffers */

/** Steps kept per key for the heat strip. */
export const MAX_HISTORY = 100;

const KIND_ORDER = ["activation", "gradient", "weight", "weight grad", "update"];

/**
 * Decode a wire item's histogram reference into counts.
 * @param {WireItem} w
 * @param {Buffers | undefined} buffers
 * @returns {Item}
 */
export function decodeItem(w, buffers) {
  const { hist, ...rest } = w;
  return { ...rest, counts: decode(hist, buffers) };
}

export class HistoryStore {
  constructor() {
    /** @type {Map<string, Item[]>} */
    this.byKey = new Map();
    /** @type {Map<string, Set<string>>} */
    this.keysByLayer = new Map();
  }

  clear() {
    this.byKey.clear();
    this.keysByLayer.clear();
  }

  /** @param {Item} item */
  add(item) {
    let list = this.byKey.get(item.key);
    if (!list) {
      list = [];
      this.byKey.set(item.key, list);
      let keys = this.keysByLayer.get(item.layer);
      if (!keys) this.keysByLayer.set(item.layer, (keys = new Set()));
      keys.add(item.key);
    }
    const last = list[list.length - 1];
    if (last && last.step === item.step) list[list.length - 1] = item;
    else if (last && last.step > item.step) return; // stale (e.g. a snapshot older than live stats)
    else list.push(item);
    if (list.length > MAX_HISTORY) list.splice(0, list.length - MAX_HISTORY);
  }

  /**
   * Apply one custom message from Python; returns the layers it touched.
   * @param {{ type?: string, items?: WireItem[], history?: Record<string, WireItem[]> }} msg
   * @param {Buffers | undefined} buffers
   * @returns {Set<string>}
   */
  apply(msg, buffers) {
    /** @type {Set<string>} */
    const layers = new Set();
    if (msg.type === "snapshot") {
      this.clear();
      for (const list of Object.values(msg.history ?? {})) {
        for (const w of [...list].sort((a, b) => a.step - b.step)) {
          this.add(decodeItem(w, buffers));
          layers.add(w.layer);
        }
      }
    }
    if (msg.type === "stats" || msg.type === "snapshot") {
      for (const w of msg.items ?? []) {
        this.add(decodeItem(w, buffers));
        layers.add(w.layer);
      }
    }
    return layers;
  }

  /**
   * Keys of one layer: activations, gradients, then parameters (weights, their gradients and
   * updates), each in arrival order.
   * @param {string} layer
   */
  keysOf(layer) {
    const keys = [...(this.keysByLayer.get(layer) ?? [])];
    const rank = (/** @type {string} */ k) => KIND_ORDER.indexOf(this.latest(k)?.kind ?? "activation");
    return keys.sort((a, b) => rank(a) - rank(b));
  }

  /** @param {string} key */
  latest(key) {
    const list = this.byKey.get(key);
    return list ? list[list.length - 1] : undefined;
  }

  /** @param {string} key */
  history(key) {
    return this.byKey.get(key) ?? [];
  }
}
