// The one colour rule of attention (mirrored exactly by surgeon_widgets/widget/views/attention_colors.py):
// range = [min, max] of the layer's maps as shown (mean and every head of one batch item, at
// full resolution: the `range` Python sends) or the fixed [0, 1]; t = clip((w - lo) / (hi - lo))
// (0.5 when the range is flat); colour = COLORMAP entry floor(t * 255 + 0.5). Lines use t as opacity.

import { COLORMAP } from "../colormap.js";
import { weightAt } from "./readout.js";

/** @typedef {import("./store.js").AttentionMap} AttentionMap */
/** @typedef {"range" | "fixed"} ScaleMode */
/** @typedef {{ lo: number, hi: number, mode: ScaleMode }} Scale */

/** A range narrower than this is flat: every weight sits mid-scale. */
export const FLAT = 1e-12;

/**
 * The range a layer's maps are coloured over: `[0, 1]` when fixed; else the `range` Python
 * measured at full resolution, or (older messages) the decoded maps' own [min, max].
 * @param {{ range?: [number, number] | null, maps: Map<string, AttentionMap> }} entry
 * @param {ScaleMode} mode
 * @returns {Scale}
 */
export function layerScale(entry, mode) {
  if (mode === "fixed") return { lo: 0, hi: 1, mode };
  if (entry.range) return { lo: entry.range[0], hi: entry.range[1], mode };
  let lo = Infinity;
  let hi = -Infinity;
  for (const m of entry.maps.values()) {
    for (let r = 0; r < m.rows; r++) {
      for (let c = 0; c < m.cols; c++) {
        const w = weightAt(m, r, c);
        if (w < lo) lo = w;
        if (w > hi) hi = w;
      }
    }
  }
  return lo <= hi ? { lo, hi, mode } : { lo: 0, hi: 1, mode };
}

/**
 * Where weight `w` sits on `scale`, in [0, 1].
 * @param {number} w
 * @param {{ lo: number, hi: number }} scale
 */
export function position(w, scale) {
  const span = scale.hi - scale.lo;
  if (!(span >= FLAT)) return 0.5;
  return Math.min(1, Math.max(0, (w - scale.lo) / span));
}

/**
 * The COLORMAP entry of weight `w` on `scale`.
 * @param {number} w
 * @param {{ lo: number, hi: number }} scale
 */
export function colourIndex(w, scale) {
  return Math.floor(position(w, scale) * 255 + 0.5);
}

/**
 * RGB of weight `w` on `scale`.
 * @param {number} w
 * @param {{ lo: number, hi: number }} scale
 * @returns {[number, number, number]}
 */
export function colourOf(w, scale) {
  const i = colourIndex(w, scale) * 3;
  return [COLORMAP[i], COLORMAP[i + 1], COLORMAP[i + 2]];
}

/**
 * The COLORMAP entry of every cell of `m` (its exact weights when sent, else the decoded uint8).
 * @param {AttentionMap} m
 * @param {{ lo: number, hi: number }} scale
 * @returns {Uint8Array}
 */
export function mapIndices(m, scale) {
  const out = new Uint8Array(m.rows * m.cols);
  if (m.exact && m.exact.length === out.length) {
    for (let k = 0; k < out.length; k++) out[k] = colourIndex(m.exact[k], scale);
    return out;
  }
  const table = new Uint8Array(256);  // uint8 v -> entry, once per map
  for (let v = 0; v < 256; v++) table[v] = colourIndex(m.lo + (v / 255) * (m.hi - m.lo), scale);
  for (let k = 0; k < out.length; k++) out[k] = table[m.values[k]];
  return out;
}
