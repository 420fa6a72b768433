// Active hooks, notes, a status line ("the model is compiling: first record after it" during
// the model's first torch.compile, "recompiling, ~N s" while dynamo recompiles after a
// selection change), and the error list (merged
// entries with a count, the detail on hover and in a <details>, a Clear button).
// A recorded run has no hooks: only its errors (reading the run, a failed job) are shown.

import { h } from "../dom.js";
import { recordedLayers } from "../run_mode.js";

/** @typedef {import("../types.js").Model} Model */
/** @typedef {import("../types.js").ErrorEntry} ErrorEntry */
/** @typedef {import("../dom.js").Disposer} Disposer */

/**
 * One readable line per entry; repeats show as "×N".
 * @param {ErrorEntry} e
 * @returns {{ text: string, count: number, detail: string }}
 */
export function errorLine(e) {
  return { text: e.text, count: e.count ?? 1, detail: e.detail && e.detail !== e.text ? e.detail : "" };
}

export class HooksPanel {
  /**
   * @param {Model} model
   * @param {Disposer} d
   */
  constructor(model, d) {
    this.model = model;
    this.notes = h("ul", { class: "sw-notes" });
    this.status = h("p", { class: "sw-status", role: "status" });
    this.title = h("h3", { class: "sw-hooks-title" });
    this.list = h("ul", { class: "sw-hooks-list" });
    this.button = h("button", { type: "button", class: "sw-button sw-remove-hooks", text: "Remove all hooks" });
    this.errors = h("ul", { class: "sw-errors", role: "alert" });
    this.clear = h("button", { type: "button", class: "sw-button sw-clear-errors", text: "Clear errors" });
    this.errorBox = h("div", { class: "sw-error-box" }, [
      h("div", { class: "sw-hooks-head" }, [h("h3", { class: "sw-errors-title", text: "Errors" }), this.clear]),
      this.errors,
    ]);
    this.head = h("div", { class: "sw-hooks-head" }, [this.title, this.button]);
    this.el = h("div", { class: "sw-hooks" }, [
      this.notes,
      this.status,
      this.head,
      this.list,
      this.errorBox,
    ]);
    d.listen(this.button, "click", () => model.send({ type: "remove_all_hooks" }));
    d.listen(this.clear, "click", () => model.send({ type: "clear_errors" }));
    for (const trait of ["hooks", "errors", "selected", "notes", "status", "compiling", "replaced", "run"]) {
      d.onModel(model, `change:${trait}`, () => this.paint());
    }
    this.paint();
  }

  paint() {
    const replaced = this.model.get("replaced") ?? "";
    const notes = this.model.get("notes") ?? [];
    this.notes.replaceChildren(...notes.map((n) => h("li", { text: n })));
    this.notes.hidden = notes.length === 0;
    const status = this.model.get("status") ?? "";
    this.status.textContent = status;
    this.status.hidden = !status;
    const hooks = this.model.get("hooks") ?? [];
    // a selection made while the model compiles waits for it: not "0 hooks" as if none will come
    const waits = this.model.get("compiling") && hooks.length === 0 && (this.model.get("selected") ?? []).length > 0;
    this.title.textContent = waits ? "Active hooks: attached when the compile ends" : `Active hooks (${hooks.length})`;
    this.status.classList.toggle("sw-compiling", Boolean(this.model.get("compiling")));
    this.list.replaceChildren(...hooks.map((k) => h("li", {}, [
      h("span", { class: "sw-hook-name", text: k.name }),
      h("span", { class: "sw-hook-kind", text: k.kind }),
    ])));
    this.button.disabled = Boolean(replaced) || (hooks.length === 0 && (this.model.get("selected") ?? []).length === 0);
    const errors = (this.model.get("errors") ?? []).map(errorLine);
    this.errors.replaceChildren(...errors.map((e) => h("li", { class: "sw-error", title: e.detail || e.text }, [
      h("span", { class: "sw-error-text", text: e.text }),
      ...(e.count > 1 ? [h("span", { class: "sw-error-count", text: ` ×${e.count}` })] : []),
      ...(e.detail ? [h("details", { class: "sw-error-detail" }, [h("summary", { text: "detail" }), h("pre", { text: e.detail })])] : []),
    ])));
    this.errorBox.hidden = errors.length === 0;
    const run = recordedLayers(this.model) != null;
    this.head.hidden = run;
    this.list.hidden = run;
    this.el.hidden = run && errors.length === 0 && notes.length === 0 && !replaced;
  }
}
