// Test harness: counts DOM listeners, fakes the anywidget model, mounts the built bundle.
// Everything the tests drive lives on `window.harness`.

// Count live DOM listeners (installed before the bundle is imported or rendered).
const live = [];
const origAdd = EventTarget.prototype.addEventListener;
const origRemove = EventTarget.prototype.removeEventListener;
const capture = (o) => (typeof o === "boolean" ? o : Boolean(o && o.capture));
EventTarget.prototype.addEventListener = function (type, fn, opts) {
  if (fn && !live.some((l) => l.t === this && l.type === type && l.fn === fn && l.c === capture(opts))) {
    live.push({ t: this, type, fn, c: capture(opts) });
  }
  return origAdd.call(this, type, fn, opts);
};
EventTarget.prototype.removeEventListener = function (type, fn, opts) {
  const i = live.findIndex((l) => l.t === this && l.type === type && l.fn === fn && l.c === capture(opts));
  if (i >= 0) live.splice(i, 1);
  return origRemove.call(this, type, fn, opts);
};

const DEFAULTS = {
  rows: [], shapes: {}, show_nodes: false, nodes_error: "", selected: [], gradients: false,
  max_rate: 10, hooks: [], errors: [], search: "",
};

/** Just enough of anywidget's AnyModel: get/set/on/off/save_changes/send. */
class FakeModel {
  constructor(state) {
    this.state = { ...structuredClone(DEFAULTS), ...state };
    this.handlers = new Map();
    this.sent = [];
    this.saved = 0;
  }
  get(key) { return this.state[key]; }
  set(key, value) {
    this.state[key] = value;
    this.emit(`change:${key}`);
  }
  on(event, fn) {
    if (!this.handlers.has(event)) this.handlers.set(event, []);
    this.handlers.get(event).push(fn);
  }
  off(event, fn) {
    if (event == null) { this.handlers.clear(); return; }
    const list = this.handlers.get(event) ?? [];
    this.handlers.set(event, fn == null ? [] : list.filter((f) => f !== fn));
  }
  save_changes() { this.saved += 1; }
  send(content, _callbacks, _buffers) { this.sent.push(content); }
  emit(event, ...args) {
    for (const fn of [...(this.handlers.get(event) ?? [])]) fn(...args);
  }
  listenerCount() {
    let n = 0;
    for (const list of this.handlers.values()) n += list.length;
    return n;
  }
}

const CODECS = { float32: Float32Array, uint8: Uint8Array, int32: Int32Array, float64: Float64Array };

/** DataViews at an odd offset inside a larger buffer, like a real comm message may deliver. */
function toDataViews(arrays) {
  return arrays.map(({ dtype, values }) => {
    const typed = new CODECS[dtype](values);
    const pad = 3;
    const raw = new Uint8Array(typed.byteLength + pad + 5);
    raw.set(new Uint8Array(typed.buffer), pad);
    return new DataView(raw.buffer, pad, typed.byteLength);
  });
}

let widget = null;
let current = null;

window.harness = {
  FakeModel,
  liveListeners: () => live.length,
  async load() {
    widget = (await import("/surgeon_widgets/static/explorer.js")).default;
    return true;
  },
  mount(state) {
    const el = document.createElement("div");
    document.getElementById("host").append(el);
    const model = new FakeModel(state);
    const cleanup = widget.render({ model, el });
    current = { model, el, cleanup };
    window.model = model;
    return true;
  },
  unmount() {
    current.cleanup();
    const empty = current.el.childElementCount === 0;
    current.el.remove();
    return empty;
  },
  model: () => current.model,
  /** Python -> JS custom message with binary buffers ({dtype, values} each). */
  inject(content, arrays) {
    current.model.emit("msg:custom", content, toDataViews(arrays));
  },
  /** `blocks` top-level modules with `per` children each: blocks * (per + 1) rows. */
  bigRows(blocks, per) {
    const rows = [];
    for (let i = 0; i < blocks; i++) {
      rows.push({ name: `block${i}`, parent: null, depth: 0, cls: "Sequential", kind: "module", params: 0, children: per });
      for (let j = 0; j < per; j++) {
        rows.push({ name: `block${i}.layer${j}`, parent: `block${i}`, depth: 1, cls: j % 2 ? "ReLU" : "Linear", kind: "module", params: 10, children: 0 });
      }
    }
    return rows;
  },
};
window.harnessReady = window.harness.load();
