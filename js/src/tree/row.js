// One treeitem element. Rows are absolutely positioned inside the scroll spacer.

import { h, formatCount } from "../dom.js";
import { badCounts } from "../nonfinite.js";

/** @typedef {import("./flatten.js").VisibleRow} VisibleRow */
/** @typedef {import("../types.js").ShapeInfo} ShapeInfo */
/** @typedef {import("../types.js").NonFinite} NonFinite */

/** Row height in CSS pixels; must match `.sw-row` height in tree.css. */
export const ROW_HEIGHT = 24;

/**
 * Text after the parent's prefix ("layer1.0.conv1" under "layer1.0" -> "conv1").
 * @param {import("../types.js").Row} row
 */
export function shortName(row) {
  const p = row.parent;
  return p && row.name.startsWith(`${p}.`) ? row.name.slice(p.length + 1) : row.name;
}

/** @param {ShapeInfo | undefined} s */
export function shapeText(s) {
  return s ? `[${s.shape.join(", ")}] ${s.dtype}` : "";
}

/**
 * The shape column's hover text: the example input's shape when the latest one differs.
 * @param {ShapeInfo | undefined} s
 */
export function shapeTitle(s) {
  const example = shapeText(s?.example);
  if (!s) return "";
  if (example === shapeText(s)) return `output on the example inputs ${example}`;
  return example ? `latest output ${shapeText(s)}; on the example inputs ${example}` : `latest output ${shapeText(s)}`;
}

/**
 * A cut mark button ("in" / "out", PROTOCOL.md "Cut"); `aria-pressed` when marked.
 * @param {string} name
 * @param {"in" | "out"} side
 * @param {"in" | "out" | null | undefined} mark
 */
function markButton(name, side, mark) {
  return h("button", {
    type: "button", class: `sw-mark sw-mark-${side}`, "data-mark": side, tabindex: -1,
    "aria-pressed": mark === side, "aria-label": `Mark ${name} as cut ${side === "in" ? "input" : "output"}`,
    text: side,
  });
}

/**
 * @param {{ v: VisibleRow, index: number, id: string, selected: boolean, active: boolean,
 *           shape: ShapeInfo | undefined, mark?: "in" | "out" | null, markable?: boolean,
 *           unrecorded?: boolean, bad?: NonFinite }} p  unrecorded: a recorded run's row
 *           without records; bad: the layer's first NaN / Inf record
 */
export function renderRow({ v, index, id, selected, active, shape, mark, markable, unrecorded, bad }) {
  const { row } = v;
  const params = row.kind === "module" ? `${formatCount(row.params)} params` : "graph node";
  const shp = shapeText(shape);
  const el = h("div", {
    role: "treeitem",
    id,
    class: `sw-row sw-kind-${row.kind}${active ? " sw-active" : ""}${v.match ? " sw-match" : ""}`,
    "data-name": row.name,
    "data-index": index,
    "aria-level": v.level,
    "aria-setsize": v.setsize,
    "aria-posinset": v.posinset,
    "aria-selected": selected,
    "aria-label": [row.name, row.cls, params, shp, unrecorded ? "not recorded" : "", bad ? `non-finite from step ${bad[2]}` : ""]
      .filter(Boolean).join(", "),
    title: row.name,
  });
  if (v.hasChildren) el.setAttribute("aria-expanded", String(v.expanded));
  if (unrecorded) {
    el.setAttribute("aria-disabled", "true");
    el.classList.add("sw-unrecorded");
  }
  el.style.top = `${index * ROW_HEIGHT}px`;
  el.style.paddingLeft = `${(v.level - 1) * 14 + 4}px`;
  el.append(
    h("span", { class: "sw-twisty", "aria-hidden": "true", text: v.hasChildren ? (v.expanded ? "▾" : "▸") : "" }),
    h("span", { class: "sw-name", text: shortName(row) }),
    h("span", { class: "sw-cls", text: row.cls }),
    h("span", { class: "sw-params", text: row.kind === "module" ? formatCount(row.params) : "node" }),
    unrecorded ? h("span", { class: "sw-shape", text: "not recorded" })
      : h("span", { class: "sw-shape", text: shp, ...(shp ? { title: shapeTitle(shape) } : {}) }),
  );
  if (bad) {
    el.classList.add("sw-nonfinite");
    el.append(h("span", {
      class: "sw-nonfinite-mark", title: `${bad[1]}: ${badCounts(bad[3], bad[4])} first at step ${bad[2]}`,
      text: bad[3] ? "NaN" : "Inf",
    }));
  }
  if (markable) el.append(markButton(row.name, "in", mark), markButton(row.name, "out", mark));
  if (mark) el.classList.add(`sw-cut-${mark}`);
  return el;
}
