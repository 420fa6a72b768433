// WAI-ARIA tree keyboard model (https://www.w3.org/WAI/ARIA/apg/patterns/treeview/), as pure logic.

/** @typedef {import("./flatten.js").VisibleRow} VisibleRow */

/**
 * @typedef {{ type: "move", index: number, extend: boolean }
 *   | { type: "expand", name: string } | { type: "collapse", name: string }
 *   | { type: "select", index: number, mode: "only" | "toggle" }} KeyAction
 */

/**
 * What a key press on the tree does; null when the key is not ours.
 * @param {{ key: string, shiftKey: boolean }} e
 * @param {VisibleRow[]} rows
 * @param {number} active index of the active row (-1: none yet)
 * @returns {KeyAction | null}
 */
export function keyAction(e, rows, active) {
  const n = rows.length;
  if (n === 0) return null;
  const i = active < 0 ? 0 : Math.min(active, n - 1);
  const v = rows[i];
  switch (e.key) {
    case "ArrowDown":
      return { type: "move", index: active < 0 ? 0 : Math.min(i + 1, n - 1), extend: e.shiftKey };
    case "ArrowUp":
      return { type: "move", index: Math.max(i - 1, 0), extend: e.shiftKey };
    case "Home":
      return { type: "move", index: 0, extend: e.shiftKey };
    case "End":
      return { type: "move", index: n - 1, extend: e.shiftKey };
    case "ArrowRight":
      if (!v.hasChildren) return null;
      if (!v.expanded) return { type: "expand", name: v.row.name };
      return { type: "move", index: Math.min(i + 1, n - 1), extend: false };
    case "ArrowLeft": {
      if (v.hasChildren && v.expanded) return { type: "collapse", name: v.row.name };
      const parent = v.row.parent;
      if (parent == null) return null;
      const p = rows.findIndex((r) => r.row.name === parent);
      return p < 0 ? null : { type: "move", index: p, extend: false };
    }
    case "Enter":
      return { type: "select", index: i, mode: "only" };
    case " ":
    case "Spacebar":
      return { type: "select", index: i, mode: "toggle" };
    default:
      return null;
  }
}
