// Attention (PROTOCOL.md "Attention"): one control "attention view" picks the mode: "map" (per
// layer, a heatmap with head and batch selectors, token labels and a hover read-out), "lines"
// (per layer, ./lines.js) or "model" (./model_view.js: every layer x head, click to open a map).
// Everything is coloured by the one rule of ./colour.js; "0–1 scale" switches it to fixed.

import { cssVar, Disposer, h } from "../dom.js";
import { layerScale } from "./colour.js";
import { paintLabels, paintLegendBar, paintMap } from "./draw.js";
import { LinesView } from "./lines.js";
import { ModelView } from "./model_view.js";
import { modeText, rangeText } from "../histogram/format.js";
import { inModelOrder } from "../model_order.js";
import { cellAt, readout, rowReadout } from "./readout.js";

/** @typedef {import("../types.js").Model} Model */
/** @typedef {import("./store.js").AttentionStore} AttentionStore */
/** @typedef {import("./store.js").LayerMaps} LayerMaps */

const SIZE = 256; // CSS pixels of the heatmap's long side
/** The options of the "attention view" control. */
export const MODES = /** @type {const} */ (["map", "lines", "model"]);
/** @typedef {typeof MODES[number]} ViewMode */
let groups = 0; // radio group names, unique per page

/**
 * `hover` is the cell under the pointer (or arrow keys); `row` the query token label hovered.
 * @typedef {{
 *   el: HTMLElement, d: Disposer, head: string, hover: [number, number] | null, row: number | null,
 *   canvas: HTMLCanvasElement, rowsLabels: HTMLCanvasElement, colsLabels: HTMLCanvasElement,
 *   headSel: HTMLSelectElement, batchSel: HTMLSelectElement, lines: LinesView, body: HTMLElement,
 *   text: HTMLElement, title: HTMLElement, legend: HTMLElement, cursor: HTMLElement, rowMark: HTMLElement
 * }} Panel
 */

export class AttentionPanels {
  /**
   * @param {Model} model
   * @param {AttentionStore} store
   */
  constructor(model, store) {
    this.model = model;
    this.store = store;
    /** @type {Map<string, Panel>} */
    this.panels = new Map();
    /** @type {string[]} */
    this.order = [];
    /** @type {ViewMode} */
    this.mode = "map";
    /** @type {import("./colour.js").ScaleMode} */
    this.scaleMode = "range";
    this.d = new Disposer();
    const name = `sw-att-mode-${++groups}`;
    this.modes = h("div", { class: "sw-att-modes", role: "radiogroup", "aria-label": "attention view" }, MODES.map((m) => h("label", {}, [
      h("input", { type: "radio", name, value: m, class: "sw-local", ...(m === "map" ? { checked: "" } : {}) }), m,
    ])));
    this.fixed = h("input", { type: "checkbox", class: "sw-att-fixed sw-local" });
    this.bar = h("div", { class: "sw-att-bar" }, [
      this.modes,
      h("label", { title: "Colour every map over 0 to 1 instead of its layer's range" }, [this.fixed, " 0–1 scale"]),
    ]);
    this.modelView = new ModelView((layer, head) => { this.setMode("map"); this.open(layer, head); });
    this.grid = this.modelView.el;
    this.grid.hidden = true;
    this.list = h("div", { class: "sw-att-panels" });
    this.el = h("div", { class: "sw-attention-view", "data-mode": "map" }, [this.bar, this.grid, this.list]);
    this.el.hidden = true;
    this.d.listen(this.modes, "change", (/** @type {Event} */ e) => {
      this.setMode(/** @type {ViewMode} */ (/** @type {HTMLInputElement} */ (e.target).value));
    });
    this.d.listen(this.fixed, "change", () => {
      this.scaleMode = this.fixed.checked ? "fixed" : "range";
      this.redrawAll();
    });
  }

  /**
   * Keep panels of selected layers only, in the order given (model order) (a panel appears on the first
   * attention message of its layer).
   * @param {string[]} selected
   */
  sync(selected) {
    const want = new Set(selected);
    for (const name of [...this.panels.keys()]) {
      if (!want.has(name)) this.drop(name);
    }
    for (const name of [...this.store.layers.keys()]) if (!want.has(name)) this.store.delete(name);
    this.order = selected.filter((n) => this.panels.has(n));
    for (const name of this.order) this.list.append(/** @type {Panel} */ (this.panels.get(name)).el);
    this.paintGrid();
  }

