// The one canvas set-up every drawing uses: a backing store sized for the device pixel ratio
// (sharp on HiDPI screens), drawn in CSS pixels, cleared (the theme paints behind it).

/**
 * Size the backing store for the device pixel ratio; returns a cleared context in CSS pixels.
 * @param {HTMLCanvasElement} canvas
 * @param {number} w CSS width
 * @param {number} h CSS height
 * @returns {CanvasRenderingContext2D}
 */
export function prepare(canvas, w, h) {
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
