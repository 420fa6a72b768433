// kernel_gone.js against fake ipywidgets models and JupyterLab kernel connections.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Disposer } from "../src/dom.js";
import { watchKernel } from "../src/kernel_gone.js";

/** A Lumino-like signal: connect / disconnect / emit. */
class Signal {
  constructor() { this.slots = new Set(); }
  connect(fn) { this.slots.add(fn); return true; }
  disconnect(fn) { return this.slots.delete(fn); }
  emit(value) { for (const fn of [...this.slots]) fn(this, value); }
}

function fakeModel(kernel) {
  const handlers = new Map();
  return {
    handlers,
    widget_manager: kernel === undefined ? undefined : { kernel },
    on(event, fn) { handlers.set(event, [...(handlers.get(event) ?? []), fn]); },
    off(event, fn) { handlers.set(event, (handlers.get(event) ?? []).filter((f) => f !== fn)); },
    emit(event) { for (const fn of handlers.get(event) ?? []) fn(); },
  };
}

function kernel(status = "idle") {
  return { status, isDisposed: false, statusChanged: new Signal(), disposed: new Signal() };
}

test("a restart, a dead kernel, a disposed connection or disconnected models stop the view once", () => {
  for (const [how, act] of [
    ["status:restarting", (k) => k.statusChanged.emit("restarting")],
    ["status:dead", (k) => k.statusChanged.emit("dead")],
    ["disposed", (k) => k.disposed.emit(undefined)],
    ["comm_live", (_k, m) => m.emit("comm_live_update")],
  ]) {
    const k = kernel();
    const model = fakeModel(k);
    const d = new Disposer();
    const seen = [];
    watchKernel(/** @type {any} */ (model), d, (signal) => seen.push(signal));
    k.statusChanged.emit("busy");  // a running cell is no stop
    assert.deepEqual(seen, []);
    act(k, model);
    act(k, model);
    k.disposed.emit(undefined);
    assert.deepEqual(seen, [how], how);
    d.dispose();
    assert.equal(k.statusChanged.slots.size + k.disposed.slots.size, 0, "listeners removed");
  }
});

test("a kernel already gone stops at once; no kernel at all waits for the model's event", () => {
  const seen = [];
  const gone = { ...kernel("dead") };
  watchKernel(/** @type {any} */ (fakeModel(gone)), new Disposer(), (s) => seen.push(s));
  assert.deepEqual(seen, ["status:dead"]);
  const none = fakeModel(undefined);
  watchKernel(/** @type {any} */ (none), new Disposer(), (s) => seen.push(s));
  assert.deepEqual(seen, ["status:dead"]);
  none.emit("comm_live_update");
  assert.deepEqual(seen, ["status:dead", "comm_live"]);
});
