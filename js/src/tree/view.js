// The virtualized layer tree: only the rows inside the scroll viewport (plus a few) are in the DOM.

import { markOf, toggleOnModel } from "../cut/marks.js";
import { h } from "../dom.js";
import { firstBadOfLayers } from "../nonfinite.js";
import { recordedLayers } from "../run_mode.js";
import { TreeIndex, visibleRows } from "./flatten.js";
import { keyAction } from "./keys.js";
import { renderRow, ROW_HEIGHT } from "./row.js";

/** @typedef {import("../types.js").Model} Model */
/** @typedef {import("../dom.js").Disposer} Disposer */
/** @typedef {import("./flatten.js").VisibleRow} VisibleRow */

/** Extra rows rendered above and below the viewport. */
const OVERSCAN = 6;
/** Viewport height assumed before layout (element not attached yet). */
const FALLBACK_HEIGHT = 320;

let uidCounter = 0;

export class TreeView {
  /**
   * @param {Model} model
   * @param {Disposer} d
   */
  constructor(model, d) {
    this.model = model;
    this.uid = `sw-tree-${++uidCounter}`;
    /** @type {Map<string, boolean>} */
    this.overrides = new Map();
    /** @type {string | null} */
    this.active = null;
    /** @type {string | null} */
    this.anchor = null;
    /** @type {VisibleRow[]} */
    this.visible = [];
    /** @type {Map<string, number>} */
    this.position = new Map();
    this.index = new TreeIndex([], false);

    this.search = h("input", {
      type: "search", role: "searchbox", class: "sw-search",
      placeholder: "Filter by name or class", "aria-label": "Filter layers by name or class",
    });
    this.search.value = model.get("search") ?? "";
    this.nodesSwitch = h("button", { type: "button", role: "switch", class: "sw-switch", "aria-checked": false }, [
      h("span", { class: "sw-switch-track", "aria-hidden": "true" }),
      "graph nodes",
    ]);
    this.count = h("span", { class: "sw-count" });
    this.nodesError = h("div", { class: "sw-nodes-error", role: "status" });
    this.spacer = h("div", { class: "sw-tree-spacer" });
    this.tree = h("div", {
      role: "tree", class: "sw-tree", tabindex: 0,
      "aria-multiselectable": true, "aria-label": "Model layers",
    }, [this.spacer]);
    this.el = h("div", { class: "sw-tree-pane" }, [
      h("div", { class: "sw-toolbar" }, [this.search, this.nodesSwitch, this.count]),
      this.nodesError,
      this.tree,
    ]);

    d.listen(this.tree, "click", (e) => this.onClick(e));
    d.listen(this.tree, "keydown", (e) => this.onKey(e));
    d.listen(this.tree, "scroll", () => this.paint(), { passive: true });
    d.listen(this.search, "input", () => this.onSearch());
    d.listen(this.search, "keydown", (e) => {
      if (e.key === "ArrowDown") { e.preventDefault(); this.tree.focus(); }
    });
    d.listen(this.nodesSwitch, "click", () => {
      model.set("show_nodes", !model.get("show_nodes"));
      model.save_changes();
      this.rebuild();
    });
    d.onModel(model, "change:rows", () => this.rebuild());
    d.onModel(model, "change:run", () => this.rebuild());
    d.onModel(model, "change:show_nodes", () => this.rebuild());
    d.onModel(model, "change:selected", () => this.paint());
    d.onModel(model, "change:shapes", () => this.paint());
    d.onModel(model, "change:nonfinite", () => this.paint());
    d.onModel(model, "change:node_in", () => this.paint());
    d.onModel(model, "change:node_out", () => this.paint());
    d.onModel(model, "change:nodes_error", () => this.paintError());
    d.onModel(model, "change:search", () => {
      const q = model.get("search") ?? "";
      if (q !== this.search.value) { this.search.value = q; this.refresh(); }
    });
    if (typeof ResizeObserver !== "undefined") {
      const ro = new ResizeObserver(() => this.paint());
      ro.observe(this.tree);
      d.add(() => ro.disconnect());
    }
    this.rebuild();
  }

  /** Rows or show_nodes changed. */
  rebuild() {
    const show = Boolean(this.model.get("show_nodes"));
    this.nodesSwitch.setAttribute("aria-checked", String(show));
    this.nodesSwitch.hidden = recordedLayers(this.model) != null;  // a run has no graph nodes
    this.index = new TreeIndex(this.model.get("rows") ?? [], show);
    this.paintError();
    this.refresh();
  }

  /** Expansion or query changed: recompute the visible list. */
  refresh() {
    this.visible = visibleRows(this.index, this.overrides, this.search.value);
    this.position = new Map(this.visible.map((v, i) => [v.row.name, i]));
    const q = this.search.value.trim();
    this.count.textContent = q ? `${this.visible.filter((v) => v.match).length} matches` : "";
    this.paint();
  }

  paintError() {
    const err = this.model.get("nodes_error") ?? "";
    this.nodesError.textContent = err ? `Graph nodes unavailable: ${err}` : "";
    this.nodesError.hidden = !err;
  }

  activeIndex() {
    return this.active == null ? -1 : this.position.get(this.active) ?? -1;
  }

  /** @param {number} i */
  rowId(i) {
    return `${this.uid}-${i}`;
  }

