// One panel per selected layer (`data-layer`), one block per tensor leaf with histogram (count
// axis, zero line), history strip (step axis, train/eval mark), stats text and small line charts
// of mean / std / L2 norm over steps (PROTOCOL.md "DOM contract").

import { curvesBlock, paintCurves } from "../curves/view.js";
import { cssVar, Disposer, formatCount, h, showNumber } from "../dom.js";
import { noFiniteText } from "../nonfinite.js";
import { readOnly } from "../read_only.js";
import { everyText, sampledText } from "./cadence.js";
import { barShare, drawHeat, drawHistogram } from "./draw.js";
import { fullNum, modeText, rangeText, statsParts } from "./format.js";
import { drawOutline, markRow, pinRows, rebin, rowAt, sharedRange } from "./pin.js";
import { paintZeroBar } from "./zeros.js";

/** @typedef {import("./store.js").HistoryStore} HistoryStore */
/** @typedef {import("../types.js").Model} Model */
/** @typedef {import("../types.js").Item} Item */

const HIST = { width: 256, height: 72 };
/** Kinds shown only while the layer's "parameters" box is ticked (trait `param_layers`). */
const PARAM_KINDS = new Set(["weight", "weight grad", "update"]);

const HEAT = { width: 256, height: 40 };

/**
 * The rows of the latest / pinned step table (`sw-pin-stats`).
 * @param {Item} latest
 * @param {Item} pinned
 */
function pinTable(latest, pinned) {
  const { head, rows } = pinRows(latest, pinned);
  const header = h("tr", {}, [h("th", {}), ...head.map((label) => h("th", { scope: "col", text: label }))]);
  return [header, ...rows.map(({ label, cells }, i) => h("tr", { class: i ? "sw-pin-row" : "sw-latest-row" }, [
    h("th", { scope: "row", text: label }),
    ...cells.map(([text, full]) => {
      const td = h("td");
      showNumber(td, text, full);
      return td;
    }),
  ]))];
}

export class LayerPanels {
  /**
   * @param {HistoryStore} store
   * @param {Model} [model] for the per-layer "parameters" switch (trait `param_layers`)
   */
  constructor(store, model) {
    this.store = store;
    this.model = model;
    /** @type {Map<string, HTMLElement>} */
    this.panels = new Map();
    /** @type {Map<string, Disposer>} listeners of each panel, removed with it */
    this.disposers = new Map();
    /** Layers whose histograms use a log count axis. */
    this.logCounts = new Set();
    /** @type {Map<string, Item>} key -> the step pinned in its history strip */
    this.pins = new Map();
    /** @type {Map<string, Item[]>} key -> the steps its history strip shows (rows, oldest first) */
    this.shown = new Map();
    this.empty = h("p", { class: "sw-hint", text: "Select layers in the tree to watch their activations." });
    this.el = h("div", { class: "sw-panels", "aria-label": "Selected layers" }, [this.empty]);
  }

  /**
   * Keep one panel per selected layer, in the given order (the caller passes model order).
   * @param {string[]} selected
   */
  sync(selected) {
    const want = new Set(selected);
    for (const [name, panel] of this.panels) {
      if (!want.has(name)) {
        panel.remove();
        this.panels.delete(name);
        this.disposers.get(name)?.dispose();
        this.disposers.delete(name);
        this.logCounts.delete(name);
        for (const map of [this.pins, this.shown]) {
          for (const key of [...map.keys()]) if (this.store.latest(key)?.layer === name) map.delete(key);
        }
      }
    }
    for (const name of selected) {
      let panel = this.panels.get(name);
      if (!panel) {
        panel = this.create(name);
        this.panels.set(name, panel);
        this.draw(name);
      }
      this.el.append(panel); // append moves: keeps DOM order = the order given
    }
    this.empty.hidden = selected.length > 0;
  }

  /** @param {string} name */
  create(name) {
    const log = h("input", { type: "checkbox", class: "sw-logcount" });
    const d = new Disposer();
    this.disposers.set(name, d);
    d.listen(log, "change", () => {
      if (log.checked) this.logCounts.add(name);
      else this.logCounts.delete(name);
      this.draw(name);
    });
    const params = h("input", { type: "checkbox", class: "sw-params" });
    const paramNote = h("p", { class: "sw-param-note" });
    const model = this.model;
    if (model) {
      d.listen(params, "change", () => {
        const now = (model.get("param_layers") ?? []).filter((n) => n !== name);
        model.set("param_layers", params.checked ? [...now, name] : now);
        model.save_changes();
      });
      const paint = () => {
        params.checked = (model.get("param_layers") ?? []).includes(name);
        const note = model.get("param_notes")?.[name] ?? "";  // why the box cannot be ticked
        params.disabled = Boolean(note);
        paramNote.textContent = note;
        paramNote.hidden = !note;
        this.draw(name);
      };
      d.onModel(model, "change:param_layers", paint);
      d.onModel(model, "change:param_notes", paint);
      d.onModel(model, "change:no_values", () => this.draw(name));
      d.onModel(model, "change:compiling", () => this.draw(name));
      paint();  // draws nothing yet: sync() draws the panel once it is in this.panels
    }
    return h("section", { class: "sw-layer", "data-layer": name, "aria-label": `Layer ${name}` }, [
      h("div", { class: "sw-layer-head" }, [
        h("h3", { class: "sw-layer-title", text: name }),
        h("label", { class: "sw-layer-option" }, [log, " log counts"]),
        h("label", {
          class: "sw-layer-option", title: "Histograms of this module's own weights, their gradients and updates",
        }, [params, " parameters"]),
      ]),
      paramNote,
      h("p", { class: "sw-waiting" }),
    ]);
  }

