// Canvas drawing: one histogram, and the history heat strip (steps x value, like TensorBoard's
// histogram view seen from above). Background stays transparent; the theme paints behind it.

/** @typedef {import("../types.js").Item} Item */

/**
 * Size the backing store for the device pixel ratio; returns a context in CSS pixels.
 * @param {HTMLCanvasElement} canvas
 * @param {number} w CSS width
 * @param {number} h CSS height
 */
function prepare(canvas, w, h) {
  const dpr = Math.max(1, Math.round(window.devicePixelRatio || 1));
  if (canvas.width !== w * dpr || canvas.height !== h * dpr) {
    canvas.width = w * dpr;
    canvas.height = h * dpr;
  }
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return ctx;
}

/**
 * Bars, one per bin, height proportional to count; a non-zero bin is at least 1px tall.
 * @param {HTMLCanvasElement} canvas
 * @param {ArrayLike<number>} counts
 * @param {{ width: number, height: number, color: string }} o
 */
export function drawHistogram(canvas, counts, { width, height, color }) {
  const ctx = prepare(canvas, width, height);
  const n = counts.length;
  let max = 0;
  for (let i = 0; i < n; i++) if (counts[i] > max) max = counts[i];
  if (n === 0 || max <= 0) return;
  ctx.fillStyle = color;
  for (let i = 0; i < n; i++) {
    const c = counts[i];
    if (!(c > 0)) continue;
    const x0 = Math.floor((i * width) / n);
    const x1 = Math.max(x0 + 1, Math.floor(((i + 1) * width) / n) - (width / n >= 3 ? 1 : 0));
    const bh = Math.max(1, Math.round((c / max) * height));
    ctx.fillRect(x0, height - bh, x1 - x0, bh);
  }
}

/**
 * Heat strip: one row per step (oldest at top), columns over the common value range of all
 * steps; each step's bins are re-binned by their centers, intensity = count / row max.
 * @param {HTMLCanvasElement} canvas
 * @param {Item[]} history
 * @param {{ width: number, height: number, color: string, columns?: number }} o
 */
export function drawHeat(canvas, history, { width, height, color, columns = 64 }) {
  const ctx = prepare(canvas, width, height);
  const steps = history.slice(-Math.max(1, Math.floor(height)));
  if (steps.length === 0) return;
  let lo = Infinity;
  let hi = -Infinity;
  for (const it of steps) {
    if (Number.isFinite(it.lo)) lo = Math.min(lo, it.lo);
    if (Number.isFinite(it.hi)) hi = Math.max(hi, it.hi);
  }
  if (!(lo <= hi)) return;
  const span = hi - lo;
  const rowH = height / steps.length;
  const colW = width / columns;
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
      ctx.fillRect(k * colW, s * rowH, Math.ceil(colW), Math.ceil(rowH));
    }
  });
  ctx.globalAlpha = 1;
}
