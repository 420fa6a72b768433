// The exact zeros' own bar: its label.
import assert from "node:assert/strict";
import { test } from "node:test";

import { zeroLabel } from "../src/histogram/zeros.js";

test("the zero bar reads '0: 35%', and nothing when no value is an exact zero", () => {
  assert.equal(zeroLabel(0.35), "0: 35%");
  assert.equal(zeroLabel(0.004), "0: 0.4%");
  assert.equal(zeroLabel(1), "0: 100%");
  assert.equal(zeroLabel(0), "");
  assert.equal(zeroLabel(null), "");
});
