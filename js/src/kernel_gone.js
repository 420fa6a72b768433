// When the kernel behind a live view stops (Kernel > Shut Down, Restart, a crash), say so once.
//
// The kernel connection the widget manager holds (`widget_manager.kernel`, JupyterLab's
// IKernelConnection) says it: measured in JupyterLab 4.6 (tests/browser/test_e2e_kernel_stopped.py,
// the root's `data-kernel-signal`), Kernel > Restart turns its status "restarting" (0.1 s after
// the dialog), Kernel > Shut Down disposes it (~3 s, when the server's shutdown returns). On
// Shut Down ipywidgets' models keep `comm_live` (the manager only unregisters its comm target);
// on Restart the manager sets it false (the model's `comm_live_update`), kept here as a second
// signal for managers without a kernel connection. The first signal calls `onStop` (once);
// nothing is polled and nothing is sent.

/** @typedef {import("./types.js").Model} Model */
/** @typedef {import("./dom.js").Disposer} Disposer */

/** Kernel statuses after which this view's kernel-side widget is gone. */
const GONE = new Set(["dead", "restarting", "autorestarting"]);

/**
 * @typedef {{ connect: (fn: (...args: any[]) => void) => boolean, disconnect: (fn: (...args: any[]) => void) => boolean }} Signal
 * @typedef {{ status?: string, isDisposed?: boolean, statusChanged?: Signal, disposed?: Signal }} Kernel
 */

/**
 * Call `onStop(signal)` once the kernel of `model`'s widget manager stops (`signal`: which
 * one said so: "comm_live", "status:<status>", "disposed"); the listeners go through `d`.
 * @param {Model} model
 * @param {Disposer} d
 * @param {(signal: string) => void} onStop
 */
export function watchKernel(model, d, onStop) {
  let stopped = false;
  const stop = (/** @type {string} */ signal) => {
    if (stopped) return;
    stopped = true;
    onStop(signal);
  };
  // ipywidgets' model event: the manager disconnected its models (a restart)
  d.onModel(model, "comm_live_update", () => stop("comm_live"));
  /** @type {Kernel | null | undefined} */
  let kernel = null;
  try {
    kernel = /** @type {any} */ (model).widget_manager?.kernel;
  } catch {
    kernel = null;  // a manager without a kernel (an HTML export, a static page)
  }
  if (!kernel) return;
  if (kernel.isDisposed || GONE.has(String(kernel.status))) {
    stop(kernel.isDisposed ? "disposed" : `status:${kernel.status}`);
    return;
  }
  const onStatus = (/** @type {unknown} */ _sender, /** @type {string} */ status) => {
    if (GONE.has(status)) stop(`status:${status}`);
  };
  const onDisposed = () => stop("disposed");
  kernel.statusChanged?.connect(onStatus);
  kernel.disposed?.connect(onDisposed);
  d.add(() => {
    kernel?.statusChanged?.disconnect(onStatus);
    kernel?.disposed?.disconnect(onDisposed);
  });
}
