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
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "surgeon_widgets" / "notebooks" / "demo.ipynb"
# this checkout's package, and the helpers it shares with the tests (plain Python, no pytest)
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.browser import CHROMIUM, launch, page_errors  # noqa: E402
from support.jupyter import jupyter_server  # noqa: E402
from support.notebook_page import HISTOGRAM_PAINTED, RUN_CELL, open_notebook  # noqa: E402

# index of the first code cell whose source contains the text
FIND_CELL = """(text) => window.jupyterapp.shell.currentWidget.content.widgets.findIndex(
    (cell) => cell.model.type === 'code' && cell.model.sharedModel.getSource().includes(text))"""

# true once every cell ran (no cell waiting or running: no '*' prompt)
ALL_DONE = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.widgets;
    return cells.every((cell) => cell.model.type !== 'code'
        || (cell.model.executionCount !== null && !cell.node.querySelector('.jp-mod-pending')));
}"""


def write_settings(home: Path, dark: bool) -> None:
    """JupyterLab's light or dark theme, without the "news" and update prompts."""
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    theme = "JupyterLab Dark" if dark else "JupyterLab Light"
    (settings / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))


def shoot(base: str, out: Path, layer: str, timeout_s: float) -> None:
    from playwright.sync_api import sync_playwright

    ms = int(timeout_s * 1000)
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 3200}, device_scale_factor=2)
            errors = page_errors(page)
            open_notebook(page, base, "lab", "demo.ipynb", timeout_ms=ms)
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
                page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, name], timeout=ms)

            # select one more layer in the tree (Ctrl+click adds), then train again
            row = page.locator(f'.sw-explorer [role="treeitem"][data-name="{layer}"]')
            row.scroll_into_view_if_needed(timeout=ms)
            row.click(modifiers=["Control"])
            page.locator(f'.sw-explorer [data-layer="{layer}"]').wait_for(timeout=ms)
            index = page.evaluate(FIND_CELL, "optimizer.step()")
            if index < 0:
                raise RuntimeError("no training cell (with 'optimizer.step()') in the demo")
            page.evaluate(RUN_CELL, index)
            page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, layer], timeout=ms)
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
    if not CHROMIUM.exists():
        print(f"needs {CHROMIUM} (Debian's chromium package)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="surgeon-screenshot-"))
    try:
        root, home = tmp / "root", tmp / "home"
        root.mkdir()
        shutil.copyfile(DEMO, root / "demo.ipynb")
        write_settings(home, args.dark)
        with jupyter_server("lab", root, home, timeout=120) as base:
            shoot(base, args.out.resolve(), args.layer, args.timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
