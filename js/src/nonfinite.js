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
 * The message naming where values broke ("" while none did).
 * @param {NonFinite[] | undefined} list
 */
export function nonfiniteText(list) {
  if (!list?.length) return "";
  const [layer, key, step, nans, infs] = list[0];
  const more = list.length > 1 ? ` (then ${list.length - 1} more key${list.length > 2 ? "s" : ""})` : "";
  return `Non-finite values first in ${layer} at step ${step}: ${key} had ${badCounts(nans, infs)}${more}`;
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
