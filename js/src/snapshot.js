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
//
// A live view whose kernel stops (`kernelStopped()`, from kernel_gone.js) enters the same mode
// for good: "kernel stopped", its controls disabled; it keeps what it drew live (newer than the
// saved snapshot) and paints the snapshot only if it drew nothing.

import { h } from "./dom.js";

/** @typedef {import("./types.js").Model} Model */
/** @typedef {import("./types.js").Snapshot} Snapshot */
/** @typedef {import("./dom.js").Disposer} Disposer */

export const HELLO_TIMEOUT_MS = 2500;

/** Controls that work without a kernel: the search box, the log-count switch, Copy, `.sw-local` ones. */
const LOCAL_CONTROLS = ".sw-search, .sw-logcount, .sw-copy, .sw-local";

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
 * "kernel stopped · snapshot at step 12": a live view whose kernel went away.
 * @param {Snapshot | undefined} snap
 */
export function stoppedLabel(snap) {
  return snap?.step != null ? `kernel stopped · snapshot at step ${snap.step}` : "kernel stopped";
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
 *   drawn?: () => boolean, timeoutMs?: number
 * }} parts `paint` feeds the messages to the views' stores and draws them; `drawn`: did
 *   the live view draw anything
 * @returns {{ kernelStopped: (signal: string) => void }}
 */
export function keepSnapshot(model, d, { root, right, paint, drawn = () => false, timeoutMs = HELLO_TIMEOUT_MS }) {
  let answered = false;
  let stopped = false;
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
  d.onModel(model, "msg:custom", () => {
    answered = true;
    if (!stopped) leave();
  });
  const timer = setTimeout(enter, timeoutMs);
  d.add(() => { clearTimeout(timer); leave(); });
  const kernelStopped = (/** @type {string} */ signal) => {
    if (stopped) return;
    stopped = true;
    clearTimeout(timer);
    /** @type {Snapshot | undefined} */
    const snap = model.get("snapshot");
    if (!undo && !drawn() && snap?.step != null) paint(snapshotMessages(snap));
    note.textContent = stoppedLabel(snap);
    note.classList.add("sw-kernel-stopped");
    right.prepend(note);
    root.classList.add("sw-snapshot");
    if (snap?.step != null) root.setAttribute("data-snapshot-step", String(snap.step));
    root.setAttribute("data-kernel", "stopped");
    root.setAttribute("data-kernel-signal", signal);  // which signal said so (kernel_gone.js)
    undo ??= disableKernelControls(root);
  };
  d.add(() => { root.removeAttribute("data-kernel"); root.removeAttribute("data-kernel-signal"); });
  return { kernelStopped };
}
