// The lines view of one layer (as BertViz's head view): query tokens left, key tokens right, a
// line from each query to each key whose opacity is the weight's place on the shared colour
// scale (./colour.js), every head overlaid in its own colour (`<g data-head="h">`), a head's
// swatch toggles it, hovering a token on either side keeps only that token's lines.

import { h } from "../dom.js";
import { position } from "./colour.js";
import { formatWeight, span, tokenText, weightAt } from "./readout.js";

/** @typedef {import("./store.js").LayerMaps} LayerMaps */
/** @typedef {import("./store.js").AttentionMap} AttentionMap */
/** @typedef {import("./colour.js").Scale} Scale */
/** @typedef {import("../dom.js").Disposer} Disposer */

const SVG = "http://www.w3.org/2000/svg";
/** Most cells a side the lines view draws (a longer map: the map view). */
export const MAX_TOKENS = 64;
/** Lines fainter than this are left out (they would not show, and cost DOM). */
const FAINTEST = 0.02;
const WIDTH = 420;
const TEXT = 130; // width of each token column
// d3's category10, then category20's lighter partners (12 heads, as BERT-base, stay distinct)
const PALETTE = [
  "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
  "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#9edae5", "#dbdb8d", "#c7c7c7",
];

/**
 * Colour of head `i`: a categorical palette, then turning hues.
 * @param {number} i
 */
export function headColour(i) {
  return i < PALETTE.length ? PALETTE[i] : `hsl(${Math.round((i * 137.5) % 360)}, 65%, 50%)`;
}

/**
 * Labels of the cells along one axis: the tokens when they match, else "#a–b" ranges.
 * @param {string[] | null} tokens
 * @param {number} cells
 * @param {number} full
 */
export function axisLabels(tokens, cells, full) {
  return Array.from({ length: cells }, (_, i) => {
    if (tokens && tokens.length === cells) return tokens[i];
    const [a, b] = span(i, cells, full);
    return b - a <= 1 ? `#${a}` : `#${a}–${b - 1}`;
  });
}

/**
 * The maps drawn as line groups: every head, or the mean when no head was kept.
 * @param {LayerMaps} entry
 * @returns {[string, AttentionMap][]}
 */
export function lineMaps(entry) {
  const heads = Array.from({ length: entry.heads }, (_, i) => String(i))
    .map((k) => /** @type {[string, AttentionMap | undefined]} */ ([k, entry.maps.get(k)]))
    .filter((x) => x[1] !== undefined);
  if (heads.length) return /** @type {[string, AttentionMap][]} */ (heads);
  const mean = entry.maps.get("mean");
  return mean ? [["mean", mean]] : [];
}

/**
 * @param {string} tag
 * @param {Record<string, string | number>} attrs
 */
