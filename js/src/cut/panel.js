// The cut panel: marked inputs/outputs (with rename fields), the live report, the suggested fix,
// and the generated code with Copy / Insert as new cell (PROTOCOL.md "Cut").

import { formatCount, h } from "../dom.js";
import { highlight } from "./highlight.js";
import { copyText, inMarimo, insertInPage, insertThroughNotebookDom, NO_INSERT, NO_INSERT_MARIMO } from "./insert.js";

/** @typedef {import("../types.js").Model} Model */
/** @typedef {import("../dom.js").Disposer} Disposer */

/** How long to wait for the kernel's answer to `insert_cell` before saying it cannot work. */
const INSERT_TIMEOUT_MS = 4000;

export class CutPanel {
  /**
   * @param {Model} model
   * @param {Disposer} d
   */
  constructor(model, d) {
    this.model = model;
    this.ins = h("ul", { class: "sw-cut-list sw-cut-ins", "aria-label": "Cut inputs" });
    this.outs = h("ul", { class: "sw-cut-list sw-cut-outs", "aria-label": "Cut outputs" });
    this.summary = h("div", { class: "sw-cut-summary", "aria-live": "polite" });
    this.recomputing = h("div", { class: "sw-cut-recomputing", role: "status", text: "Recomputing the cut report…" });
    this.recomputing.hidden = true;
    this.problems = h("ul", { class: "sw-cut-problems", role: "alert" });
    this.fix = h("button", { type: "button", class: "sw-button sw-cut-fix" });
    this.code = h("code", { class: "sw-code-text" });
    this.pre = h("pre", { class: "sw-code", "aria-label": "Generated code" }, [this.code]);
    this.copy = h("button", { type: "button", class: "sw-button sw-copy", text: "Copy" });
    this.insert = h("button", { type: "button", class: "sw-button sw-insert", text: "Insert as new cell" });
    this.status = h("span", { class: "sw-cut-status", role: "status" });
    this.hint = h("p", {
      class: "sw-cut-hint",
      text: "Turn on graph nodes, then mark nodes with the in / out buttons (keys i / o on the focused row).",
    });
    this.el = h("section", { class: "sw-cut", "aria-label": "Cut" }, [
      h("h3", { class: "sw-cut-title", text: "Cut" }),
      this.hint,
      h("div", { class: "sw-cut-sides" }, [
        h("div", {}, [h("h4", { text: "Inputs" }), this.ins]),
        h("div", {}, [h("h4", { text: "Outputs" }), this.outs]),
      ]),
      this.recomputing, this.summary, this.problems, this.fix, this.pre,
      h("div", { class: "sw-code-actions" }, [this.copy, this.insert, this.status]),
    ]);
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.timer = null;
    d.add(() => this.clearTimer());

    d.listen(this.el, "change", (e) => this.onRename(e));
    d.listen(this.el, "click", (e) => this.onUnmark(e));
    d.listen(this.fix, "click", () => model.send({ type: "cut_apply_fix" }));
    d.listen(this.copy, "click", () => this.onCopy());
    d.listen(this.insert, "click", () => this.onInsert());
    /** @type {{ selected: string[], code: string } | null} the code of a selection that waits
     * for the model's thread (a "code" message: the kernel is busy, e.g. compiling) */
    this.preview = null;
    d.onModel(model, "msg:custom", (/** @type {any} */ msg) => {
      if (msg?.type === "code") {
        this.preview = { selected: [...(msg.selected ?? [])], code: String(msg.code ?? "") };
        this.paintCode();
        return;
      }
      if (msg?.type !== "insert_result") return;
      this.clearTimer();
      this.setStatus(String(msg.message ?? ""), !msg.ok);
    });
    for (const key of ["node_in", "node_out", "cut_report"]) d.onModel(model, `change:${key}`, () => this.paint());
    d.onModel(model, "change:code", () => { this.preview = null; this.paintCode(); });
    d.onModel(model, "change:selected", () => this.paintCode());
    this.paint();
    this.paintCode();
  }

