"""Take ``docs/explorer.png``: the Explorer in JupyterLab, running the shipped demo notebook.

Starts JupyterLab on a free 127.0.0.1 port in a temp folder holding a copy of the demo
notebook, opens it in headless Chromium (Debian's ``/usr/bin/chromium`` through Python
Playwright), runs every cell, waits for the Explorer to render, Ctrl+clicks one more layer in
its tree, runs the training cell again so that layer's histograms fill, and saves a screenshot
of the widget. Nothing is downloaded. Usage::

    .venv/bin/python scripts/screenshot.py [--out docs/explorer.png] [--layer layers.1.mlp] [--dark]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "surgeon_widgets" / "notebooks" / "demo.ipynb"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

RUN_CELL = """async (i) => {
    const panel = window.jupyterapp.shell.currentWidget;
    panel.content.activeCellIndex = i;
    await window.jupyterapp.commands.execute('notebook:run-cell');
}"""

# index of the first code cell whose source contains the text
FIND_CELL = """(text) => window.jupyterapp.shell.currentWidget.content.widgets.findIndex(
    (cell) => cell.model.type === 'code' && cell.model.sharedModel.getSource().includes(text))"""

# true once every cell ran (no cell waiting or running: no '*' prompt)
ALL_DONE = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.widgets;
    return cells.every((cell) => cell.model.type !== 'code'
        || (cell.model.executionCount !== null && !cell.node.querySelector('.jp-mod-pending')));
}"""

CANVAS_PAINTED = """(layer) => {
    const c = document.querySelector(
        `.sw-explorer [data-layer="${layer}"] canvas[aria-label^="Histogram of ${layer}"]`);
    if (!c || !c.width) return false;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) return true;
    return false;
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, home: Path, dark: bool = False) -> tuple[subprocess.Popen, str]:
    """JupyterLab on 127.0.0.1 (no token, isolated settings) serving ``root``; its base URL."""
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    # a light theme without the "news" and update prompts
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    theme = "JupyterLab Dark" if dark else "JupyterLab Light"
    (settings / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))
    port = free_port()
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
        f"--port={port}", "--ServerApp.token=", "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.expose_app_in_browser=True", f"--ServerApp.root_dir={root}",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = (home / "server.log").open("w")
    proc = subprocess.Popen(
        command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited:\n{(home / 'server.log').read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/status", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"jupyter lab did not start:\n{(home / 'server.log').read_text()}")
        time.sleep(0.3)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's own process group (it shuts its kernels down), then SIGKILL."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def shoot(base: str, out: Path, layer: str, timeout_s: float) -> None:
    from playwright.sync_api import sync_playwright

    ms = int(timeout_s * 1000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 3200}, device_scale_factor=2)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base}/lab/tree/demo.ipynb?reset", timeout=ms)
            page.wait_for_function(
                "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel",
                timeout=ms,
            )
            page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.ready")
            # single-document mode, no side bars: the notebook gets the whole window
            page.evaluate("() => window.jupyterapp.commands.execute('application:set-mode', "
                          "{mode: 'single-document'})")  # fmt: skip
            for command in ("application:toggle-left-area", "application:toggle-right-area"):
                page.evaluate(
                    """async (c) => {
                        const app = window.jupyterapp;
                        const area = c.includes('left') ? 'left' : 'right';
                        if (!app.shell.isEmpty?.(area) && !app.shell[area + 'Collapsed'])
                            await app.commands.execute(c);
                    }""",
                    command,
                )
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(ALL_DONE, timeout=ms, polling=500)
            if errors:
                print("page errors:", *errors, sep="\n  ", file=sys.stderr)

            widget = page.locator(".sw-explorer").first
            widget.wait_for(timeout=ms)
            first = page.evaluate(
                "() => [...new Set([...document.querySelectorAll("
                "'.sw-explorer section[data-layer]')].map(e => e.dataset.layer))]"
            )
            print("panels after run-all:", first)
            for name in first:
                page.wait_for_function(CANVAS_PAINTED, arg=name, timeout=ms)

            # select one more layer in the tree (Ctrl+click adds), then train again
            row = page.locator(f'.sw-explorer [role="treeitem"][data-name="{layer}"]')
            row.scroll_into_view_if_needed(timeout=ms)
            row.click(modifiers=["Control"])
            page.locator(f'.sw-explorer [data-layer="{layer}"]').wait_for(timeout=ms)
            index = page.evaluate(FIND_CELL, "optimizer.step()")
            if index < 0:
                raise RuntimeError("no training cell (with 'optimizer.step()') in the demo")
            page.evaluate(RUN_CELL, index)
            page.wait_for_function(CANVAS_PAINTED, arg=layer, timeout=ms)
            page.wait_for_timeout(1000)  # let the last update draw

            # show every selected layer's panel in full (the widget scrolls them otherwise)
            widget.evaluate("(el) => el.style.setProperty('--sw-panels-height', '2400px')")
            page.wait_for_timeout(300)
            out.parent.mkdir(parents=True, exist_ok=True)
            widget.scroll_into_view_if_needed()
            widget.screenshot(path=str(out))
            print(f"saved {out}")
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "explorer.png")
    parser.add_argument("--layer", default="layers.1.mlp", help="layer to click in the tree")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per wait")
    parser.add_argument("--dark", action="store_true", help="JupyterLab's dark theme")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"needs {CHROMIUM} (Debian's chromium package)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="surgeon-screenshot-"))
    try:
        root, home = tmp / "root", tmp / "home"
        root.mkdir()
        shutil.copyfile(DEMO, root / "demo.ipynb")
        proc, base = start_lab(root, home, args.dark)
        try:
            shoot(base, args.out.resolve(), args.layer, args.timeout)
        finally:
            stop(proc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
