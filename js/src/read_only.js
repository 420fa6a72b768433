// A replaced or closed Explorer is read-only (PROTOCOL.md "Read-only"): its view still shows
// what it recorded, but drops every change of the traits Python refuses (`FROZEN`), every sync
// and every message but "hello", and its form controls are disabled. Python refuses them too.

/** @typedef {import("./types.js").Model} Model */

/** The traits a read-only Explorer does not change (widget/runtime/ownership.py's FROZEN). */
export const FROZEN = ["selected", "gradients", "param_layers", "node_in", "node_out", "show_nodes"];

/**
 * Why the view is read-only ("" while it is live): Python's `replaced` text, or closed.
 * @param {Model} model
 */
export function readOnly(model) {
  return String(model.get("replaced") || (model.get("closed") ? "Explorer closed" : ""));
}

/**
 * `model` whose writes are dropped while it is read-only; every view gets this one.
 * @param {Model} model
 * @returns {Model}
 */
export function guardWrites(model) {
  const frozen = () => readOnly(model) !== "";
  const wrapped = {
    /** @param {string} key @param {any} value */
    set: (key, value) => {
      if (!(frozen() && FROZEN.includes(key))) model.set(/** @type {any} */ (key), value);
    },
    save_changes: () => {
      if (!frozen()) model.save_changes();
    },
    /** @param {any} content @param {...any} rest */
    send: (content, ...rest) => {
      if (!frozen() || content?.type === "hello") model.send(content, ...rest);
    },
  };
  return /** @type {Model} */ (new Proxy(model, {
    get(target, prop) {
      if (prop === "set" || prop === "send" || prop === "save_changes") return wrapped[prop];
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  }));
}