  clearTimer() {
    if (this.timer != null) clearTimeout(this.timer);
    this.timer = null;
  }

  /**
   * @param {string} text
   * @param {boolean} [error]
   */
  setStatus(text, error = false) {
    this.status.textContent = text;
    this.status.classList.toggle("sw-error-text", error);
  }

  paint() {
    const nodeIn = this.model.get("node_in") ?? {};
    const nodeOut = this.model.get("node_out") ?? {};
    this.ins.replaceChildren(...Object.entries(nodeIn).map(([n, v]) => this.item("input", n, v)));
    this.outs.replaceChildren(...Object.entries(nodeOut).map(([n, v]) => this.item("output", n, v)));
    const marked = Object.keys(nodeIn).length + Object.keys(nodeOut).length > 0;
    this.hint.hidden = marked;
    const r = /** @type {any} */ (this.model.get("cut_report") ?? {});
    // The report names the cut it is for: until it matches the marks, Python is recomputing.
    const stale = marked && !(sameNames(r.node_in, nodeIn) && sameNames(r.node_out, nodeOut));
    this.el.classList.toggle("sw-cut-stale", stale);
    this.pre.setAttribute("aria-busy", String(stale));
    this.recomputing.hidden = !stale;
    const lines = [];
    if (marked && r.valid !== undefined) {
      const leaks = /** @type {Record<string, string[]>} */ (r.leaks ?? {});
      lines.push(h("div", { class: r.valid ? "sw-cut-valid" : "sw-cut-invalid", text: verdict(r.valid, Object.keys(leaks)) }));
      if ((r.inputs ?? []).length) {
        lines.push(h("div", { class: "sw-cut-inputs" }, [
          "Cut model inputs: ",
          ...(r.inputs ?? []).map((/** @type {string} */ n, /** @type {number} */ i) => h("span", {
            class: n in leaks ? "sw-cut-input sw-cut-leaky" : "sw-cut-input", text: `${i ? ", " : ""}${n}`,
          })),
        ]));
      }
      for (const [name, readers] of Object.entries(leaks)) {
        lines.push(h("div", {
          class: "sw-cut-leak", "data-leak": name,
          text: `⚠ original input ${name} is still needed through ${readers.join(", ")}`,
        }));
      }
      if ((r.outputs ?? []).length) lines.push(h("div", { text: `Outputs: ${r.outputs.join(", ")}` }));
      if (r.method) {
        lines.push(h("div", {
          class: "sw-cut-sizes",
          text: `Keeps ${formatCount(r.params_kept)} of ${formatCount(r.params_total)} parameters, `
            + `${r.nodes_kept} of ${r.nodes_total} operations (${r.method})`,
        }));
      }
      if (r.note) lines.push(h("div", { class: "sw-cut-note", text: `Note: ${r.note}` }));
    }
    this.summary.replaceChildren(...lines);
    const problems = /** @type {string[]} */ (marked ? r.problems ?? [] : []);
    this.problems.replaceChildren(...problems.map((p) => h("li", { text: p })));
    this.problems.hidden = problems.length === 0;
    const fix = /** @type {string[] | null} */ (r.fix ?? null);
    this.fix.hidden = !(marked && fix && fix.length);
    this.fix.textContent = fix?.length ? `Apply fix: also cut at ${fix.join(", ")}` : "";
  }

  /** The code box's code: Python's `code`, or the waiting selection's while it is the view's. */
  shownCode() {
    const p = this.preview;
    const selected = this.model.get("selected") ?? [];
    const current = p && p.selected.length === selected.length && p.selected.every((n, i) => n === selected[i]);
    return current && p ? p.code : this.model.get("code") ?? "";
  }

  paintCode() {
    const code = this.shownCode();
    highlight(this.code, code || "# mark a cut or select layers to get code");
    this.copy.disabled = !code;
    this.insert.disabled = !code;
    this.clearTimer();
    this.setStatus("");  // "Copied" / "Inserted" were about the code before
  }

