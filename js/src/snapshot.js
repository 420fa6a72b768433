// A notebook reopened with no kernel for this Explorer (PROTOCOL.md "Snapshot"): the panels
// are drawn from the `snapshot` trait saved in the widget state, marked "snapshot at step N,
// no kernel", with no "Waiting for a forward pass", no active-hooks count and every control
// that needs a kernel disabled.
//
// The signal: a live Explorer answers the view's `hello` at once (a `snapshot` message, even
// an empty one; Python answers it on any thread). JupyterLab 4.6 renders saved widget state
// once a kernel is connected, so a model restored from the notebook usually has a kernel but
// no Explorer behind it: nothing answers. No message within `HELLO_TIMEOUT_MS` and a saved
// snapshot = snapshot mode; any message later (a busy kernel answering late) leaves it.

import { h } from "./dom.js";

/** @typedef {import("./types.js").Model} Model */
/** @typedef {import("./types.js").Snapshot} Snapshot */
/** @typedef {import("./dom.js").Disposer} Disposer */

export const HELLO_TIMEOUT_MS = 2500;

/** Controls that work without a kernel: the search box, the log-count switch, `.sw-local` ones. */
const LOCAL_CONTROLS = ".sw-search, .sw-logcount, .sw-local";

/**
 * @param {string} text base64
 * @returns {DataView}
 */
export function fromBase64(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return new DataView(bytes.buffer);
}

/**
 * The snapshot as the `snapshot` and `attention` messages the live views read, and their buffers.
 * @param {Snapshot} snap
 */
export function snapshotMessages(snap) {
  return {
    stats: { type: "snapshot", items: snap.stats?.items ?? [], history: snap.stats?.history ?? {} },
    attention: { type: "attention", items: snap.attention?.items ?? [] },
    buffers: (snap.buffers ?? []).map(fromBase64),
  };
}

/**
 * "snapshot at step 12 · train, no kernel" (and how many keys did not fit).
 * @param {Snapshot} snap
 */
export function snapshotLabel(snap) {
  const mode = snap.training === true ? " · train" : snap.training === false ? " · eval" : "";
  const left = snap.left_out ? ` (${snap.left_out} left out: over the size bound)` : "";
  return `snapshot at step ${snap.step}${mode}, no kernel${left}`;
}

/**
 * Disable every input, button and select under `root` but the local ones, also those added
 * later (a panel made after a selection); returns the undo. The front end's generic
 * read-only switch.
 * @param {HTMLElement} root
 * @returns {() => void}
 */
export function disableKernelControls(root) {
  /** @type {Set<HTMLInputElement>} */
  const changed = new Set();
  const disable = () => {
    for (const el of root.querySelectorAll("input, button, select")) {
      const control = /** @type {HTMLInputElement} */ (el);
      if (control.matches(LOCAL_CONTROLS) || control.disabled) continue;
      control.disabled = true;
      changed.add(control);
    }
  };
  disable();
  const observer = typeof MutationObserver === "undefined" ? null : new MutationObserver(disable);
  observer?.observe(root, { childList: true, subtree: true });
  return () => {
    observer?.disconnect();
    for (const el of changed) el.disabled = false;
  };
}

/**
 * Enter snapshot mode when nothing answers `hello` and the widget state holds a snapshot.
 * @param {Model} model
 * @param {Disposer} d
 * @param {{
 *   root: HTMLElement, right: HTMLElement,
 *   paint: (msgs: ReturnType<typeof snapshotMessages>) => void,
 *   timeoutMs?: number
 * }} parts `paint` feeds the messages to the views' stores and draws them
 */
export function keepSnapshot(model, d, { root, right, paint, timeoutMs = HELLO_TIMEOUT_MS }) {
  let answered = false;
  /** @type {(() => void) | null} */
  let undo = null;
  const note = h("p", { class: "sw-snapshot-note", role: "status" });
  const leave = () => {
    if (!undo) return;
    undo();
    undo = null;
    note.remove();
    root.classList.remove("sw-snapshot");
    root.removeAttribute("data-snapshot-step");
  };
  const enter = () => {
    /** @type {Snapshot | undefined} */
    const snap = model.get("snapshot");
    if (answered || undo || snap?.step == null) return;
    paint(snapshotMessages(snap));
    note.textContent = snapshotLabel(snap);
    right.prepend(note);
    root.classList.add("sw-snapshot");
    root.setAttribute("data-snapshot-step", String(snap.step));
    undo = disableKernelControls(root);
  };
  d.onModel(model, "msg:custom", () => { answered = true; leave(); });
  const timer = setTimeout(enter, timeoutMs);
  d.add(() => { clearTimeout(timer); leave(); });
}
