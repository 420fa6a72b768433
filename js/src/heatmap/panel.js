// Attention heatmaps (PROTOCOL.md "Attention"): a thumbnails grid (layers x heads, click to
// open) and, per layer, a heatmap with head and batch selectors, token labels and a hover read-out.

import { cssVar, Disposer, h } from "../dom.js";
import { paintLabels, paintMap } from "./draw.js";
import { cellAt, readout } from "./readout.js";

/** @typedef {import("../types.js").Model} Model */
/** @typedef {import("./store.js").AttentionStore} AttentionStore */
/** @typedef {import("./store.js").LayerMaps} LayerMaps */

const SIZE = 256; // CSS pixels of the heatmap's long side
const THUMB = 40;

/**
 * @typedef {{
 *   el: HTMLElement, d: Disposer, head: string, hover: [number, number] | null,
 *   canvas: HTMLCanvasElement, rowsLabels: HTMLCanvasElement, colsLabels: HTMLCanvasElement,
 *   headSel: HTMLSelectElement, batchSel: HTMLSelectElement, text: HTMLElement, title: HTMLElement
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
    this.grid = h("div", { class: "sw-att-grid", role: "group", "aria-label": "Attention heads of selected layers" });
    this.list = h("div", { class: "sw-att-panels" });
    this.el = h("div", { class: "sw-attention-view" }, [this.grid, this.list]);
    this.el.hidden = true;
    this.gridD = new Disposer();
    /** @type {string} */
    this.gridKey = "";
    /** @type {Map<string, { button: HTMLButtonElement, canvas: HTMLCanvasElement }> | undefined} */
    this.thumbs = undefined;
  }

  /**
   * Keep panels of selected layers only, in selection order (a panel appears on the first
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
    const selected = this.model.get("selected") ?? [];
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

  dispose() {
    for (const name of [...this.panels.keys()]) this.drop(name);
    this.gridD.dispose();
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
    const headSel = h("select", { class: "sw-att-head", "aria-label": `Head of ${layer}` });
    const batchSel = h("select", { class: "sw-att-batch", "aria-label": `Batch item of ${layer}` });
    const text = h("div", { class: "sw-att-readout", "aria-live": "polite" });
    const title = h("h3", { class: "sw-layer-title", text: `${layer} · attention` });
    const el = h("section", { class: "sw-attention", "data-attention": layer, "aria-label": `Attention of ${layer}` }, [
      title,
      h("div", { class: "sw-att-controls" }, [
        h("label", {}, ["head ", headSel]), h("label", {}, ["batch item ", batchSel]),
      ]),
      h("div", { class: "sw-att-body" }, [h("span", { class: "sw-att-corner" }), colsLabels, rowsLabels, canvas]),
      text,
    ]);
    /** @type {Panel} */
    const p = { el, d, head: "mean", hover: null, canvas, rowsLabels, colsLabels, headSel, batchSel, text, title };
    d.listen(headSel, "change", () => { p.head = headSel.value; this.draw(layer); this.paintGrid(); });
    d.listen(batchSel, "change", () => {
      this.model.send({ type: "attention_batch", layer, batch: Number(batchSel.value) });
    });
    d.listen(canvas, "mousemove", (/** @type {MouseEvent} */ e) => {
      const entry = this.store.get(layer);
      const m = entry?.maps.get(p.head);
      if (!m) return;
      const r = canvas.getBoundingClientRect();
      p.hover = cellAt(e.clientX - r.left, e.clientY - r.top, r.width, r.height, m.rows, m.cols);
      this.paintReadout(layer);
    });
    d.listen(canvas, "mouseleave", () => { p.hover = null; this.paintReadout(layer); });
    d.listen(canvas, "keydown", (/** @type {KeyboardEvent} */ e) => this.moveHover(layer, e));
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
    paintMap(p.canvas, m, SIZE);
    const color = cssVar(p.el, "--sw-fg2", "#666");
    const long = Math.max(m.rows, m.cols);
    paintLabels(p.rowsLabels, entry.tokensQ, m.rows, Math.round((SIZE * m.rows) / long), "rows", color);
    paintLabels(p.colsLabels, entry.tokensK, m.cols, Math.round((SIZE * m.cols) / long), "cols", color);
    const labelled = entry.tokensQ?.length === m.rows || entry.tokensK?.length === m.cols;
    p.el.querySelector(".sw-att-body")?.classList.toggle("sw-att-unlabelled", !labelled);
    const pooled = m.rows !== m.fullRows || m.cols !== m.fullCols;
    p.title.textContent = `${layer} · attention ${m.fullRows}×${m.fullCols}${pooled ? ` (shown ${m.rows}×${m.cols})` : ""} · step ${entry.step}`;
    this.paintReadout(layer);
  }

  /** @param {string} layer */
  paintReadout(layer) {
    const p = this.panels.get(layer);
    const entry = this.store.get(layer);
    const m = p && entry?.maps.get(p.head);
    if (!p || !entry || !m) return;
    if (!p.hover || p.hover[0] >= m.rows || p.hover[1] >= m.cols) {
      p.text.textContent = "Hover the map for query token, key token and weight.";
      return;
    }
    p.text.textContent = readout(m, p.hover[0], p.hover[1], entry.tokensQ, entry.tokensK);
  }

  /**
   * Layers x heads thumbnails (mean first); click one to open it in its layer's heatmap.
   * Buttons are kept across live updates (only repainted), so clicks and focus survive them.
   */
  paintGrid() {
    /** @type {[string, string[]][]} */
    const layout = [];
    for (const layer of this.order) {
      const entry = this.store.get(layer);
      if (entry && this.panels.has(layer)) {
        layout.push([layer, ["mean", ...Array.from({ length: entry.heads }, (_, i) => String(i))]]);
      }
    }
    const key = JSON.stringify(layout);
    if (key !== this.gridKey) {
      this.gridKey = key;
      this.gridD.dispose();
      this.thumbs = new Map();
      this.grid.replaceChildren(...layout.map(([layer, heads]) => h("div", { class: "sw-att-grid-row" }, [
        h("span", { class: "sw-att-grid-layer", title: layer, text: layer.length > 28 ? `…${layer.slice(-27)}` : layer }),
        ...heads.map((head) => this.thumb(layer, head)),
      ])));
    }
    for (const [layer, heads] of layout) {
      const entry = this.store.get(layer);
      const p = this.panels.get(layer);
      for (const head of heads) {
        const t = this.thumbs?.get(`${layer}\u0000${head}`);
        const m = entry?.maps.get(head);
        if (!t) continue;
        if (m) paintMap(t.canvas, m, THUMB);
        t.button.setAttribute("aria-pressed", String(p?.head === head));
      }
    }
    this.el.hidden = layout.length === 0;
  }

  /**
   * @param {string} layer
   * @param {string} head
   */
  thumb(layer, head) {
    const label = head === "mean" ? "mean" : `head ${head}`;
    const canvas = h("canvas", { class: "sw-att-thumb-map", "aria-hidden": "true" });
    const button = h("button", {
      type: "button", class: "sw-att-thumb", title: `${layer} ${label}`,
      "aria-label": `Open ${layer} ${label}`, "aria-pressed": "false", "data-layer": layer, "data-head": head,
    }, [canvas, h("span", { text: head === "mean" ? "μ" : head })]);
    this.gridD.listen(button, "click", () => this.open(layer, head));
    this.thumbs?.set(`${layer}\u0000${head}`, { button, canvas });
    return button;
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
