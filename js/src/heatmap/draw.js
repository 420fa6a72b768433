// Canvas painting of attention maps: one canvas pixel per map cell, coloured by the shared
// colormap LUT (../colormap.js, generated from matplotlib); CSS scales it up, pixelated.

import { COLORMAP } from "../colormap.js";

/** @typedef {import("./store.js").AttentionMap} AttentionMap */

/**
 * RGBA pixels of a uint8 map: value v gets COLORMAP entry v.
 * @param {Uint8Array} values
 * @returns {Uint8ClampedArray<ArrayBuffer>}
 */
export function colorize(values) {
  const out = new Uint8ClampedArray(new ArrayBuffer(values.length * 4));
  for (let i = 0; i < values.length; i++) {
    const c = values[i] * 3;
    const o = i * 4;
    out[o] = COLORMAP[c];
    out[o + 1] = COLORMAP[c + 1];
    out[o + 2] = COLORMAP[c + 2];
    out[o + 3] = 255;
  }
  return out;
}

/**
 * Paint `m` into `canvas` (backing store = map size) shown at `size` CSS pixels on its long side.
 * @param {HTMLCanvasElement} canvas
 * @param {AttentionMap} m
 * @param {number} size
 */
export function paintMap(canvas, m, size) {
  if (canvas.width !== m.cols || canvas.height !== m.rows) {
    canvas.width = m.cols;
    canvas.height = m.rows;
  }
  const long = Math.max(m.rows, m.cols);
  canvas.style.width = `${Math.round((size * m.cols) / long)}px`;
  canvas.style.height = `${Math.round((size * m.rows) / long)}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.putImageData(new ImageData(colorize(m.values), m.cols, m.rows), 0, 0);
}

/**
 * Token labels along one axis, every n-th when they would overlap; blank when pooled.
 * @param {HTMLCanvasElement} canvas
 * @param {string[] | null} tokens
 * @param {number} cells cells along the axis (labels only when cells === tokens.length)
 * @param {number} length CSS pixels along the axis
 * @param {"rows" | "cols"} axis rows: query labels left of the map; cols: key labels above it
 * @param {string} color
 */
export function paintLabels(canvas, tokens, cells, length, axis, color) {
  const depth = 72;
  const dpr = Math.max(1, Math.round(window.devicePixelRatio || 1));
  const [w, h] = axis === "rows" ? [depth, length] : [length, depth];
  canvas.width = w * dpr;
  canvas.height = h * dpr;
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  if (!tokens || tokens.length !== cells || cells === 0) return;
  const cell = length / cells;
  const every = Math.max(1, Math.ceil(11 / cell));
  ctx.fillStyle = color;
  ctx.font = `${Math.min(11, Math.max(8, cell - 1))}px sans-serif`;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  for (let i = 0; i < cells; i += every) {
    const text = tokens[i].length > 10 ? `${tokens[i].slice(0, 9)}…` : tokens[i];
    const at = (i + 0.5) * cell;
    if (axis === "rows") {
      ctx.fillText(text, depth - 3, at);
    } else {
      ctx.save();
      ctx.translate(at, depth - 3);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.fillText(text, 0, 0);
      ctx.restore();
    }
  }
}
