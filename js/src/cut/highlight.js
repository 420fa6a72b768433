// Minimal Python syntax highlighting for the code panel: a tiny tokenizer, no dependencies.

const KEYWORDS = new Set([
  "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
  "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
  "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
]);

// One alternative per token kind, tried in order at each position.
const TOKEN = /(#[^\n]*)|([rbuf]{0,2}(?:'''[\s\S]*?'''|"""[\s\S]*?"""|'(?:\\.|[^'\\\n])*'?|"(?:\\.|[^"\\\n])*"?))|(\b\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?\b)|([A-Za-z_\u00C0-\uFFFF][\w\u00C0-\uFFFF]*)|(\s+)|([\s\S])/gy;

/** @typedef {{ type: "comment" | "string" | "number" | "keyword" | "name" | "space" | "punct", text: string }} Token */

/**
 * Split Python source into tokens; joining their texts gives the source back.
 * @param {string} code
 * @returns {Token[]}
 */
export function tokenize(code) {
  /** @type {Token[]} */
  const out = [];
  TOKEN.lastIndex = 0;
  let m;
  while (TOKEN.lastIndex < code.length && (m = TOKEN.exec(code)) !== null) {
    const [text, comment, string, number, word, space] = m;
    /** @type {Token["type"]} */
    let type = "punct";
    if (comment) type = "comment";
    else if (string) type = "string";
    else if (number) type = "number";
    else if (word) type = KEYWORDS.has(word) ? "keyword" : "name";
    else if (space) type = "space";
    const last = out[out.length - 1];
    if (last && last.type === type && (type === "punct" || type === "space")) last.text += text;
    else out.push({ type, text });
  }
  return out;
}

/**
 * Fill `el` with the highlighted source (spans `sw-tok-<type>`; plain text for names/spaces).
 * @param {HTMLElement} el
 * @param {string} code
 */
export function highlight(el, code) {
  el.replaceChildren(...tokenize(code).map((t) => {
    if (t.type === "name" || t.type === "space" || t.type === "punct") return document.createTextNode(t.text);
    const span = document.createElement("span");
    span.className = `sw-tok-${t.type}`;
    span.textContent = t.text;
    return span;
  }));
}
