// Marking graph nodes as a cut's inputs and outputs (traits `node_in` / `node_out`, PROTOCOL.md).

/** @typedef {import("../types.js").Model} Model */
/** @typedef {"in" | "out"} Side */

/**
 * Toggle `name` on one side of the cut; a node marked on the other side moves over.
 * Pure: returns the new `{node_in, node_out}` maps (name -> new name).
 * @param {Record<string, string>} nodeIn
 * @param {Record<string, string>} nodeOut
 * @param {string} name
 * @param {Side} side
 */
export function toggleMark(nodeIn, nodeOut, name, side) {
  const mine = { ...(side === "in" ? nodeIn : nodeOut) };
  const other = { ...(side === "in" ? nodeOut : nodeIn) };
  if (name in mine) delete mine[name];
  else { mine[name] = name; delete other[name]; }
  return side === "in" ? { node_in: mine, node_out: other } : { node_in: other, node_out: mine };
}

/**
 * @param {Model} model
 * @param {string} name
 * @param {Side} side
 */
export function toggleOnModel(model, name, side) {
  const next = toggleMark(model.get("node_in") ?? {}, model.get("node_out") ?? {}, name, side);
  model.set("node_in", next.node_in);
  model.set("node_out", next.node_out);
  model.save_changes();
}

/**
 * Which side `name` is marked on, if any.
 * @param {Model} model
 * @param {string} name
 * @returns {Side | null}
 */
export function markOf(model, name) {
  if (name in (model.get("node_in") ?? {})) return "in";
  if (name in (model.get("node_out") ?? {})) return "out";
  return null;
}
