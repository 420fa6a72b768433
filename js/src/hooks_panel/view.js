// Active hooks, errors raised inside our hooks, and the "Remove all hooks" button.

import { h } from "../dom.js";

/** @typedef {import("../types.js").Model} Model */
/** @typedef {import("../dom.js").Disposer} Disposer */

export class HooksPanel {
  /**
   * @param {Model} model
   * @param {Disposer} d
   */
  constructor(model, d) {
    this.model = model;
    this.title = h("h3", { class: "sw-hooks-title" });
    this.list = h("ul", { class: "sw-hooks-list" });
    this.button = h("button", { type: "button", class: "sw-button sw-remove-hooks", text: "Remove all hooks" });
    this.errors = h("ul", { class: "sw-errors", role: "alert" });
    this.el = h("div", { class: "sw-hooks" }, [
      h("div", { class: "sw-hooks-head" }, [this.title, this.button]),
      this.list,
      this.errors,
    ]);
    d.listen(this.button, "click", () => model.send({ type: "remove_all_hooks" }));
    d.onModel(model, "change:hooks", () => this.paint());
    d.onModel(model, "change:errors", () => this.paint());
    d.onModel(model, "change:selected", () => this.paint());
    this.paint();
  }

  paint() {
    const hooks = this.model.get("hooks") ?? [];
    this.title.textContent = `Active hooks (${hooks.length})`;
    this.list.replaceChildren(...hooks.map((k) => h("li", {}, [
      h("span", { class: "sw-hook-name", text: k.name }),
      h("span", { class: "sw-hook-kind", text: k.kind }),
    ])));
    this.button.disabled = hooks.length === 0 && (this.model.get("selected") ?? []).length === 0;
    const errors = this.model.get("errors") ?? [];
    this.errors.replaceChildren(...errors.map((e) => h("li", { text: e })));
    this.errors.hidden = errors.length === 0;
  }
}
