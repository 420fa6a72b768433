// anywidget entry point of the Explorer: `export default { render }` (PROTOCOL.md).

import { controls } from "./controls.js";
import { CutPanel } from "./cut/panel.js";
import { Disposer, h } from "./dom.js";
import { AttentionPanels } from "./heatmap/panel.js";
import { AttentionStore } from "./heatmap/store.js";
import { HooksPanel } from "./hooks_panel/view.js";
import { LayerPanels } from "./histogram/panel.js";
import { inModelOrder } from "./model_order.js";
import { guardWrites, readOnly } from "./read_only.js";
import { HistoryStore } from "./histogram/store.js";
import { nonfiniteLine } from "./nonfinite.js";
import { recordedLayers } from "./run_mode.js";
import { watchKernel } from "./kernel_gone.js";
import { keepSnapshot } from "./snapshot.js";
import { TreeView } from "./tree/view.js";

/** @typedef {import("./types.js").Model} Model */

/** Keyboard events stop here so notebook shortcuts (a, b, d d, ...) don't fire while typing. */
const KEY_EVENTS = ["keydown", "keyup", "keypress"];

/**
 * @param {{ model: Model, el: HTMLElement }} props
 * @returns {() => void} cleanup: removes every listener, observer and element it added
 */
function render({ model: host, el }) {
  const d = new Disposer();
  const model = guardWrites(host);
  const store = new HistoryStore();
  const tree = new TreeView(model, d);
  const panels = new LayerPanels(store, model);
  const hooks = new HooksPanel(model, d);
  const cut = new CutPanel(model, d);
  const attention = new AttentionPanels(model, new AttentionStore());
  d.add(() => attention.dispose());
  d.add(() => panels.dispose());

  // A fieldset, so a read-only view disables every control in it, those added later too.
  const frozen = h("p", { class: "sw-replaced sw-read-only-note", role: "status" });
  const right = h("div", { class: "sw-right" }, [controls(model, d), nonfiniteLine(model, d), panels.el, attention.el, hooks.el]);
  const root = h("fieldset", { class: "sw-explorer", "data-lm-suppress-shortcuts": "true" }, [
    frozen,
    h("div", { class: "sw-left" }, [tree.el, cut.el]),
    right,
  ]);
  el.append(root);
  d.add(() => root.remove());

  /** @param {Event} e */
  const stop = (e) => e.stopPropagation();
  for (const type of KEY_EVENTS) d.listen(root, type, stop);
  // Lumino stops looking for shortcuts at an element carrying this attribute, but tests the
  // focused element itself first; Notebook 7 listens in the capture phase, before `stop` runs.
  d.listen(root, "focusin", (e) => {
    if (e.target instanceof HTMLElement) e.target.setAttribute("data-lm-suppress-shortcuts", "true");
  });

  const paintReadOnly = () => {
    const why = readOnly(model);
    root.disabled = why !== "";
    frozen.textContent = why ? `Read-only. ${why}` : "";
    frozen.hidden = !why;
    panels.redrawAll();
  };
  d.onModel(model, "change:replaced", paintReadOnly);
  paintReadOnly();

  // A recorded run cannot be cut (no model in the notebook): no cut panel.
  const paintRun = () => { cut.el.hidden = recordedLayers(model) != null; };
  d.onModel(model, "change:run", paintRun);
  paintRun();

  const selected = () => inModelOrder(model.get("selected") ?? [], model.get("rows"));
  d.onModel(model, "change:selected", () => panels.sync(selected()));
  d.onModel(model, "change:rows", () => { panels.sync(selected()); attention.sync(selected()); });
  d.onModel(model, "msg:custom", (/** @type {any} */ msg, /** @type {DataView[]} */ buffers) => {
    if (msg?.type !== "stats" && msg?.type !== "snapshot") return;
    try {
      const layers = store.apply(msg, buffers);
      if (msg.type === "snapshot") panels.redrawAll();
      else panels.drawLayers(layers);
    } catch (err) {
      console.error("surgeon_widgets: bad message", msg, err);
    }
  });
  panels.sync(selected());

  // Attention heatmaps (PROTOCOL.md "Attention"): a panel per selected layer that sends maps.
  d.onModel(model, "change:selected", () => attention.sync(selected()));
  d.onModel(model, "msg:custom", (/** @type {any} */ msg, /** @type {DataView[]} */ buffers) => {
    if (msg?.type !== "attention") return;
    try {
      attention.drawLayers(attention.store.apply(msg, buffers));
    } catch (err) {
      console.error("surgeon_widgets: bad attention message", msg, err);
    }
  });

  // Canvas colours come from CSS variables: redraw when the notebook theme changes.
  if (typeof MutationObserver !== "undefined") {
    const mo = new MutationObserver(() => { panels.redrawAll(); attention.redrawAll(); });
    mo.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-light", "data-jp-theme-name", "class"] });
    d.add(() => mo.disconnect());
  }

  // close() in Python: hooks are gone and the data dropped; a short placeholder stays.
  const placeholder = h("div", { class: "sw-explorer sw-closed", role: "status" });
  const paintClosed = () => {
    if (!model.get("closed")) return;
    placeholder.textContent = recordedLayers(model) != null ? "Run view closed" : "Explorer closed";
    root.replaceWith(placeholder);
    d.add(() => placeholder.remove());
  };
  d.onModel(model, "change:closed", paintClosed);
  paintClosed();

  // No kernel for this model (a saved notebook reopened): the panels come from `snapshot`;
  // the kernel stopping under a live view switches it there too ("kernel stopped").
  const still = keepSnapshot(model, d, {
    root, right, paint: ({ stats, attention: maps, buffers }) => {
      store.apply(stats, buffers);
      panels.redrawAll();
      attention.drawLayers(attention.store.apply(maps, buffers));
    },
    drawn: () => store.byKey.size > 0,
  });
  watchKernel(host, d, still.kernelStopped);
  model.send({ type: "hello" });
  return () => d.dispose();
}

export default { render };
