// Canvas painting of attention maps: one canvas pixel per map cell, coloured by the one rule of
// ./colour.js (the colormap LUT of ../colormap.js, generated from matplotlib); CSS scales it up.

import { prepare } from "../canvas.js";
import { COLORMAP } from "../colormap.js";
import { mapIndices } from "./colour.js";

/** @typedef {import("./store.js").AttentionMap} AttentionMap */

/** @typedef {import("./colour.js").Scale} Scale */

/**
 * RGBA pixels of COLORMAP entries (`table[v]` of each value when a table is given).
 * @param {Uint8Array} values
 * @param {Uint8Array} [table]
 * @returns {Uint8ClampedArray<ArrayBuffer>}
 */
export function colorize(values, table) {
  const out = new Uint8ClampedArray(new ArrayBuffer(values.length * 4));
  for (let i = 0; i < values.length; i++) {
    const c = (table ? table[values[i]] : values[i]) * 3;
    const o = i * 4;
    out[o] = COLORMAP[c];
    out[o + 1] = COLORMAP[c + 1];
    out[o + 2] = COLORMAP[c + 2];
    out[o + 3] = 255;
  }
  return out;
}

/**
 * Paint `m` into `canvas` (backing store = map size) shown at `size` CSS pixels on its long
 * side, coloured by the shared rule (./colour.js) on `scale`.
 * @param {HTMLCanvasElement} canvas
 * @param {AttentionMap} m
 * @param {number} size
 * @param {Scale} scale
 */
export function paintMap(canvas, m, size, scale) {
  if (canvas.width !== m.cols || canvas.height !== m.rows) {
    canvas.width = m.cols;
    canvas.height = m.rows;
  }
  const long = Math.max(m.rows, m.cols);
  canvas.style.width = `${Math.round((size * m.cols) / long)}px`;
  canvas.style.height = `${Math.round((size * m.rows) / long)}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.putImageData(new ImageData(colorize(mapIndices(m, scale)), m.cols, m.rows), 0, 0);
}

/**
 * The colour legend's bar: the whole colormap, low end at the left.
 * @param {HTMLCanvasElement} canvas
 */
export function paintLegendBar(canvas) {
  if (canvas.width === 256) return;
  canvas.width = 256;
  canvas.height = 1;
  const ramp = new Uint8Array(256).map((_, i) => i);
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.putImageData(new ImageData(colorize(ramp), 256, 1), 0, 0);
}

/**
 * Token labels along one axis, every n-th when they would overlap; blank when pooled.
 * @param {HTMLCanvasElement} canvas
 * @param {string[] | null} tokens
 * @param {number} cells cells along the axis (labels only when cells === tokens.length)
 * @param {number} length CSS pixels along the axis
 * @param {"rows" | "cols"} axis rows: query labels left of the map; cols: key labels above it
 * @param {string} color
 * @param {{ index: number, background: string, color: string } | null} [mark] one label drawn highlighted
 */
export function paintLabels(canvas, tokens, cells, length, axis, color, mark = null) {
  const depth = 72;
  const [w, h] = axis === "rows" ? [depth, length] : [length, depth];
  const ctx = prepare(canvas, w, h);
  if (!tokens || tokens.length !== cells || cells === 0) return;
  const cell = length / cells;
  const every = Math.max(1, Math.ceil(11 / cell));
  ctx.fillStyle = color;
  ctx.font = `${Math.min(11, Math.max(8, cell - 1))}px sans-serif`;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  for (let i = 0; i < cells; i++) {
    if (i % every !== 0 && i !== mark?.index) continue;
    const text = tokens[i].length > 10 ? `${tokens[i].slice(0, 9)}…` : tokens[i];
    const at = (i + 0.5) * cell;
    ctx.fillStyle = color;
    if (i === mark?.index) {
      ctx.fillStyle = mark.background;
      if (axis === "rows") ctx.fillRect(0, i * cell, depth, Math.max(cell, 11));
      else ctx.fillRect(i * cell, 0, Math.max(cell, 11), depth);
      ctx.fillStyle = mark.color;
    }
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
