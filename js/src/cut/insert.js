// Copy the code, or insert it as a new notebook cell, with the best path the host offers.

export const NO_INSERT = "insertion is not available here (VS Code / Voila): use Copy";
export const NO_INSERT_MARIMO = "marimo cannot add cells from a widget: press Copy, then paste into a new cell";

/**
 * Whether `el` is rendered by marimo (its anywidgets live in a `<marimo-anywidget>` shadow root).
 * @param {Element} el
 */
export function inMarimo(el) {
  const root = el.getRootNode();
  return root instanceof ShadowRoot && root.host.tagName.startsWith("MARIMO-");
}

/**
 * The JupyterLab / Notebook 7 application, when the page exposes it (`window.jupyterapp`: both
 * set it with `--LabApp.expose_app_in_browser` / `--NotebookApp.expose_app_in_browser`).
 * @returns {any}
 */
function jupyterApp() {
  const app = /** @type {any} */ (globalThis).jupyterapp;
  return app?.commands?.hasCommand?.("notebook:insert-cell-below") ? app : null;
}

/**
 * Insert `code` in a new cell below the active one through the app's commands.
 * @param {string} code
 * @returns {Promise<boolean>} false when no app is reachable from the page
 */
export async function insertInPage(code) {
  const app = jupyterApp();
  if (!app) return false;
  await app.commands.execute("notebook:insert-cell-below");
  const cell = app.shell?.currentWidget?.content?.activeCell;
  if (cell?.model?.sharedModel) cell.model.sharedModel.setSource(code);
  else await app.commands.execute("notebook:replace-selection", { text: code });
  return true;
}

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Wait until `test()` is true (polling), at most `ms`.
 * @param {() => boolean} test
 * @param {number} ms
 */
async function until(test, ms) {
  for (let waited = 0; !test(); waited += 25) {
    if (waited >= ms) return false;
    await sleep(25);
  }
  return true;
}

/**
 * @param {EventTarget} target
 * @param {string} key
 * @param {string} code
 * @param {number} keyCode
 */
function press(target, key, code, keyCode) {
  // keyCode is legacy but still what Lumino's keyboard layout reads besides `code`
  const init = /** @type {KeyboardEventInit} */ ({ key, code, keyCode, which: keyCode, bubbles: true, cancelable: true });
  target.dispatchEvent(new KeyboardEvent("keydown", init));
}

/**
 * Insert `code` below the notebook cell holding `el` through the notebook's own DOM: make the
 * cell active in command mode (a click on its prompt), press `b` (insert below), `Enter` (edit
 * mode), then paste into the new cell's CodeMirror editor. JupyterLab 4 and Notebook 7 share
 * this DOM and these default shortcuts; elsewhere (VS Code, Voila) there is no `.jp-Notebook`.
 * @param {HTMLElement} el
 * @param {string} code
 * @returns {Promise<boolean>}
 */
export async function insertThroughNotebookDom(el, code) {
  const cell = /** @type {HTMLElement | null} */ (el.closest(".jp-Cell"));
  const notebook = el.closest(".jp-Notebook");
  if (!cell || !notebook) return false;  // Voila's read-only notebooks never reach command mode below
  const prompt = cell.querySelector(".jp-InputPrompt") ?? cell;
  for (const type of ["mousedown", "mouseup", "click"]) {
    prompt.dispatchEvent(new MouseEvent(type, { bubbles: true, cancelable: true, button: 0 }));
  }
  const ready = () => notebook.classList.contains("jp-mod-commandMode") && cell.classList.contains("jp-mod-active");
  if (!(await until(ready, 500))) return false;
  // Shortcuts are off inside the widget (data-lm-suppress-shortcuts): press them on the cell.
  if (!cell.contains(document.activeElement) || document.activeElement?.closest("[data-lm-suppress-shortcuts]")) {
    cell.focus();
  }
  const focused = document.activeElement;
  if (!focused || !notebook.contains(focused) || focused.closest("[data-lm-suppress-shortcuts]")) return false;
  const below = cell.nextElementSibling;
  press(focused, "b", "KeyB", 66);
  const added = () => cell.nextElementSibling !== below && Boolean(cell.nextElementSibling?.classList.contains("jp-Cell"));
  if (!(await until(added, 1500))) return false;
  const fresh = /** @type {HTMLElement} */ (cell.nextElementSibling);
  press(document.activeElement ?? fresh, "Enter", "Enter", 13);
  const editor = () => /** @type {HTMLElement | null} */ (fresh.querySelector(".cm-content"));
  if (!(await until(() => Boolean(editor()?.contains(document.activeElement)), 1500))) return false;
  const content = /** @type {HTMLElement} */ (editor());
  const data = new DataTransfer();
  data.setData("text/plain", code);
  content.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
  const first = code.split("\n", 1)[0];
  if (!(await until(() => (content.textContent ?? "").includes(first), 500))) {
    document.execCommand("insertText", false, code);  // CodeMirror reads the DOM change back
  }
  return (content.textContent ?? "").includes(first);
}

/**
 * Copy `text`: the Clipboard API, else a hidden textarea and `execCommand("copy")`.
 * @param {string} text
 * @param {HTMLElement} host where the temporary textarea goes
 * @returns {Promise<boolean>}
 */
export async function copyText(text, host) {
  try {
    if (globalThis.isSecureContext && navigator.clipboard?.writeText) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // denied (no permission, not focused): try the old way
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  host.append(area);
  area.select();
  let ok;
  try {
    ok = document.execCommand("copy");  // deprecated, but the only way without the Clipboard API
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}
