// Where values first went NaN / Inf (trait `nonfinite`, PROTOCOL.md): the message line above
// the panels, the first bad record of each layer for the tree's marker, a histogram's
// "all values NaN".

import { h } from "./dom.js";

/** @typedef {import("./types.js").Model} Model */
/** @typedef {import("./types.js").NonFinite} NonFinite */
/** @typedef {import("./dom.js").Disposer} Disposer */

/**
 * The first bad record of each layer (the list is oldest first).
 * @param {NonFinite[] | undefined} list
 * @returns {Map<string, NonFinite>}
 */
export function firstBadOfLayers(list) {
  /** @type {Map<string, NonFinite>} */
  const out = new Map();
  for (const entry of list ?? []) if (!out.has(entry[0])) out.set(entry[0], entry);
  return out;
}

/**
 * "1,024 NaN", "3 Inf", "8 NaN, 2 Inf".
 * @param {number} nans
 * @param {number} infs
 */
export function badCounts(nans, infs) {
  return [nans ? `${nans.toLocaleString("en-US")} NaN` : "", infs ? `${infs.toLocaleString("en-US")} Inf` : ""]
    .filter(Boolean).join(", ");
}

/**
 * What an item's empty histogram says: "all values NaN", or "no finite values: 3 NaN, 5 Inf"
 * ("" when some value is finite: the histogram draws it).
 * @param {{ numel: number, nans: number, infs: number }} it
 */
export function noFiniteText(it) {
  if (it.numel === 0 || it.nans + it.infs < it.numel) return "";
  return it.nans === it.numel ? "all values NaN" : `no finite values: ${badCounts(it.nans, it.infs)}`;
}

/**
 * What a key's leaf is, in words: "output", "gradient of output[0]", "gradient of weight".
 * @param {string} leaf
 */
function leafWords(leaf) {
  if (leaf.startsWith("grad_")) return `gradient of ${leaf.slice(5)}`;
  if (leaf.endsWith(".grad")) return `gradient of ${leaf.slice(0, -5)}`;
  return leaf;
}

/**
 * Where an entry is: "layer3.0.conv1 (output)", "the model's input", "the gradient of the
 * model's output" (the model's own keys have the layer "").
 * @param {string} layer
 * @param {string} key
 */
export function placeText(layer, key) {
  const leaf = layer && key.startsWith(`${layer}/`) ? key.slice(layer.length + 1) : key;
  const words = leafWords(leaf);
  if (layer) return `${layer} (${words})`;
  return words.startsWith("gradient of ") ? `the ${words.replace("of ", "of the model's ")}` : `the model's ${words}`;
}

/**
 * The message naming where values broke ("" while none did); the first entry's counts when
 * they were measured (Python locates a layer it did not record: no counts).
 * @param {NonFinite[] | undefined} list
 */
export function nonfiniteText(list) {
  if (!list?.length) return "";
  const [layer, key, step, nans, infs] = list[0];
  const counts = badCounts(nans, infs);
  const more = list.length > 1 ? ` (then ${list.length - 1} more key${list.length > 2 ? "s" : ""})` : "";
  return `Non-finite values first in ${placeText(layer, key)} at step ${step}${counts ? `: ${counts}` : ""}${more}`;
}

/**
 * @param {Model} model
 * @param {Disposer} d
 */
export function nonfiniteLine(model, d) {
  const el = h("p", { class: "sw-nonfinite-line", role: "alert" });
  const paint = () => {
    el.textContent = nonfiniteText(model.get("nonfinite"));
    el.hidden = !el.textContent;
  };
  d.onModel(model, "change:nonfinite", paint);
  paint();
  return el;
}
