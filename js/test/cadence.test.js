// The update interval and sampled-histogram texts of a histogram block.
import assert from "node:assert/strict";
import { test } from "node:test";

import { everyText, sampledText } from "../src/histogram/cadence.js";

test("the interval reads in seconds, then minutes, and is absent when unknown", () => {
  assert.equal(everyText({ every: 2.6 }), " · every 2.6 s");
  assert.equal(everyText({ every: 0.1 }), " · every 100 ms");
  assert.equal(everyText({ every: 0.0123 }), " · every 12 ms");
  assert.equal(everyText({ every: 0.0004 }), " · every < 1 ms");  // never "every 0.0 s"
  assert.equal(everyText({ every: 0.96 }), " · every 1.0 s");
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

test("with max_rate=0 (no throttle) the title says every step, and how far apart", () => {
  assert.equal(everyText({ every: 0.012 }, true), " · every step, 12 ms apart");
  assert.equal(everyText({ every: 2.6 }, true), " · every step, 2.6 s apart");
  assert.equal(everyText({}, true), " · every step");
});
