// Exact zeros as a bar of their own beside the histogram ("0: 35%"): the bins leave them out
// (Python's tensor_stats), so a ReLU's third of zeros does not flatten the rest of the shape.

import { percent } from "./format.js";

/**
 * The zero bar's label: "0: 35%", or "" when the tensor held no exact zero.
 * @param {number | null | undefined} share exact zeros over all values, in [0, 1]
 */
export function zeroLabel(share) {
  return share != null && share > 0 ? `0: ${percent(share)}` : "";
}

/**
 * Paint the zero bar `el` (a `.sw-zero` block: `.sw-zero-label`, `.sw-zero-track` holding
 * `.sw-zero-fill` and `.sw-zero-pin`): the fill's height is the share of exact zeros (its own
 * scale, 0-100% of all values); a pinned step's share is a line across the track. Hidden when
 * neither step held an exact zero.
 * @param {HTMLElement} el
 * @param {number} share the latest step's share of exact zeros
 * @param {number | null} pinned the pinned step's share, null when no step is pinned
 * @param {{ color: string, pinColor: string }} colors the bars' colour, the pinned step's
 */
export function paintZeroBar(el, share, pinned, { color, pinColor }) {
  const label = zeroLabel(share) || (pinned ? "0: 0%" : "");
  el.hidden = !label;
  if (!label) return;
  const q = (/** @type {string} */ s) => /** @type {HTMLElement} */ (el.querySelector(s));
  q(".sw-zero-label").textContent = label;
  const pinText = pinned != null ? ` (pinned step: ${percent(pinned)})` : "";
  el.title = `exact zeros: ${percent(share)} of all values${pinText}; the bars leave them out`;
  el.setAttribute("aria-label", el.title);
  const fill = q(".sw-zero-fill");
  fill.style.background = color;
  fill.style.height = `${Math.max(share > 0 ? 1 : 0, Math.min(100, share * 100))}%`;
  const mark = q(".sw-zero-pin");
  mark.hidden = pinned == null;
  mark.style.borderColor = pinColor;
  if (pinned != null) mark.style.bottom = `${Math.min(100, pinned * 100)}%`;
}
