// Panels follow the model's order (the tree's pre-order rows), not the order of clicks.

/** @typedef {import("./types.js").Row} Row */

/**
 * `names` sorted by their row's position in `rows`; names without a row keep their order, last.
 * @param {string[]} names
 * @param {Row[] | undefined} rows
 * @returns {string[]}
 */
export function inModelOrder(names, rows) {
  /** @type {Map<string, number>} */
  const at = new Map();
  (rows ?? []).forEach((r, i) => at.set(r.name, i));
  const rank = (/** @type {string} */ n) => at.get(n) ?? Infinity;
  return names.map((n, i) => /** @type {[string, number]} */ ([n, i]))
    .sort((a, b) => rank(a[0]) - rank(b[0]) || a[1] - b[1])
    .map(([n]) => n);
}
