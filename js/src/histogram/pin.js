// Pinning one step of a history strip: its histogram drawn as an outline over the latest one,
// both on one value axis (the union of their ranges), so two steps compare at a glance.

import { statsParts } from "./format.js";

/** @typedef {import("../types.js").Item} Item */

/**
 * The latest and the pinned step's numbers side by side: a header row (the statistics' names)
 * and one row per step, each cell `[text, full value ("" when the text is whole)]`.
 * @param {Item} latest
 * @param {Item} pinned
 * @returns {{ head: string[], rows: { label: string, cells: [string, string][] }[] }}
 */
export function pinRows(latest, pinned) {
  const parts = (/** @type {Item} */ it) => statsParts(it).filter(([label]) => label !== "shape");
  const head = parts(latest).map(([label]) => label);
  const row = (/** @type {Item} */ it, /** @type {string} */ label) => ({
    label, cells: parts(it).map(([, text, full]) => /** @type {[string, string]} */ ([text, full])),
  });
  return { head, rows: [row(latest, `step ${latest.step}`), row(pinned, `step ${pinned.step} (pinned)`)] };
}

/**
 * The history row a click `y` CSS pixels down a strip `height` pixels tall hits (oldest first).
 * @param {number} y
 * @param {number} height
 * @param {number} rows
 */
export function rowAt(y, height, rows) {
  return Math.min(rows - 1, Math.max(0, Math.floor((y / height) * rows)));
}

/**
 * The value axis both histograms share: the union of their finite ranges.
 * @param {Item} a
 * @param {Item} b
 * @returns {[number, number]}
 */
export function sharedRange(a, b) {
  const los = [a.lo, b.lo].filter(Number.isFinite);
  const his = [a.hi, b.hi].filter(Number.isFinite);
  return los.length && his.length ? [Math.min(...los), Math.max(...his)] : [a.lo, a.hi];
}

/**
 * An item's counts on `bins` equal bins over [lo, hi], each source bin's count spread over the
 * target bins it overlaps (in proportion), so histograms over different ranges share one axis
 * without the comb pattern that moving whole bins gives.
 * @param {Item} it
 * @param {number} lo
 * @param {number} hi
 * @param {number} bins
 */
export function rebin(it, lo, hi, bins) {
  const out = new Float64Array(bins);
  const n = it.counts.length;
  const w = (it.hi - it.lo) / Math.max(1, n);
  const span = hi - lo;
  const at = (/** @type {number} */ x) => (span > 0 ? ((x - lo) / span) * bins : bins / 2);
  for (let j = 0; j < n; j++) {
    const c = it.counts[j];
    if (!(c > 0)) continue;
    const a = Math.min(bins, Math.max(0, at(it.lo + j * w)));
    const b = Math.min(bins, Math.max(0, at(it.lo + (j + 1) * w)));
    if (!(b - a > 1e-12)) { // a zero-width bin (one value): all of it where it lies
      out[Math.min(bins - 1, Math.floor(a))] += c;
      continue;
    }
    for (let k = Math.floor(a); k < b && k < bins; k++) {
      out[k] += (c * (Math.min(b, k + 1) - Math.max(a, k))) / (b - a);
    }
  }
  return out;
}

/**
 * A histogram's outline (a step line along the bar tops) over what the canvas already shows,
 * on a `halo` of the background's colour: it stays visible where it runs along the bars'
 * tops (two steps alike) and across the bars.
 * @param {HTMLCanvasElement} canvas
 * @param {ArrayLike<number>} counts
 * @param {{ width: number, height: number, color: string, halo: string, top: number, share: (c: number, max: number) => number }} o
 */
export function drawOutline(canvas, counts, { width, height, color, halo, top, share }) {
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const n = counts.length;
  if (n === 0 || !(top > 0)) return;
  ctx.lineJoin = "miter";
  ctx.beginPath();
  let y = height;
  ctx.moveTo(0, height);
  for (let i = 0; i < n; i++) {
    const x0 = (i * width) / n;
    const x1 = ((i + 1) * width) / n;
    const c = counts[i];
    // just above the bar top, on whole pixels: the halo takes the bar's top row, not the line
    const next = c > 0 ? Math.max(1, height - Math.max(1, Math.round(share(c, top) * height)) - 1) : height;
    ctx.lineTo(x0, y);
    ctx.lineTo(x0, next);
    ctx.lineTo(x1, next);
    y = next;
  }
  ctx.lineTo(width, height);
  ctx.strokeStyle = halo;
  ctx.lineWidth = 4;
  ctx.stroke();
  ctx.strokeStyle = color;
  ctx.lineWidth = 2;
  ctx.stroke();
}

/**
 * Mark the pinned row of a heat strip (a frame around it).
 * @param {HTMLCanvasElement} canvas
 * @param {number} row
 * @param {number} rows
 * @param {{ width: number, height: number, color: string }} o
 */
export function markRow(canvas, row, rows, { width, height, color }) {
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const h = height / rows;
  ctx.strokeStyle = color;
  ctx.lineWidth = 1;
  ctx.strokeRect(0.5, Math.round(row * h) + 0.5, width - 1, Math.max(1, Math.round(h) - 1));
}
