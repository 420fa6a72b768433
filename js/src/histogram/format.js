// Stats text for one item, e.g. "mean 0.12 std 1 min -3.1 max 2.9 zeros 0% NaN 0 Inf 0 shape [1, 2] float32".

/** @typedef {import("../types.js").Item} Item */

/** @param {number | null | undefined} x */
export function num(x) {
  if (x == null || Number.isNaN(x)) return "–";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  const a = Math.abs(x);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return x.toExponential(2);
  return String(Number(x.toPrecision(3)));
}

/** @param {number} share in [0, 1] */
export function percent(share) {
  const p = share * 100;
  return `${p > 0 && p < 1 ? p.toFixed(1) : Math.round(p)}%`;
}

/** @param {Item} it */
export function statsText(it) {
  return [
    `mean ${num(it.mean)}`, `std ${num(it.std)}`, `min ${num(it.min)}`, `max ${num(it.max)}`,
    `zeros ${percent(it.zeros)}`, `NaN ${it.nans}`, `Inf ${it.infs}`,
    `shape [${it.shape.join(", ")}] ${it.dtype}`,
  ].join(" ");
}

/**
 * " · train" / " · eval" for items that say which mode the model was in ("" for older items).
 * @param {{ training?: boolean }} it
 */
export function modeText(it) {
  return it.training === undefined ? "" : it.training ? " · train" : " · eval";
}