function svg(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

export class LinesView {
  /**
   * @param {string} layer
   * @param {Disposer} d the panel's (listeners are delegated: one per element, kept across redraws)
   * @param {(text: string | null) => void} say hover read-out (null: the default text)
   */
  constructor(layer, d, say) {
    this.layer = layer;
    this.say = say;
    /** @type {Set<string>} */
    this.hidden = new Set();
    /** @type {{ side: "q" | "k", index: number } | null} */
    this.focus = null;
    /** @type {LayerMaps | null} */
    this.entry = null;
    this.swatches = h("div", { class: "sw-att-swatches", role: "group", "aria-label": `Heads of ${layer}` });
    this.note = h("p", { class: "sw-att-lines-note" });
    this.note.hidden = true;
    this.svg = /** @type {SVGSVGElement} */ (svg("svg", {
      class: "sw-att-lines-svg", role: "img", tabindex: 0,
      "aria-label": `Attention lines of ${layer} (arrow keys pick a token, Escape shows all)`,
    }));
    /** Cells a side as last drawn (keyboard bounds). */
    this.size = { q: 0, k: 0 };
    this.el = h("div", { class: "sw-att-lines" }, [this.swatches, this.note]);
    this.el.append(this.svg);
    d.listen(this.swatches, "click", (/** @type {MouseEvent} */ e) => {
      const button = /** @type {HTMLElement} */ (e.target).closest?.("button[data-head]");
      if (!(button instanceof HTMLElement)) return;
      this.toggle(String(button.dataset.head));
    });
    d.listen(this.svg, "mouseover", (/** @type {MouseEvent} */ e) => {
      const tok = /** @type {Element} */ (e.target).closest?.("[data-side]");
      if (!(tok instanceof SVGElement)) return;
      const side = tok.dataset.side === "k" ? "k" : "q";
      this.setFocus({ side, index: Number(tok.dataset.index) });
    });
    d.listen(this.svg, "mouseleave", () => this.setFocus(null));
    d.listen(this.svg, "keydown", (/** @type {KeyboardEvent} */ e) => this.key(e));
  }

  /**
   * Arrow keys walk the tokens (up / down on a side, left / right between sides); Escape: all lines.
   * @param {KeyboardEvent} e
   */
  key(e) {
    const f = this.focus ?? { side: /** @type {"q" | "k"} */ ("q"), index: -1 };
    /** @type {{ side: "q" | "k", index: number } | null | undefined} */
    let next;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      const step = e.key === "ArrowDown" ? 1 : -1;
      next = { side: f.side, index: Math.max(0, Math.min(this.size[f.side] - 1, f.index + step)) };
    } else if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
      const side = e.key === "ArrowLeft" ? "q" : "k";
      next = { side, index: Math.max(0, Math.min(this.size[side] - 1, f.index)) };
    } else if (e.key === "Escape") {
      next = null;
    }
    if (next === undefined || (next && this.size[next.side] === 0)) return;
    e.preventDefault();
    this.setFocus(next);
  }

  /** @param {string} head */
  toggle(head) {
    if (this.hidden.has(head)) this.hidden.delete(head);
    else this.hidden.add(head);
    for (const g of this.svg.querySelectorAll("g[data-head]")) {
      g.toggleAttribute("data-off", this.hidden.has(String(/** @type {SVGElement} */ (g).dataset.head)));
    }
    for (const b of this.swatches.querySelectorAll("button[data-head]")) {
      b.setAttribute("aria-pressed", String(!this.hidden.has(String(/** @type {HTMLElement} */ (b).dataset.head))));
    }
  }

  /**
   * Keep only the lines of one token (null: all lines); the token is marked.
   * @param {{ side: "q" | "k", index: number } | null} focus
   */
  setFocus(focus) {
    const same = focus?.side === this.focus?.side && focus?.index === this.focus?.index;
    this.focus = focus;
    if (same && focus) return;
    const attr = focus ? `data-${focus.side}` : "";
    for (const line of this.svg.querySelectorAll("line")) {
      line.toggleAttribute("data-off", focus !== null && line.getAttribute(attr) !== String(focus.index));
    }
    for (const t of this.svg.querySelectorAll("[data-side]")) {
      const el = /** @type {SVGElement} */ (t);
      el.toggleAttribute("data-focus", focus !== null && el.dataset.side === focus.side && Number(el.dataset.index) === focus.index);
    }
    this.svg.toggleAttribute("data-focused", focus !== null);
    this.say(focus && this.entry ? this.describe(this.entry, focus) : null);
  }

  /**
   * "query "cat" #1 · head 0: "The" #0 0.700 · head 1: ..." (the strongest key of each shown head).
   * @param {LayerMaps} entry
   * @param {{ side: "q" | "k", index: number }} focus
   */
  describe(entry, focus) {
    const maps = lineMaps(entry).filter(([k]) => !this.hidden.has(k));
    const first = maps[0]?.[1];
    if (!first) return "";
    const q = focus.side === "q";
    const [cells, full, tokens] = q ? [first.rows, first.fullRows, entry.tokensQ] : [first.cols, first.fullCols, entry.tokensK];
    const [others, othersFull, otherTokens] = q ? [first.cols, first.fullCols, entry.tokensK] : [first.rows, first.fullRows, entry.tokensQ];
    const parts = maps.map(([k, m]) => {
      let best = 0;
      let bestW = -Infinity;
      for (let j = 0; j < others; j++) {
        const w = q ? weightAt(m, focus.index, j) : weightAt(m, j, focus.index);
        if (w > bestW) { bestW = w; best = j; }
      }
      const who = tokenText(span(best, others, othersFull), otherTokens && otherTokens.length === othersFull ? otherTokens : null);
      return `${k === "mean" ? "mean" : `head ${k}`}: ${who} ${formatWeight(bestW)}`;
    });
    const me = tokenText(span(focus.index, cells, full), tokens && tokens.length === full ? tokens : null);
    return `${q ? "query" : "key"} ${me} · ${q ? "strongest key" : "strongest query"} per head: ${parts.join(" · ")}`;
  }

  /**
   * Draw `entry`'s lines on `scale` (rebuilt each update; hidden heads and focus are kept).
   * @param {LayerMaps} entry
   * @param {Scale} scale
   * @param {string} textColour
   */
  draw(entry, scale, textColour) {
    this.entry = entry;
    const maps = lineMaps(entry);
    const first = maps[0]?.[1];
    const mean = entry.maps.get("mean");
    this.paintSwatches(maps.map(([k]) => k));
    const rows = first?.rows ?? 0;
    const cols = first?.cols ?? 0;
    const tooMany = rows > MAX_TOKENS || cols > MAX_TOKENS;
    this.size = tooMany ? { q: 0, k: 0 } : { q: rows, k: cols };
    this.note.hidden = !tooMany;
    this.note.textContent = tooMany
      ? `Lines need at most ${MAX_TOKENS} tokens a side; this layer's maps are ${rows}×${cols}: see the map view.`
      : "";
    this.svg.replaceChildren();
    if (!first || tooMany) {
      this.svg.setAttribute("width", "0");
      this.svg.setAttribute("height", "0");
      return;
    }
    const step = Math.max(rows, cols) > 32 ? 12 : 18;
    const height = Math.max(rows, cols) * step + 8;
    this.svg.setAttribute("width", String(WIDTH));
    this.svg.setAttribute("height", String(height));
    this.svg.setAttribute("viewBox", `0 0 ${WIDTH} ${height}`);
    const yq = (/** @type {number} */ i) => 4 + (i + 0.5) * step;
    const yk = yq;
    const x0 = TEXT + 4;
    const x1 = WIDTH - TEXT - 4;
    const font = step >= 18 ? 12 : 10;
    const qLabels = axisLabels(entry.tokensQ, rows, mean?.fullRows ?? first.fullRows);
    const kLabels = axisLabels(entry.tokensK, cols, mean?.fullCols ?? first.fullCols);
    const columns = svg("g", { class: "sw-att-tokens", fill: textColour, "font-size": font });
    const addText = (/** @type {string} */ side, /** @type {number} */ i, /** @type {string} */ text) => {
      const t = svg("text", {
        x: side === "q" ? TEXT : WIDTH - TEXT, y: side === "q" ? yq(i) : yk(i), "data-side": side, "data-index": i,
        "text-anchor": side === "q" ? "end" : "start", "dominant-baseline": "middle",
      });
      t.textContent = text.length > 18 ? `${text.slice(0, 17)}…` : text;
      const title = svg("title", {});
      title.textContent = `${side === "q" ? "query" : "key"} ${text}`;
      t.append(title);
      columns.append(t);
    };
    qLabels.forEach((t, i) => addText("q", i, t));
    kLabels.forEach((t, i) => addText("k", i, t));
    const width = maps.length * rows * cols > 400 ? 1.25 : 2; // many lines: thinner, so they part
    const groups = maps.map(([head, m], n) => {
      const g = svg("g", { "data-head": head, stroke: head === "mean" ? textColour : headColour(n), "stroke-width": width });
      if (this.hidden.has(head)) g.setAttribute("data-off", "");
      for (let r = 0; r < Math.min(rows, m.rows); r++) {
        for (let c = 0; c < Math.min(cols, m.cols); c++) {
          const t = position(weightAt(m, r, c), scale);
          if (t < FAINTEST) continue;
          g.append(svg("line", {
            x1: x0, y1: yq(r), x2: x1, y2: yk(c), "stroke-opacity": (0.9 * t).toFixed(3), "data-q": r, "data-k": c,
          }));
        }
      }
      return g;
    });
    this.svg.append(...groups, columns);
    const focus = this.focus;
    this.focus = null;
    if (focus && (focus.side === "q" ? focus.index < rows : focus.index < cols)) this.setFocus(focus);
  }

  /** @param {string[]} heads */
  paintSwatches(heads) {
    const now = [...this.swatches.children].map((b) => /** @type {HTMLElement} */ (b).dataset.head);
    if (now.length === heads.length && now.every((k, i) => k === heads[i])) return;
    this.swatches.replaceChildren(...heads.map((head, n) => {
      const label = head === "mean" ? "mean of heads" : `head ${head}`;
      const swatch = h("span", { class: "sw-att-swatch-colour", "aria-hidden": "true" });
      swatch.style.background = head === "mean" ? "currentColor" : headColour(n);
      return h("button", {
        type: "button", class: "sw-att-swatch sw-local", "data-head": head, "aria-pressed": String(!this.hidden.has(head)),
        title: `Show or hide the lines of ${label}`, "aria-label": `${label} of ${this.layer}`,
      }, [swatch, h("span", { text: head === "mean" ? "μ" : head })]);
    }));
  }
}
