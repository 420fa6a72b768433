// Harness of the attention heatmap view: js/src/heatmap/ as ES modules (no bundle needed),
// a fake anywidget model, and helpers to inject `attention` messages. Lives on window.attention.
import { AttentionPanels } from "/js/src/heatmap/panel.js";
import { AttentionStore } from "/js/src/heatmap/store.js";
import { COLORMAP } from "/js/src/colormap.js";

class FakeModel {
  constructor(state) { this.state = { selected: [], ...state }; this.sent = []; }
  get(key) { return this.state[key]; }
  set(key, value) { this.state[key] = value; }
  on() {}
  off() {}
  save_changes() {}
  send(content) { this.sent.push(content); }
}

/** DataViews at an odd offset inside a larger buffer, as a real comm message may deliver. */
function toDataView(typed) {
  const pad = 3;
  const raw = new Uint8Array(typed.byteLength + pad + 5);
  raw.set(new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength), pad);
  return new DataView(raw.buffer, pad, typed.byteLength);
}

let view = null;
let model = null;
let store = null;

window.attention = {
  COLORMAP: Array.from(COLORMAP),
  mount(selected) {
    model = new FakeModel({ selected });
    store = new AttentionStore();
    view = new AttentionPanels(model, store);
    document.getElementById("host").append(view.el);
    return true;
  },
  unmount() { view.dispose(); return document.getElementById("host").childElementCount; },
  sent: () => model.sent,
  /** items with `values` (uint8 arrays) and optional `exactValues` (float32) become buffers. */
  inject(items) {
    const buffers = [];
    const wire = items.map(({ values, exactValues, ...rest }) => {
      const out = { ...rest, buffer: buffers.length };
      buffers.push(toDataView(new Uint8Array(values)));
      if (exactValues) {
        out.exact = { buffer: buffers.length, dtype: "float32", shape: rest.full_shape ?? rest.shape };
        buffers.push(toDataView(new Float32Array(exactValues)));
      }
      return out;
    });
    view.drawLayers(store.apply({ type: "attention", items: wire }, buffers));
    return true;
  },
};
