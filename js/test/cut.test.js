// Cut panel logic: the Python tokenizer and mark toggling.
import assert from "node:assert/strict";
import { test } from "node:test";

import { tokenize } from "../src/cut/highlight.js";
import { toggleMark } from "../src/cut/marks.js";
import { verdict } from "../src/cut/panel.js";

test("tokenize keeps the source and finds keywords, strings, numbers, comments", () => {
  const code = "# cut\nfrom surgeon_widgets import Extract\n\ncut = Extract(model, node_in=['a\"b', \"层\"], n=1.5e3)\n";
  const tokens = tokenize(code);
  assert.equal(tokens.map((t) => t.text).join(""), code);
  const of = (/** @type {string} */ type) => tokens.filter((t) => t.type === type).map((t) => t.text);
  assert.deepEqual(of("keyword"), ["from", "import"]);
  assert.deepEqual(of("string"), ["'a\"b'", "\"层\""]);
  assert.deepEqual(of("number"), ["1.5e3"]);
  assert.deepEqual(of("comment"), ["# cut"]);
  assert.equal(tokenize("x = 'unterminated").map((t) => t.text).join(""), "x = 'unterminated");
});

test("toggleMark adds, removes, and moves a node between sides", () => {
  let s = toggleMark({}, {}, "a", "in");
  assert.deepEqual(s, { node_in: { a: "a" }, node_out: {} });
  s = toggleMark(s.node_in, s.node_out, "a", "out");
  assert.deepEqual(s, { node_in: {}, node_out: { a: "a" } });
  s = toggleMark({ b: "x" }, s.node_out, "b", "in");
  assert.deepEqual(s, { node_in: {}, node_out: { a: "a" } });
});

test("the verdict of a valid cut names the original inputs it still reads", () => {
  assert.equal(verdict(true, []), "✓ valid cut");
  assert.equal(verdict(true, ["input_ids"]), "✓ valid, also reads original input input_ids");
  assert.equal(verdict(true, ["x", "y"]), "✓ valid, also reads original inputs x, y");
  assert.equal(verdict(false, ["x"]), "✗ not a valid cut");
});
