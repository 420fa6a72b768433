// How often a key updates (" · every 2.6 s", " · every 40 ms", " · every step, 12 ms apart") and how much of the tensor its histogram binned
// ("histogram of 65,536 samples"), from the item's optional `every` and `sampled` fields.

/** @typedef {import("../types.js").Item} Item */

/**
 * " · every 2.6 s" (seconds between the key's recent records, Python's History.every); below a
 * second in milliseconds (" · every 40 ms", never "0.0 s"); "" when not known. `everyStep`
 * (the `max_rate` trait is 0: no throttle) says so: " · every step, 12 ms apart".
 * @param {{ every?: number | null }} it
 * @param {boolean} [everyStep]
 */
export function everyText(it, everyStep = false) {
  const s = it.every;
  if (s == null || !Number.isFinite(s) || s < 0) return everyStep ? " · every step" : "";
  const ms = s * 1000;
  const shown = ms < 1 ? "< 1 ms" : s < 0.95 ? `${Number(ms.toPrecision(2))} ms`
    : s < 10 ? `${s.toFixed(1)} s` : s < 120 ? `${Math.round(s)} s` : `${(s / 60).toFixed(1)} min`;
  return everyStep ? ` · every step, ${shown} apart` : ` · every ${shown}`;
}

/**
 * "histogram of 65,536 samples" when the histogram binned a sample of the tensor; "" when it
 * binned every value.
 * @param {{ sampled?: number }} it
 */
export function sampledText(it) {
  return it.sampled ? `histogram of ${it.sampled.toLocaleString("en-US")} samples` : "";
}
