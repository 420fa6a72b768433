// One panel per selected layer (`data-layer`), one block per tensor leaf with histogram,
// history strip and stats text (PROTOCOL.md "DOM contract").

import { cssVar, h } from "../dom.js";
import { drawHeat, drawHistogram } from "./draw.js";
import { modeText, num, statsText } from "./format.js";

/** @typedef {import("./store.js").HistoryStore} HistoryStore */

const HIST = { width: 256, height: 72 };
const HEAT = { width: 256, height: 40 };

export class LayerPanels {
  /** @param {HistoryStore} store */
  constructor(store) {
    this.store = store;
    /** @type {Map<string, HTMLElement>} */
    this.panels = new Map();
    this.empty = h("p", { class: "sw-hint", text: "Select layers in the tree to watch their activations." });
    this.el = h("div", { class: "sw-panels", "aria-label": "Selected layers" }, [this.empty]);
  }

  /**
   * Keep one panel per selected layer, in selection order.
   * @param {string[]} selected
   */
  sync(selected) {
    const want = new Set(selected);
    for (const [name, panel] of this.panels) {
      if (!want.has(name)) {
        panel.remove();
        this.panels.delete(name);
      }
    }
    for (const name of selected) {
      let panel = this.panels.get(name);
      if (!panel) {
        panel = h("section", { class: "sw-layer", "data-layer": name, "aria-label": `Layer ${name}` }, [
          h("h3", { class: "sw-layer-title", text: name }),
          h("p", { class: "sw-waiting", text: `Waiting for a forward pass through ${name}…` }),
        ]);
        this.panels.set(name, panel);
        this.draw(name);
      }
      this.el.append(panel); // append moves: keeps DOM order = selection order
    }
    this.empty.hidden = selected.length > 0;
  }

  redrawAll() {
    for (const name of this.panels.keys()) this.draw(name);
  }

  /** @param {Iterable<string>} layers */
  drawLayers(layers) {
    for (const name of layers) if (this.panels.has(name)) this.draw(name);
  }

  /** @param {string} layer */
  draw(layer) {
    const panel = this.panels.get(layer);
    if (!panel) return;
    const keys = this.store.keysOf(layer);
    const waiting = /** @type {HTMLElement} */ (panel.querySelector(".sw-waiting"));
    waiting.hidden = keys.length > 0;
    const color = cssVar(panel, "--sw-hist-color", "#1976d2");
    const gradColor = cssVar(panel, "--sw-grad-color", "#e65100");
    for (const key of keys) {
      const it = this.store.latest(key);
      if (!it) continue;
      const block = this.leafBlock(panel, key, it.layer, it.leaf);
      const c = it.kind === "gradient" ? gradColor : color;
      const q = (/** @type {string} */ s) => /** @type {HTMLElement} */ (block.querySelector(s));
      q(".sw-leaf-title").textContent = `${it.leaf} · ${it.kind} · step ${it.step}${modeText(it)}`;
      drawHistogram(/** @type {HTMLCanvasElement} */ (q(".sw-hist")), it.counts, { ...HIST, color: c });
      drawHeat(/** @type {HTMLCanvasElement} */ (q(".sw-heat")), this.store.history(key), { ...HEAT, color: c });
      q(".sw-lo").textContent = num(it.lo);
      q(".sw-hi").textContent = num(it.hi);
      q(".sw-stats").textContent = statsText(it);
    }
  }

  /**
   * @param {HTMLElement} panel
   * @param {string} key
   * @param {string} layer
   * @param {string} leaf
   */
  leafBlock(panel, key, layer, leaf) {
    for (const el of panel.querySelectorAll(".sw-leaf")) {
      if (el.getAttribute("data-key") === key) return el;
    }
    const block = h("div", { class: "sw-leaf", "data-key": key }, [
      h("div", { class: "sw-leaf-title" }),
      h("canvas", { class: "sw-hist", role: "img", "aria-label": `Histogram of ${layer} ${leaf}` }),
      h("div", { class: "sw-range" }, [h("span", { class: "sw-lo" }), h("span", { class: "sw-hi" })]),
      h("canvas", { class: "sw-heat", role: "img", "aria-label": `History of ${layer} ${leaf}` }),
      h("div", { class: "sw-stats" }),
    ]);
    panel.append(block);
    return block;
  }
}