  /** @param {Iterable<string>} layers */
  drawLayers(layers) {
    const selected = inModelOrder(this.model.get("selected") ?? [], this.model.get("rows"));
    for (const name of layers) {
      if (!selected.includes(name)) continue;
      if (!this.panels.has(name)) this.panels.set(name, this.create(name));
      this.draw(name);
    }
    this.order = selected.filter((n) => this.panels.has(n));
    for (const name of this.order) this.list.append(/** @type {Panel} */ (this.panels.get(name)).el);
    this.paintGrid();
  }

  redrawAll() {
    for (const name of this.panels.keys()) this.draw(name);
    this.paintGrid();
  }

  /**
   * Show the maps, the lines or the model view (the "attention view" control follows).
   * @param {ViewMode} mode
   */
  setMode(mode) {
    if (!MODES.includes(mode)) return;
    this.mode = mode;
    this.el.dataset.mode = mode;
    for (const input of this.modes.querySelectorAll("input")) input.checked = input.value === mode;
    this.grid.hidden = mode !== "model";
    this.list.hidden = mode === "model";
    this.redrawAll();
  }

  dispose() {
    for (const name of [...this.panels.keys()]) this.drop(name);
    this.modelView.dispose();
    this.d.dispose();
    this.el.remove();
  }

  /** @param {string} name */
  drop(name) {
    const p = this.panels.get(name);
    if (!p) return;
    p.d.dispose();
    p.el.remove();
    this.panels.delete(name);
  }

  /**
   * @param {string} layer
   * @returns {Panel}
   */
  create(layer) {
    const d = new Disposer();
    const canvas = h("canvas", { class: "sw-att-map", role: "img", tabindex: 0, "aria-label": `Attention of ${layer}` });
    const rowsLabels = h("canvas", { class: "sw-att-qlabels", "aria-hidden": "true" });
    const colsLabels = h("canvas", { class: "sw-att-klabels", "aria-hidden": "true" });
    const headSel = h("select", { class: "sw-att-head sw-local", "aria-label": `Head of ${layer}` });
    const batchSel = h("select", { class: "sw-att-batch", "aria-label": `Batch item of ${layer}` });
    const text = h("div", { class: "sw-att-readout", "aria-live": "polite" });
    const title = h("h3", { class: "sw-layer-title", text: `${layer} · attention` });
    const cursor = h("div", { class: "sw-att-cursor", "aria-hidden": "true" });
    const rowMark = h("div", { class: "sw-att-rowmark", "aria-hidden": "true" });
    cursor.hidden = true;
    rowMark.hidden = true;
    const legendBar = h("canvas", { class: "sw-att-legend-bar", "aria-hidden": "true" });
    paintLegendBar(legendBar);
    const legend = h("div", { class: "sw-att-legend", role: "img" }, [
      h("span", { class: "sw-att-legend-lo" }), legendBar, h("span", { class: "sw-att-legend-hi" }),
      h("span", { class: "sw-att-legend-note" }),
    ]);
    const body = h("div", { class: "sw-att-body" }, [
      h("span", { class: "sw-att-axis sw-att-axis-k", text: "key →" }),
      h("span", { class: "sw-att-corner" }), colsLabels,
      h("span", { class: "sw-att-axis sw-att-axis-q", text: "query →" }),
      rowsLabels,
      h("div", { class: "sw-att-mapwrap" }, [canvas, rowMark, cursor]),
    ]);
    const lines = new LinesView(layer, d, (said) => {
      text.textContent = said ?? "Hover a token for its lines; click a head's swatch to hide or show its lines.";
    });
    const el = h("section", { class: "sw-attention", "data-attention": layer, "aria-label": `Attention of ${layer}` }, [
      title,
      h("div", { class: "sw-att-controls" }, [
        h("label", { class: "sw-att-headpick" }, ["head ", headSel]), h("label", {}, ["batch item ", batchSel]),
      ]),
      body,
      lines.el,
      legend,
      text,
    ]);
    /** @type {Panel} */
    const p = {
      el, d, head: "mean", hover: null, row: null, canvas, rowsLabels, colsLabels,
      headSel, batchSel, lines, body, text, title, legend, cursor, rowMark,
    };
    d.listen(headSel, "change", () => { p.head = headSel.value; this.draw(layer); this.paintGrid(); });
    d.listen(batchSel, "change", () => {
      this.model.send({ type: "attention_batch", layer, batch: Number(batchSel.value) });
    });
    d.listen(canvas, "mousemove", (/** @type {MouseEvent} */ e) => {
      const m = this.store.get(layer)?.maps.get(p.head);
      if (!m) return;
      const r = canvas.getBoundingClientRect();
      p.hover = cellAt(e.clientX - r.left, e.clientY - r.top, r.width, r.height, m.rows, m.cols);
      this.paintReadout(layer);
    });
    d.listen(canvas, "mouseleave", () => { p.hover = null; this.paintReadout(layer); });
    d.listen(canvas, "keydown", (/** @type {KeyboardEvent} */ e) => this.moveHover(layer, e));
    // Hovering a query token's label highlights its row: what that token attends to (as BertViz).
    d.listen(rowsLabels, "mousemove", (/** @type {MouseEvent} */ e) => {
      const m = this.store.get(layer)?.maps.get(p.head);
      if (!m) return;
      const r = rowsLabels.getBoundingClientRect();
      const row = cellAt(r.width / 2, e.clientY - r.top, r.width, r.height, m.rows, 1)?.[0] ?? null;
      if (row === p.row) return;
      p.row = row;
      this.draw(layer);
    });
    d.listen(rowsLabels, "mouseleave", () => { p.row = null; this.draw(layer); });
    return p;
  }

