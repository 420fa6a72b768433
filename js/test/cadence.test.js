// The update interval and sampled-histogram texts of a histogram block.
import assert from "node:assert/strict";
import { test } from "node:test";

import { everyText, sampledText } from "../src/histogram/cadence.js";

test("the interval reads in seconds, then minutes, and is absent when unknown", () => {
  assert.equal(everyText({ every: 2.6 }), " · every 2.6 s");
  assert.equal(everyText({ every: 0.1 }), " · every 0.1 s");
  assert.equal(everyText({ every: 42.4 }), " · every 42 s");
  assert.equal(everyText({ every: 150 }), " · every 2.5 min");
  assert.equal(everyText({}), "");
  assert.equal(everyText({ every: null }), "");
});

test("a sampled histogram says how many values it binned", () => {
  assert.equal(sampledText({ sampled: 65536 }), "histogram of 65,536 samples");
  assert.equal(sampledText({}), "");
  assert.equal(sampledText({ sampled: 0 }), "");
});
