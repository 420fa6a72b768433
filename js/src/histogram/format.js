// Numbers as shown: compact (3 significant digits, "7.45e-8") and whole, never cut by a box;
// the full value for a hover title; stats text for one item, e.g.
// "mean 0.12 std 1 min -3.1 max 2.9 zeros 0% NaN 0 Inf 0 shape [1, 2] float32".

/** @typedef {import("../types.js").Item} Item */

/**
 * Compact text of `x`: `digits` significant digits, exponent form below 1e-3 and from 1e5
 * ("-3.17e-5", "1.2e5"), trailing zeros dropped.
 * @param {number | null | undefined} x
 * @param {number} [digits]
 */
export function num(x, digits = 3) {
  if (x == null || Number.isNaN(x)) return "–";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  const a = Math.abs(x);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) {
    const [mantissa, exponent] = x.toExponential(digits - 1).split("e");
    const m = mantissa.includes(".") ? mantissa.replace(/\.?0+$/, "") : mantissa;
    return `${m}e${exponent.replace("+", "")}`;
  }
  return String(Number(x.toPrecision(digits)));
}

/**
 * The full value of `x` for a hover title (the shortest text that reads back as the same
 * number), "" when there is none.
 * @param {number | null | undefined} x
 */
export function fullNum(x) {
  if (x == null) return "";
  if (Number.isNaN(x)) return "NaN";
  return Number.isFinite(x) ? String(x) : x > 0 ? "inf" : "-inf";
}

/**
 * `[lo, hi]` compact, with as many digits as it takes (up to 8) for two different values to
 * read differently: a range never shows "0.123 … 0.123".
 * @param {number} lo
 * @param {number} hi
 * @returns {[string, string]}
 */
export function rangeText(lo, hi) {
  let digits = 3;
  while (digits < 8 && lo !== hi && num(lo, digits) === num(hi, digits)) digits += 1;
  return [num(lo, digits), num(hi, digits)];
}

/**
 * A small chart's `[lo, hi]` labels, short enough for its width: 3 significant digits each
 * ("0.21", "0.256"); a range too narrow for that ("0.827" both) reads as its low end and how
 * far above it the high end lies: `["0.8273", "+3.1e-5"]`, never "0.8273 … 0.82733".
 * @param {number} lo
 * @param {number} hi
 * @returns {[string, string]}
 */
export function spanText(lo, hi) {
  if (lo === hi || num(lo) !== num(hi)) return [num(lo), num(hi)];
  return [num(lo, 4), `+${num(hi - lo, 2)}`];
}

/** @param {number} share in [0, 1] */
export function percent(share) {
  const p = share * 100;
  return `${p > 0 && p < 1 ? p.toFixed(1) : Math.round(p)}%`;
}

/**
 * The stats of one item as `[label, text, full value ("" when the text is whole)]`.
 * @param {Item} it
 * @returns {[string, string, string][]}
 */
export function statsParts(it) {
  const value = (/** @type {string} */ label, /** @type {number | null} */ x) => {
    const text = num(x);
    const full = fullNum(x);
    return /** @type {[string, string, string]} */ ([label, text, full === text ? "" : full]);
  };
  return [
    value("mean", it.mean), value("std", it.std), value("min", it.min), value("max", it.max),
    ["zeros", percent(it.zeros), `${fullNum(it.zeros * 100)}%`], ["NaN", String(it.nans), ""],
    ["Inf", String(it.infs), ""], ["shape", `[${it.shape.join(", ")}] ${it.dtype}`, ""],
  ];
}

/** @param {Item} it */
export function statsText(it) {
  return statsParts(it).map(([label, text]) => `${label} ${text}`).join(" ");
}

/**
 * " · train" / " · eval" for items that say which mode the model was in ("" for older items).
 * @param {{ training?: boolean }} it
 */
export function modeText(it) {
  return it.training === undefined ? "" : it.training ? " · train" : " · eval";
}
