// Recorded run or live Explorer (PROTOCOL.md "Recorded runs"): the `run` trait is `{layers: [...]}`
// for `Explorer.from_run`, absent or `{}` for a live Explorer.

/** @typedef {import("./types.js").Model} Model */

/**
 * The recorded layers of a run, or `null` for a live Explorer.
 * @param {Model} model
 * @returns {Set<string> | null}
 */
export function recordedLayers(model) {
  const layers = model.get("run")?.layers;
  return Array.isArray(layers) ? new Set(layers) : null;
}
