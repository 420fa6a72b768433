// The model view: every layer x head (mean first) as a thumbnail at once, each row with the
// colour range of its layer (the one rule of ./colour.js); a click opens that map. Buttons are
// kept across live updates (only repainted), so clicks and focus survive them.

import { Disposer, h } from "../dom.js";
import { rangeText } from "../histogram/format.js";
import { layerScale } from "./colour.js";
import { paintMap } from "./draw.js";
import { gridLabels } from "./readout.js";

/** @typedef {import("./store.js").LayerMaps} LayerMaps */
/** @typedef {import("./colour.js").ScaleMode} ScaleMode */

/** Thumbnail side: large for a few heads, smaller for many so a layer's row fits. */
export const thumbSize = (/** @type {number} */ n) => (n <= 7 ? 48 : n <= 13 ? 30 : 22);

export class ModelView {
  /** @param {(layer: string, head: string) => void} open called on a thumbnail's click */
  constructor(open) {
    this.open = open;
    this.el = h("div", { class: "sw-att-grid", role: "group", "aria-label": "Attention heads of selected layers" });
    this.d = new Disposer();
    this.key = "";
    /** @type {Map<string, { button: HTMLButtonElement, canvas: HTMLCanvasElement }>} */
    this.thumbs = new Map();
  }

  /**
   * Paint `layers` (in order) on their scales; `shown(layer)` is the head open in its map.
   * @param {LayerMaps[]} layers
   * @param {ScaleMode} mode
   * @param {(layer: string) => string | undefined} shown
   */
  paint(layers, mode, shown) {
    /** @type {[string, string[]][]} */
    const layout = layers.map((e) => [e.layer, ["mean", ...Array.from({ length: e.heads }, (_, i) => String(i))]]);
    const key = JSON.stringify(layout);
    if (key !== this.key) {
      this.key = key;
      this.d.dispose();
      this.thumbs.clear();
      const labels = gridLabels(layout.map(([layer]) => layer));
      this.el.replaceChildren(...layout.map(([layer, heads], i) => h("div", { class: "sw-att-grid-row", "data-layer": layer }, [
        h("div", { class: "sw-att-grid-head" }, [
          h("span", { class: "sw-att-grid-layer", title: layer, text: labels[i] }),
          h("span", { class: "sw-att-grid-range", title: `Colour range of ${layer}` }),
        ]),
        h("div", { class: "sw-att-grid-thumbs" }, heads.map((head) => this.thumb(layer, head))),
      ])));
    }
    layers.forEach((entry, i) => {
      const heads = layout[i][1];
      const scale = layerScale(entry, mode);
      const range = this.el.children[i]?.querySelector(".sw-att-grid-range");
      if (range) range.textContent = `${rangeText(scale.lo, scale.hi).join("–")}${mode === "fixed" ? " (fixed)" : ""}`;
      for (const head of heads) {
        const t = this.thumbs.get(`${entry.layer}\u0000${head}`);
        const m = entry.maps.get(head);
        if (!t) continue;
        if (m) paintMap(t.canvas, m, thumbSize(heads.length), scale);
        t.button.setAttribute("aria-pressed", String(shown(entry.layer) === head));
      }
    });
  }

  /**
   * @param {string} layer
   * @param {string} head
   */
  thumb(layer, head) {
    const label = head === "mean" ? "mean" : `head ${head}`;
    const canvas = h("canvas", { class: "sw-att-thumb-map", "aria-hidden": "true" });
    const button = h("button", {
      type: "button", class: "sw-att-thumb sw-local", title: `${layer} ${label}`,
      "aria-label": `Open ${layer} ${label}`, "aria-pressed": "false", "data-layer": layer, "data-head": head,
    }, [canvas, h("span", { text: head === "mean" ? "μ" : head })]);
    this.d.listen(button, "click", () => this.open(layer, head));
    this.thumbs.set(`${layer}\u0000${head}`, { button, canvas });
    return button;
  }

  dispose() {
    this.d.dispose();
  }
}
