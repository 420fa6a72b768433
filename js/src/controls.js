// Capture options bound to traits: `gradients` (checkbox) and `max_rate` (updates per second),
// and the note shown when clicks cannot reach a running cell (`clicks` = "note").
// A recorded run (`run` trait) has nothing to capture: it shows what the tree does instead.

import { h } from "./dom.js";
import { recordedLayers } from "./run_mode.js";

/** @typedef {import("./types.js").Model} Model */
/** @typedef {import("./dom.js").Disposer} Disposer */

/**
 * @param {Model} model
 * @param {Disposer} d
 */
export function controls(model, d) {
  const grads = h("input", { type: "checkbox", class: "sw-gradients" });
  const rate = h("input", {
    type: "number", class: "sw-rate", min: 0, step: 1,
    title: "Most updates a second per layer; 0 = every forward",
  });
  const note = h("span", { class: "sw-clicks-note", role: "note" }, [
    "clicks made while a cell runs apply when the cell finishes",
  ]);
  const refused = h("span", { class: "sw-rate-refused", role: "alert" });
  refused.hidden = true;
  const live = h("div", { class: "sw-live-controls" }, [
    h("label", {}, [grads, " gradients"]),
    h("label", {}, ["max rate ", rate, " /s"]),
  ]);
  const runNote = h("span", { class: "sw-run-note", role: "note" }, [
    "recorded run: select recorded layers in the tree to show them",
  ]);
  const paint = () => {
    const run = recordedLayers(model) != null;
    live.hidden = run;
    runNote.hidden = !run;
    note.hidden = model.get("clicks") !== "note";
    grads.checked = Boolean(model.get("gradients"));
    const r = String(model.get("max_rate") ?? 10);
    if (rate.value !== r && document.activeElement !== rate) rate.value = r;
  };
  d.listen(grads, "change", () => {
    model.set("gradients", grads.checked);
    model.save_changes();
  });
  d.listen(rate, "change", () => {
    const v = Number(rate.value);
    refused.hidden = Number.isFinite(v) && v >= 0;
    refused.textContent = `max rate ${rate.value || "(empty)"} refused: it must be ≥ 0 (0 = every forward)`;
    if (!refused.hidden) { rate.value = String(model.get("max_rate") ?? 10); return; }
    model.set("max_rate", v);
    model.save_changes();
  });
  d.onModel(model, "change:gradients", paint);
  d.onModel(model, "change:max_rate", paint);
  d.onModel(model, "change:clicks", paint);
  d.onModel(model, "change:run", paint);
  paint();
  return h("div", { class: "sw-controls" }, [live, runNote, note, refused]);
}
