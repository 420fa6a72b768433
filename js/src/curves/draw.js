// Small line charts of one statistic over steps (as TensorBoard's scalars), steps with NaN/Inf
// values marked by a red bar across the chart.

import { prepare } from "../canvas.js";

/**
 * One point per step; `value` null when it was not finite. `bad` marks a step whose tensor held NaN/Inf.
 * @typedef {{ step: number, value: number | null, bad: boolean }} Point
 */

/**
 * Value range of the finite points, widened when flat so the line sits in the middle.
 * @param {Point[]} points
 * @returns {[number, number] | null}
 */
export function valueRange(points) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const p of points) {
    if (p.value === null || !Number.isFinite(p.value)) continue;
    lo = Math.min(lo, p.value);
    hi = Math.max(hi, p.value);
  }
  if (!(lo <= hi)) return null;
  if (hi === lo) {
    const pad = Math.abs(lo) * 0.05 || 1;
    return [lo - pad, hi + pad];
  }
  return [lo, hi];
}

/**
 * Draw `points` (sorted by step) into `canvas`; returns the value range drawn, or null.
 * @param {HTMLCanvasElement} canvas
 * @param {Point[]} points
 * @param {{ width: number, height: number, color: string, badColor: string }} o
 * @returns {[number, number] | null}
 */
export function drawCurve(canvas, points, { width, height, color, badColor }) {
  const ctx = prepare(canvas, width, height);
  if (points.length === 0) return null;
  const s0 = points[0].step;
  const s1 = points[points.length - 1].step;
  const x = (/** @type {number} */ s) => (s1 > s0 ? ((s - s0) / (s1 - s0)) * (width - 4) + 2 : width / 2);
  ctx.fillStyle = badColor;
  for (const p of points) if (p.bad) ctx.fillRect(Math.round(x(p.step)) - 1, 0, 3, height);
  const range = valueRange(points);
  if (!range) return null;
  const [lo, hi] = range;
  const y = (/** @type {number} */ v) => height - 3 - ((v - lo) / (hi - lo)) * (height - 6);
  ctx.strokeStyle = color;
  ctx.fillStyle = color;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  let open = false;
  for (const p of points) {
    if (p.value === null || !Number.isFinite(p.value)) { open = false; continue; }
    if (open) ctx.lineTo(x(p.step), y(p.value));
    else ctx.moveTo(x(p.step), y(p.value));
    open = true;
  }
  ctx.stroke();
  if (points.length === 1 && points[0].value !== null) ctx.fillRect(x(s0) - 2, y(points[0].value) - 2, 4, 4);
  return range;
}
