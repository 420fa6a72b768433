// Small DOM helpers and the listener registry every view uses, so `render`'s cleanup
// can remove every listener it added (STYLE.md 12).

/**
 * Create an element with attributes and children.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, string | number | boolean>} [attrs]
 * @param {(Node | string)[]} [children]
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs = {}, children = []) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = String(v);
    else if (k === "text") el.textContent = String(v);
    else el.setAttribute(k, String(v));
  }
  el.append(...children);
  return el;
}

/** Tracks DOM listeners, model listeners and other teardown work; `dispose()` undoes all. */
export class Disposer {
  constructor() {
    /** @type {(() => void)[]} */
    this.fns = [];
  }

  /**
   * addEventListener, remembered for removal.
   * @param {EventTarget} target
   * @param {string} type
   * @param {(e: any) => void} fn
   * @param {AddEventListenerOptions} [opts]
   */
  listen(target, type, fn, opts) {
    target.addEventListener(type, fn, opts);
    this.fns.push(() => target.removeEventListener(type, fn, opts));
  }

  /**
   * model.on, remembered for model.off.
   * @param {import("./types.js").Model} model
   * @param {string} event
   * @param {(...args: any[]) => void} fn
   */
  onModel(model, event, fn) {
    model.on(event, fn);
    this.fns.push(() => model.off(event, fn));
  }

  /** @param {() => void} fn */
  add(fn) {
    this.fns.push(fn);
  }

  dispose() {
    for (const fn of this.fns.splice(0).reverse()) fn();
  }
}

/**
 * Read a CSS custom property from an element, with a fallback.
 * @param {Element} el
 * @param {string} name
 * @param {string} fallback
 */
export function cssVar(el, name, fallback) {
  return getComputedStyle(el).getPropertyValue(name).trim() || fallback;
}

/** @param {number} n */
export function formatCount(n) {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}K`;
  return String(n);
}

/**
 * A number's compact text in `el`, its full value on hover when the text is shorter.
 * @param {HTMLElement} el
 * @param {string} text
 * @param {string} full
 */
export function showNumber(el, text, full) {
  el.textContent = text;
  if (full && full !== text) el.title = full;
  else el.removeAttribute("title");
}
