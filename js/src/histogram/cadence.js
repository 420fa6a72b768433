// How often a key updates (" · every 2.6 s") and how much of the tensor its histogram binned
// ("histogram of 65,536 samples"), from the item's optional `every` and `sampled` fields.

/** @typedef {import("../types.js").Item} Item */

/**
 * " · every 2.6 s" (seconds between the key's recent records, Python's History.every); "" when
 * not known.
 * @param {{ every?: number | null }} it
 */
export function everyText(it) {
  const s = it.every;
  if (s == null || !Number.isFinite(s) || s < 0) return "";
  const shown = s < 10 ? s.toFixed(1) : s < 120 ? String(Math.round(s)) : `${(s / 60).toFixed(1)} min`;
  return ` · every ${shown}${s < 120 ? " s" : ""}`;
}

/**
 * "histogram of 65,536 samples" when the histogram binned a sample of the tensor; "" when it
 * binned every value.
 * @param {{ sampled?: number }} it
 */
export function sampledText(it) {
  return it.sampled ? `histogram of ${it.sampled.toLocaleString("en-US")} samples` : "";
}