  /**
   * Arrow keys move the read-out cell, so the values are reachable without a mouse.
   * @param {string} layer
   * @param {KeyboardEvent} e
   */
  moveHover(layer, e) {
    const p = this.panels.get(layer);
    const m = p && this.store.get(layer)?.maps.get(p.head);
    const step = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    if (!p || !m || !step) return;
    e.preventDefault();
    const [r, c] = p.hover ?? [0, 0];
    p.hover = p.hover
      ? [Math.max(0, Math.min(m.rows - 1, r + step[0])), Math.max(0, Math.min(m.cols - 1, c + step[1]))]
      : [0, 0];
    this.paintReadout(layer);
  }

  /** @param {string} layer */
  draw(layer) {
    const p = this.panels.get(layer);
    const entry = this.store.get(layer);
    if (!p || !entry) return;
    syncOptions(p.headSel, ["mean", ...Array.from({ length: entry.heads }, (_, i) => String(i))], (v) => (v === "mean" ? "mean of heads" : `head ${v}`));
    if (!entry.maps.has(p.head)) p.head = "mean";
    p.headSel.value = p.head;
    syncOptions(p.batchSel, Array.from({ length: entry.batches }, (_, i) => String(i)), (v) => v);
    p.batchSel.value = String(entry.batch);
    p.batchSel.disabled = entry.batches <= 1;
    const m = entry.maps.get(p.head);
    if (!m) return;
    const headText = p.head === "mean" ? "mean of heads" : `head ${p.head}`;
    p.canvas.setAttribute("aria-label", `Attention of ${layer} ${headText} batch ${entry.batch}`);
    p.canvas.dataset.head = p.head;
    p.canvas.dataset.step = String(entry.step);
    const scale = layerScale(entry, this.scaleMode);
    const lines = this.mode === "lines";
    p.body.hidden = lines;
    p.lines.el.hidden = !lines;
    p.el.querySelector(".sw-att-headpick")?.toggleAttribute("hidden", lines);
    paintMap(p.canvas, m, SIZE, scale);
    this.paintLegend(p, scale);
    const color = cssVar(p.el, "--sw-fg2", "#666");
    if (lines) p.lines.draw(entry, scale, cssVar(p.el, "--sw-fg", "#222"));
    const long = Math.max(m.rows, m.cols);
    const row = p.row !== null && p.row < m.rows ? p.row : null;
    const mark = row === null ? null : {
      index: row, background: cssVar(p.el, "--sw-accent", "#1976d2"), color: cssVar(p.el, "--sw-on-accent", "#fff"),
    };
    paintLabels(p.rowsLabels, entry.tokensQ, m.rows, Math.round((SIZE * m.rows) / long), "rows", color, mark);
    paintLabels(p.colsLabels, entry.tokensK, m.cols, Math.round((SIZE * m.cols) / long), "cols", color);
    const labelled = entry.tokensQ?.length === m.rows || entry.tokensK?.length === m.cols;
    p.el.querySelector(".sw-att-body")?.classList.toggle("sw-att-unlabelled", !labelled);
    const pooled = m.rows !== m.fullRows || m.cols !== m.fullCols;
    p.title.textContent = `${layer} · attention ${m.fullRows}×${m.fullCols}${pooled ? ` (shown ${m.rows}×${m.cols})` : ""} · step ${entry.step}${modeText(entry)}`;
    this.paintReadout(layer);
  }