  /** Render the rows in (and near) the viewport. */
  paint() {
    const n = this.visible.length;
    this.spacer.style.height = `${n * ROW_HEIGHT}px`;
    const viewH = this.tree.clientHeight || FALLBACK_HEIGHT;
    const top = this.tree.scrollTop;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(n, Math.ceil((top + viewH) / ROW_HEIGHT) + OVERSCAN);
    const selected = new Set(this.model.get("selected") ?? []);
    const shapes = this.model.get("shapes") ?? {};
    const act = this.activeIndex();
    const bad = firstBadOfLayers(this.model.get("nonfinite"));
    const recorded = recordedLayers(this.model);
    const markable = Boolean(this.model.get("show_nodes")) && !recorded;  // cut marks live in the node view
    /** @param {number} i */
    const make = (i) => renderRow({
      v: this.visible[i], index: i, id: this.rowId(i), active: i === act,
      selected: selected.has(this.visible[i].row.name), shape: shapes[this.visible[i].row.name],
      mark: markOf(this.model, this.visible[i].row.name), markable,
      unrecorded: recorded != null && !recorded.has(this.visible[i].row.name),
      bad: bad.get(this.visible[i].row.name),
    });
    const els = [];
    for (let i = first; i < last; i++) els.push(make(i));
    // Keep the active row in the DOM so aria-activedescendant always points at an element.
    if (act >= 0 && (act < first || act >= last)) els.push(make(act));
    this.spacer.replaceChildren(...els);
    if (act >= 0) this.tree.setAttribute("aria-activedescendant", this.rowId(act));
    else this.tree.removeAttribute("aria-activedescendant");
  }

  /** @param {number} i */
  scrollTo(i) {
    const viewH = this.tree.clientHeight || FALLBACK_HEIGHT;
    const top = i * ROW_HEIGHT;
    if (top < this.tree.scrollTop) this.tree.scrollTop = top;
    else if (top + ROW_HEIGHT > this.tree.scrollTop + viewH) this.tree.scrollTop = top + ROW_HEIGHT - viewH;
  }

  /** @param {string[]} names  (a recorded run keeps its recorded layers only) */
  setSelected(names) {
    const recorded = recordedLayers(this.model);
    this.model.set("selected", recorded ? names.filter((n) => recorded.has(n)) : names);
    this.model.save_changes();
    this.paint();
  }

  /**
   * @param {number} i
   * @param {"only" | "toggle" | "range"} mode
   */
  select(i, mode) {
    const name = this.visible[i].row.name;
    const current = this.model.get("selected") ?? [];
    this.active = name;
    if (mode === "range") {
      const a = this.anchor == null ? i : this.position.get(this.anchor) ?? i;
      const [lo, hi] = a < i ? [a, i] : [i, a];
      this.setSelected(this.visible.slice(lo, hi + 1).map((v) => v.row.name));
      return;
    }
    this.anchor = name;
    const recorded = recordedLayers(this.model);
    if (recorded && !recorded.has(name)) { this.paint(); return; }  // not recorded: focus only
    if (mode === "only") this.setSelected([name]);
    else this.setSelected(current.includes(name) ? current.filter((s) => s !== name) : [...current, name]);
  }

  /**
   * @param {string} name
   * @param {boolean} open
   */
  setExpanded(name, open) {
    this.overrides.set(name, open);
    this.refresh();
  }

  /** @param {MouseEvent} e */
  onClick(e) {
    const target = /** @type {Element} */ (e.target);
    const rowEl = target.closest?.('[role="treeitem"]');
    if (!rowEl) return;
    const i = Number(rowEl.getAttribute("data-index"));
    const v = this.visible[i];
    if (!v) return;
    const mark = target.closest(".sw-mark")?.getAttribute("data-mark");
    if (mark === "in" || mark === "out") {
      this.active = v.row.name;
      toggleOnModel(this.model, v.row.name, mark);
      this.tree.focus({ preventScroll: true });
      return;
    }
    if (v.hasChildren && target.closest(".sw-twisty")) {
      this.active = v.row.name;
      this.setExpanded(v.row.name, !v.expanded);
      return;
    }
    this.select(i, e.shiftKey ? "range" : e.ctrlKey || e.metaKey ? "toggle" : "only");
    this.tree.focus({ preventScroll: true });
  }

  /** @param {KeyboardEvent} e */
  onKey(e) {
    const v = this.visible[this.activeIndex()];
    if (v && this.model.get("show_nodes") && (e.key === "i" || e.key === "o") && !e.ctrlKey && !e.metaKey && !e.altKey) {
      e.preventDefault();
      toggleOnModel(this.model, v.row.name, e.key === "i" ? "in" : "out");
      return;
    }
    const a = keyAction(e, this.visible, this.activeIndex());
    if (!a) return;
    e.preventDefault();
    if (a.type === "expand" || a.type === "collapse") {
      this.setExpanded(a.name, a.type === "expand");
    } else if (a.type === "select") {
      this.select(a.index, a.mode);
    } else {
      this.active = this.visible[a.index].row.name;
      this.scrollTo(a.index);
      if (a.extend) this.select(a.index, "range");
      else this.paint();
    }
  }

  onSearch() {
    const q = this.search.value;
    this.model.set("search", q);
    this.model.save_changes();
    this.tree.scrollTop = 0;
    this.refresh();
  }
}