  /** What "Insert as new cell" inserts: the code shown (the report's copy of it once the
   * report is for the current marks: never code of other marks), else `code`. */
  insertedCode() {
    const r = /** @type {any} */ (this.model.get("cut_report") ?? {});
    const fresh = sameNames(r.node_in, this.model.get("node_in") ?? {})
      && sameNames(r.node_out, this.model.get("node_out") ?? {});
    return fresh && r.code ? String(r.code) : this.shownCode();
  }

  /**
   * @param {"input" | "output"} side
   * @param {string} name
   * @param {string} value
   */
  item(side, name, value) {
    return h("li", { "data-cut": side, "data-name": name }, [
      h("span", { class: "sw-cut-name", text: name }),
      h("input", {
        type: "text", class: "sw-cut-rename", value, spellcheck: "false",
        "aria-label": `New name of ${side} ${name}`,
      }),
      h("button", { type: "button", class: "sw-cut-unmark", "aria-label": `Unmark ${side} ${name}`, text: "×" }),
    ]);
  }

  /** @param {Event} e */
  onRename(e) {
    const input = /** @type {HTMLInputElement} */ (e.target);
    const li = input.closest?.("li[data-cut]");
    if (!li || !input.classList.contains("sw-cut-rename")) return;
    const key = li.getAttribute("data-cut") === "input" ? "node_in" : "node_out";
    const name = li.getAttribute("data-name") ?? "";
    this.model.set(key, { ...(this.model.get(key) ?? {}), [name]: input.value.trim() || name });
    this.model.save_changes();
  }

  /** @param {Event} e */
  onUnmark(e) {
    const button = /** @type {Element} */ (e.target).closest?.(".sw-cut-unmark");
    const li = button?.closest("li[data-cut]");
    if (!li) return;
    const key = li.getAttribute("data-cut") === "input" ? "node_in" : "node_out";
    const next = { ...(this.model.get(key) ?? {}) };
    delete next[li.getAttribute("data-name") ?? ""];
    this.model.set(key, next);
    this.model.save_changes();
  }

  async onCopy() {
    const ok = await copyText(this.shownCode(), this.el);
    if (ok) this.setStatus("Copied");
    else {
      const range = document.createRange();
      range.selectNodeContents(this.code);
      getSelection()?.removeAllRanges();
      getSelection()?.addRange(range);
      this.setStatus("Copy is blocked here: the code is selected, press Ctrl+C", true);
    }
  }

  async onInsert() {
    const code = this.insertedCode();
    this.clearTimer();
    this.setStatus("");
    if (inMarimo(this.el)) {
      this.setStatus(NO_INSERT_MARIMO, true);
      return;
    }
    try {
      if (await insertInPage(code) || await insertThroughNotebookDom(this.el, code)) {
        this.setStatus("Inserted a new cell below");
        return;
      }
    } catch (err) {
      console.warn("surgeon_widgets: insert through the page failed", err);
    }
    this.setStatus("Inserting through the kernel…");
    this.model.send({ type: "insert_cell", code });
    this.clearTimer();
    this.timer = setTimeout(() => this.setStatus(NO_INSERT, true), INSERT_TIMEOUT_MS);
  }
}

/**
 * The report's first line: a valid cut that still reads original inputs says which.
 * @param {boolean} valid
 * @param {string[]} leaking original inputs the cut still reads
 */
export function verdict(valid, leaking) {
  if (!valid) return "✗ not a valid cut";
  if (!leaking.length) return "✓ valid cut";
  const inputs = leaking.length > 1 ? "inputs" : "input";
  return `✓ valid, also reads original ${inputs} ${leaking.join(", ")}`;
}

/**
 * Whether the report's node names are exactly the marked ones.
 * @param {string[] | undefined} reported
 * @param {Record<string, string>} marked
 */
function sameNames(reported, marked) {
  const a = [...(reported ?? [])].sort();
  const b = Object.keys(marked).sort();
  return a.length === b.length && a.every((n, i) => n === b[i]);
}