  dispose() {
    this.sync([]);
    this.el.remove();
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
    const frozen = this.model ? readOnly(this.model) : "";
    const why = this.model?.get("no_values")?.[layer];  // e.g. it ran on the meta device
    // the model's first torch.compile: no forward comes before it ends (Python's status text)
    const compiling = this.model?.get("compiling") ? this.model.get("status") || null : null;
    waiting.textContent = frozen ? `Nothing recorded for ${layer}: this Explorer is read-only.` : why ?? compiling ?? `Waiting for a forward pass through ${layer}…`;
    waiting.classList.toggle("sw-compiling", compiling != null);
    const paramsShown = new Set(this.model?.get("param_layers") ?? []);
    const color = cssVar(panel, "--sw-hist-color", "#1976d2");
    const gradColor = cssVar(panel, "--sw-grad-color", "#e65100");
    const weightColor = cssVar(panel, "--sw-weight-color", "#7b1fa2");
    const zeroColor = cssVar(panel, "--sw-fg2", "#666");
    const badColor = cssVar(panel, "--sw-error", "#d32f2f");
    const modes = { train: cssVar(panel, "--sw-train-color", "#2e7d32"), eval: cssVar(panel, "--sw-eval-color", "#757575") };
    const pinColor = cssVar(panel, "--sw-fg", "#222");
    const log = this.logCounts.has(layer);
    for (const key of keys) {
      const it = this.store.latest(key);
      if (!it) continue;
      const block = /** @type {HTMLElement} */ (this.leafBlock(panel, key, it.layer, it.leaf, layer));
      block.hidden = PARAM_KINDS.has(it.kind) && !paramsShown.has(layer);
      const c = it.kind === "activation" ? color : it.kind === "weight" || it.kind === "update" ? weightColor : gradColor;
      const q = (/** @type {string} */ s) => /** @type {HTMLElement} */ (block.querySelector(s));
      q(".sw-leaf-title").textContent = `${it.leaf} · ${it.kind} · step ${it.step}${modeText(it)}${everyText(it, this.model?.get("max_rate") === 0)}`;
      const pin = this.pins.get(key);
      const [lo, hi] = pin ? sharedRange(it, pin) : [it.lo, it.hi];
      const bins = it.counts.length || 64;
      const counts = pin ? rebin(it, lo, hi, bins) : it.counts;
      const pinned = pin ? rebin(pin, lo, hi, bins) : null;
      const histCanvas = /** @type {HTMLCanvasElement} */ (q(".sw-hist"));
      const top = pinned ? Math.max(...Array.from(counts), ...pinned) : undefined;
      const max = drawHistogram(histCanvas, counts, { ...HIST, color: c, log, lo, hi, zeroColor, top });
      if (pin && pinned) {
        const halo = cssVar(panel, "--sw-bg", "#fff");
        drawOutline(histCanvas, pinned, { ...HIST, color: pinColor, halo, top: max, share: (n, m) => barShare(n, m, log) });
      }
      paintZeroBar(q(".sw-zero"), it.zeros, pin ? pin.zeros : null, { color: c, pinColor });
      const legend = q(".sw-pin");
      legend.hidden = !pin;
      legend.textContent = pin ? `step ${it.step}: bars · step ${pin.step}: outline (pinned; click it again or Esc to unpin)` : "";
      q(".sw-count-max").textContent = formatCount(Math.round(max));
      q(".sw-count-max").title = String(Math.round(max));
      q(".sw-count-title").textContent = log ? "log count" : "count";
      const history = this.store.history(key);
      const heat = /** @type {HTMLCanvasElement} */ (q(".sw-heat"));
      const shown = drawHeat(heat, history, { ...HEAT, color: c, modes });
      this.shown.set(key, shown);
      const row = pin ? shown.findIndex((s) => s.step === pin.step) : -1;
      if (row >= 0) markRow(heat, row, shown.length, { ...HEAT, color: pinColor });
      q(".sw-step-first").textContent = shown.length ? String(shown[0].step) : "";
      q(".sw-step-last").textContent = shown.length > 1 ? String(shown[shown.length - 1].step) : "";
      q(".sw-step-title").textContent = shown.length ? "step" : "";
      const marked = shown.some((s) => typeof s.training === "boolean");
      q(".sw-modes").hidden = !marked;
      const empty = noFiniteText(it);  // no finite value: no range either, not "0 ... 0"
      q(".sw-hist-empty").textContent = empty;
      q(".sw-hist-empty").hidden = !empty;
      const [loText, hiText] = empty ? ["", ""] : rangeText(lo, hi);
      showNumber(q(".sw-lo"), loText, empty ? "" : fullNum(lo));
      showNumber(q(".sw-hi"), hiText, empty ? "" : fullNum(hi));
      q(".sw-stats").replaceChildren(...statsParts(it).flatMap(([label, text, full], i) => {
        const value = h("span", { class: "sw-stat" });
        showNumber(value, text, full);
        return [`${i ? " " : ""}${label} `, value];
      }));
      const compare = q(".sw-pin-stats");
      compare.hidden = !pin;
      compare.replaceChildren(...(pin ? pinTable(it, pin) : []));
      const sampled = q(".sw-sampled");
      sampled.textContent = sampledText(it);
      sampled.hidden = !sampled.textContent;
      paintCurves(q(".sw-curves"), history, { color: c, badColor });
    }
  }

