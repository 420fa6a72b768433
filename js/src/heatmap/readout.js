// Pure helpers of the heatmap: which tokens a (pooled) cell covers, its weight, the hover text.

/** @typedef {import("./store.js").AttentionMap} AttentionMap */

/**
 * Full-resolution indices [start, end) pooled into cell `i` of `n` (adaptive average pooling).
 * @param {number} i
 * @param {number} n cells
 * @param {number} full full length
 * @returns {[number, number]}
 */
export function span(i, n, full) {
  return [Math.floor((i * full) / n), Math.ceil(((i + 1) * full) / n)];
}

/**
 * Weight of cell (row, col): exact when the map was sent unpooled as float32, else decoded.
 * @param {AttentionMap} m
 * @param {number} row
 * @param {number} col
 */
export function weightAt(m, row, col) {
  const k = row * m.cols + col;
  if (m.exact) return m.exact[k];
  return m.lo + (m.values[k] / 255) * (m.hi - m.lo);
}

/** @param {number} w */
export function formatWeight(w) {
  if (w === 0) return "0";
  return Math.abs(w) >= 1e-3 ? w.toFixed(4) : w.toExponential(2);
}

/**
 * "the" #3 for one token, or #16–31 (16 tokens) for a pooled range.
 * @param {[number, number]} range
 * @param {string[] | null} tokens
 */
export function tokenText(range, tokens) {
  const [a, b] = range;
  if (b - a <= 1) return tokens ? `${JSON.stringify(tokens[a])} #${a}` : `#${a}`;
  const first = tokens ? ` ${JSON.stringify(tokens[a])}…${JSON.stringify(tokens[b - 1])}` : "";
  return `#${a}–${b - 1}${first} (${b - a} tokens)`;
}

/**
 * Hover read-out of cell (row, col): query token(s), key token(s), weight.
 * @param {AttentionMap} m
 * @param {number} row
 * @param {number} col
 * @param {string[] | null} tokensQ
 * @param {string[] | null} tokensK
 */
export function readout(m, row, col, tokensQ, tokensK) {
  const q = span(row, m.rows, m.fullRows);
  const k = span(col, m.cols, m.fullCols);
  const pooled = q[1] - q[0] > 1 || k[1] - k[0] > 1;
  const w = weightAt(m, row, col);
  const weight = m.exact ? formatWeight(w) : `${pooled ? "mean " : ""}≈ ${formatWeight(w)}`;
  return `query ${tokenText(q, tokensQ)} · key ${tokenText(k, tokensK)} · weight ${weight}`;
}

/**
 * Cell under a point given in CSS pixels relative to the map's box.
 * @param {number} x
 * @param {number} y
 * @param {number} width CSS width of the box
 * @param {number} height CSS height of the box
 * @param {number} rows
 * @param {number} cols
 * @returns {[number, number] | null}
 */
export function cellAt(x, y, width, height, rows, cols) {
  if (!(x >= 0 && y >= 0 && x < width && y < height)) return null;
  return [Math.min(rows - 1, Math.floor((y / height) * rows)), Math.min(cols - 1, Math.floor((x / width) * cols))];
}

/**
 * What one query row attends to: its strongest keys (at most `top`), strongest first.
 * @param {AttentionMap} m
 * @param {number} row
 * @param {string[] | null} tokensQ
 * @param {string[] | null} tokensK
 * @param {number} [top]
 */
export function rowReadout(m, row, tokensQ, tokensK, top = 3) {
  const order = Array.from({ length: m.cols }, (_, c) => c)
    .map((c) => [c, weightAt(m, row, c)])
    .sort((a, b) => b[1] - a[1])
    .slice(0, top);
  const q = tokenText(span(row, m.rows, m.fullRows), tokensQ);
  const keys = order.map(([c, w]) => `${tokenText(span(c, m.cols, m.fullCols), tokensK)} ${formatWeight(w)}`);
  return `query ${q} attends most to ${keys.join(", ")}`;
}

/**
 * Row labels of the heads x layers grid: the layer names without the dotted prefix they all
 * share ("encoder.layer.0.attention.self" and "encoder.layer.1..." -> "0.attention.self", ...),
 * never cut otherwise (the full name is the label's title).
 * @param {string[]} names
 */
export function gridLabels(names) {
  if (names.length < 2) return [...names];
  const parts = names.map((n) => n.split("."));
  let shared = 0;
  const shortest = Math.min(...parts.map((p) => p.length)) - 1;  // keep each name's last part
  while (shared < shortest && parts.every((p) => p[shared] === parts[0][shared])) shared += 1;
  return parts.map((p) => p.slice(shared).join("."));
}