  /**
   * The legend's end labels are the range the layer is coloured over (lines: their opacity).
   * @param {Panel} p
   * @param {import("./colour.js").Scale} scale
   */
  paintLegend(p, scale) {
    const [lo, hi, note] = p.legend.querySelectorAll("span");
    const [a, b] = rangeText(scale.lo, scale.hi);
    lo.textContent = a;
    hi.textContent = b;
    lo.title = String(scale.lo);
    hi.title = String(scale.hi);
    const flat = scale.mode === "range" && !(scale.hi - scale.lo >= 1e-12);
    note.textContent = scale.mode === "fixed" ? "fixed 0–1 scale" : flat ? "all weights equal" : "this layer's range";
    if (this.mode === "lines") note.textContent += " · line opacity";
    p.legend.dataset.scale = scale.mode;
    p.legend.setAttribute("aria-label", `Colour scale from ${a} to ${b} (${note.textContent})`);
  }

  /**
   * Place a box over cells [r0, r1) x [c0, c1) of the map, in CSS pixels.
   * @param {HTMLElement} box
   * @param {HTMLCanvasElement} canvas
   * @param {[number, number, number, number] | null} cells
   * @param {number} rows
   * @param {number} cols
   */
  placeBox(box, canvas, cells, rows, cols) {
    box.hidden = cells === null;
    if (!cells) return;
    const w = parseFloat(canvas.style.width) / cols;
    const hgt = parseFloat(canvas.style.height) / rows;
    const [r0, r1, c0, c1] = cells;
    Object.assign(box.style, {
      left: `${c0 * w}px`, top: `${r0 * hgt}px`, width: `${(c1 - c0) * w}px`, height: `${(r1 - r0) * hgt}px`,
    });
  }

  /** @param {string} layer */
  paintReadout(layer) {
    const p = this.panels.get(layer);
    const entry = this.store.get(layer);
    const m = p && entry?.maps.get(p.head);
    if (!p || !entry || !m) return;
    const hover = p.hover && p.hover[0] < m.rows && p.hover[1] < m.cols ? p.hover : null;
    const row = p.row !== null && p.row < m.rows ? p.row : null;
    this.placeBox(p.cursor, p.canvas, hover && [hover[0], hover[0] + 1, hover[1], hover[1] + 1], m.rows, m.cols);
    this.placeBox(p.rowMark, p.canvas, row === null ? null : [row, row + 1, 0, m.cols], m.rows, m.cols);
    if (row !== null) p.text.textContent = rowReadout(m, row, entry.tokensQ, entry.tokensK);
    else if (hover) p.text.textContent = readout(m, hover[0], hover[1], entry.tokensQ, entry.tokensK);
    else if (this.mode === "lines") p.lines.setFocus(p.lines.focus);
    else p.text.textContent = "Hover the map for query token, key token and weight; a query label for its row.";
  }

  /** The model view's thumbnails: every layer that has a panel, in order. */
  paintGrid() {
    const layers = this.order.map((n) => this.store.get(n)).filter((e) => e !== undefined && this.panels.has(e.layer));
    this.modelView.paint(/** @type {LayerMaps[]} */ (layers), this.scaleMode, (layer) => this.panels.get(layer)?.head);
    this.el.hidden = layers.length === 0;
  }

  /**
   * @param {string} layer
   * @param {string} head "mean" or a head index
   */
  open(layer, head) {
    const p = this.panels.get(layer);
    if (!p) return;
    p.head = head;
    this.draw(layer);
    this.paintGrid();
    p.el.scrollIntoView?.({ block: "nearest" });
    p.canvas.focus({ preventScroll: true });
  }
}

/**
 * Replace a select's options when they changed (keeps focus and value otherwise).
 * @param {HTMLSelectElement} sel
 * @param {string[]} values
 * @param {(v: string) => string} label
 */
function syncOptions(sel, values, label) {
  const now = [...sel.options].map((o) => o.value);
  if (now.length === values.length && now.every((v, i) => v === values[i])) return;
  sel.replaceChildren(...values.map((v) => h("option", { value: v, text: label(v) })));
}