  /**
   * @param {HTMLElement} panel
   * @param {string} key
   * @param {string} layer
   * @param {string} leaf
   * @param {string} name the panel's layer (its listeners go with it)
   */
  leafBlock(panel, key, layer, leaf, name) {
    for (const el of panel.querySelectorAll(".sw-leaf")) {
      if (el.getAttribute("data-key") === key) return el;
    }
    const modes = h("div", { class: "sw-modes" }, [
      h("span", { class: "sw-mode-train", text: "train" }), " ", h("span", { class: "sw-mode-eval", text: "eval" }),
    ]);
    modes.hidden = true;
    const block = h("div", { class: "sw-leaf", "data-key": key }, [
      h("div", { class: "sw-leaf-title" }),
      h("div", { class: "sw-histrow" }, [
        h("div", { class: "sw-count-axis", "aria-hidden": "true" }, [
          h("span", { class: "sw-count-max" }), h("span", { class: "sw-count-title" }), h("span", { class: "sw-count-zero", text: "0" }),
        ]),
        h("canvas", { class: "sw-hist", role: "img", "aria-label": `Histogram of ${layer} ${leaf}` }),
        h("div", { class: "sw-zero", role: "img", hidden: true }, [
          h("div", { class: "sw-zero-track" }, [h("div", { class: "sw-zero-fill" }), h("div", { class: "sw-zero-pin" })]),
          h("span", { class: "sw-zero-label" }),
        ]),
        h("span", { class: "sw-hist-empty", role: "status" }),
      ]),
      h("div", { class: "sw-range" }, [h("span", { class: "sw-lo" }), h("span", { class: "sw-range-title", text: "value" }), h("span", { class: "sw-hi" })]),
      h("div", { class: "sw-sampled", hidden: true }),
      h("div", { class: "sw-heatrow" }, [
        h("div", { class: "sw-step-axis", "aria-hidden": "true" }, [
          h("span", { class: "sw-step-first" }), h("span", { class: "sw-step-title" }), h("span", { class: "sw-step-last" }),
        ]),
        h("canvas", {
          class: "sw-heat", role: "img", tabindex: "0", "aria-label": `History of ${layer} ${leaf}`,
          title: "Click a step to pin its histogram over the latest one",
        }),
      ]),
      modes,
      h("div", { class: "sw-pin" }),
      h("div", { class: "sw-stats" }),
      h("table", { class: "sw-pin-stats", hidden: true, "aria-label": "The latest and the pinned step" }),
      curvesBlock(`${layer} ${leaf}`),
    ]);
    const heat = /** @type {HTMLCanvasElement} */ (block.querySelector(".sw-heat"));
    const d = this.disposers.get(name);
    d?.listen(heat, "click", (e) => {
      const shown = this.shown.get(key) ?? [];
      if (!shown.length) return;
      const box = heat.getBoundingClientRect();
      const step = shown[rowAt(/** @type {MouseEvent} */ (e).clientY - box.top, box.height, shown.length)];
      if (this.pins.get(key)?.step === step.step) this.pins.delete(key);
      else this.pins.set(key, step);
      this.draw(name);
    });
    d?.listen(block, "keydown", (e) => {
      if (/** @type {KeyboardEvent} */ (e).key !== "Escape" || !this.pins.has(key)) return;
      this.pins.delete(key);
      e.stopPropagation(); // Escape unpins here; it does not also leave the notebook cell
      this.draw(name);
    });
    (/** @type {HTMLElement} */ (block.querySelector(".sw-pin"))).hidden = true;
    panel.append(block);
    return block;
  }
}
