// Range labels of the small charts under each histogram.
import assert from "node:assert/strict";
import { test } from "node:test";

import { spanText } from "../src/histogram/format.js";

test("chart ranges: 3 digits each, or a narrow range as its low end and +span", () => {
  assert.deepEqual(spanText(0.214, 0.256), ["0.214", "0.256"]);
  assert.deepEqual(spanText(35.9, 40.5), ["35.9", "40.5"]);
  assert.deepEqual(spanText(0.8273, 0.82733), ["0.8273", "+3e-5"]);  // not "0.8273 … 0.82733"
  assert.deepEqual(spanText(0.827302, 0.827333), ["0.8273", "+3.1e-5"]);
  assert.deepEqual(spanText(1204.1, 1204.9), ["1204", "+0.8"]);
  assert.deepEqual(spanText(2, 2), ["2", "2"]);
});
