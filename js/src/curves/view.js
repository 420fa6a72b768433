// Per tensor leaf: mean, std and L2 norm over the steps in the history, one small chart each.

import { h, showNumber } from "../dom.js";
import { fullNum, num, spanText } from "../histogram/format.js";
import { drawCurve } from "./draw.js";

/** @typedef {import("../types.js").Item} Item */
/** @typedef {import("./draw.js").Point} Point */

/** The statistics charted, in order: [field, label]. */
export const CURVES = /** @type {const} */ ([["mean", "mean"], ["std", "std"], ["l2", "L2 norm"]]);

const SIZE = { width: 88, height: 36 };

/**
 * Points of one statistic over a history.
 * @param {Item[]} history
 * @param {"mean" | "std" | "l2"} field
 * @returns {Point[]}
 */
export function curvePoints(history, field) {
  return history.map((it) => ({ step: it.step, value: it[field] ?? null, bad: it.nans + it.infs > 0 }));
}

/**
 * The charts' element for one leaf (empty until `paintCurves`).
 * @param {string} label e.g. "fc output"
 */
export function curvesBlock(label) {
  return h("div", { class: "sw-curves" }, CURVES.map(([field, name]) => h("figure", { class: "sw-curve", "data-stat": field }, [
    h("figcaption", {}, [h("span", { class: "sw-curve-name", text: name }), " ", h("span", { class: "sw-curve-last" })]),
    h("canvas", { role: "img", "aria-label": `${name} of ${label} over steps` }),
    h("div", { class: "sw-curve-range" }, [h("span", { class: "sw-curve-lo" }), h("span", { class: "sw-curve-hi" })]),
  ])));
}

/**
 * @param {HTMLElement} block from curvesBlock
 * @param {Item[]} history
 * @param {{ color: string, badColor: string }} colors
 */
export function paintCurves(block, history, colors) {
  const bad = history.filter((it) => it.nans + it.infs > 0).map((it) => it.step);
  block.dataset.badSteps = bad.join(",");
  for (const [field] of CURVES) {
    const fig = /** @type {HTMLElement} */ (block.querySelector(`[data-stat="${field}"]`));
    const points = curvePoints(history, field);
    const range = drawCurve(/** @type {HTMLCanvasElement} */ (fig.querySelector("canvas")), points, { ...SIZE, ...colors });
    // a statistic never measured (a recorded run stores no L2) shows nothing, not "no finite value"
    fig.hidden = bad.length === 0 && points.every((p) => p.value == null);
    const last = history[history.length - 1];
    const q = (/** @type {string} */ s) => /** @type {HTMLElement} */ (fig.querySelector(s));
    showNumber(q(".sw-curve-last"), last ? num(last[field]) : "", last ? fullNum(last[field]) : "");
    const [lo, hi] = range ? spanText(range[0], range[1]) : ["no finite value", ""];
    showNumber(q(".sw-curve-lo"), lo, range ? fullNum(range[0]) : "");
    // "… 0.256", or "+3.1e-5" for a narrow range (its "+" says what it is; one line at 88 px)
    const hiText = !range ? "" : hi.startsWith("+") ? hi : `… ${hi}`;
    showNumber(q(".sw-curve-hi"), hiText, range ? fullNum(range[1]) : "");
  }
}
