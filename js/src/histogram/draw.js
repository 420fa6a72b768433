// Canvas drawing: one histogram, and the history heat strip (steps x value, like TensorBoard's
// histogram view seen from above). Background stays transparent; the theme paints behind it.

import { prepare } from "../canvas.js";

/** @typedef {import("../types.js").Item} Item */

/**
 * Bar height as a share of the axis: count / max, or log(1 + count) / log(1 + max) on a log axis.
 * @param {number} count
 * @param {number} max
 * @param {boolean} log
 */
export function barShare(count, max, log) {
  if (!(count > 0) || !(max > 0)) return 0;
  return log ? Math.log1p(count) / Math.log1p(max) : count / max;
}

/**
 * x of value 0 on a [lo, hi] axis `width` pixels wide, or null when 0 is not inside (lo, hi).
 * @param {number} lo
 * @param {number} hi
 * @param {number} width
 */
export function zeroX(lo, hi, width) {
  return lo < 0 && hi > 0 ? Math.round((-lo / (hi - lo)) * width) : null;
}

/**
 * Bars, one per bin, height proportional to count (or log count); a non-zero bin is at least 1px
 * tall. A dashed line marks 0 when it lies inside (lo, hi). Returns the axis top: `top` when given
 * (an axis shared with another histogram), else the largest count.
 * @param {HTMLCanvasElement} canvas
 * @param {ArrayLike<number>} counts
 * @param {{ width: number, height: number, color: string, log?: boolean, lo?: number, hi?: number, zeroColor?: string, top?: number }} o
 */
export function drawHistogram(canvas, counts, { width, height, color, log = false, lo = 0, hi = 0, zeroColor = "#888", top }) {
  const ctx = prepare(canvas, width, height);
  const n = counts.length;
  let max = 0;
  for (let i = 0; i < n; i++) if (counts[i] > max) max = counts[i];
  if (top !== undefined) max = top;
  const zero = zeroX(lo, hi, width);
  if (zero !== null) {
    ctx.fillStyle = zeroColor;
    for (let y = 0; y < height; y += 4) ctx.fillRect(zero, y, 1, 2);
  }
  if (n === 0 || max <= 0) return max;
  ctx.fillStyle = color;
  for (let i = 0; i < n; i++) {
    const c = counts[i];
    if (!(c > 0)) continue;
    const x0 = Math.floor((i * width) / n);
    const x1 = Math.max(x0 + 1, Math.floor(((i + 1) * width) / n) - (width / n >= 3 ? 1 : 0));
    const bh = Math.max(1, Math.round(barShare(c, max, log) * height));
    ctx.fillRect(x0, height - bh, x1 - x0, bh);
  }
  return max;
}

/** Width of the train/eval mark at the left of the history strip. */
export const MODE_MARK = 4;

/**
 * Heat strip: one row per step (oldest at top), columns over the common value range of all
 * steps; each step's bins are re-binned by their centers, intensity = count / row max.
 * When items say whether the model was training (`training`), a mark at the left shows it per
 * row (`modes.train` / `modes.eval`). Returns the steps drawn (oldest first).
 * @param {HTMLCanvasElement} canvas
 * @param {Item[]} history
 * @param {{ width: number, height: number, color: string, columns?: number, modes?: { train: string, eval: string } }} o
 * @returns {Item[]}
 */
export function drawHeat(canvas, history, { width, height, color, columns = 64, modes }) {
  const ctx = prepare(canvas, width, height);
  const steps = history.slice(-Math.max(1, Math.floor(height)));
  if (steps.length === 0) return steps;
  const marked = modes !== undefined && steps.some((it) => typeof it.training === "boolean");
  const left = marked ? MODE_MARK + 2 : 0;
  if (marked && modes) {
    const rowH = height / steps.length;
    steps.forEach((it, s) => {
      if (typeof it.training !== "boolean") return;
      ctx.fillStyle = it.training ? modes.train : modes.eval;
      ctx.fillRect(0, s * rowH, MODE_MARK, Math.ceil(rowH));
    });
  }
  let lo = Infinity;
  let hi = -Infinity;
  for (const it of steps) {
    if (Number.isFinite(it.lo)) lo = Math.min(lo, it.lo);
    if (Number.isFinite(it.hi)) hi = Math.max(hi, it.hi);
  }
  if (!(lo <= hi)) return steps;
  const span = hi - lo;
  const rowH = height / steps.length;
  const colW = (width - left) / columns;
  ctx.fillStyle = color;
  steps.forEach((it, s) => {
    const grid = new Float64Array(columns);
    const n = it.counts.length;
    const w = (it.hi - it.lo) / Math.max(1, n);
    for (let j = 0; j < n; j++) {
      const c = it.counts[j];
      if (!(c > 0)) continue;
      const center = it.lo + (j + 0.5) * w;
      const col = span > 0 ? Math.floor(((center - lo) / span) * columns) : columns >> 1;
      grid[Math.min(columns - 1, Math.max(0, col))] += c;
    }
    let max = 0;
    for (const v of grid) max = Math.max(max, v);
    if (max <= 0) return;
    for (let k = 0; k < columns; k++) {
      if (grid[k] <= 0) continue;
      ctx.globalAlpha = 0.15 + 0.85 * (grid[k] / max);
      ctx.fillRect(left + k * colW, s * rowH, Math.ceil(colW), Math.ceil(rowH));
    }
  });
  ctx.globalAlpha = 1;
  return steps;
}
