"""End to end: a real JupyterLab server, a real kernel, the built bundle, headless Chromium.

Runs SEEDS.md's `SomeModel` in a notebook, displays the Explorer, selects `layer2` in the tree,
runs a forward pass, and checks that layer2's histogram is drawn and its stats are shown.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs /usr/bin/chromium"),
]

REPO = Path(__file__).resolve().parents[2]

DEFINE = """\
import torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer

class SomeModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(5, 3)
        self.layer2 = nn.Linear(3, 2)
        self.layer3 = nn.Linear(2, 1)
    def forward(self, x):
        x1 = self.layer1(x)
        x2 = self.layer2(x1)
        y = self.layer3(x2)
        return y

torch.manual_seed(0)
model = SomeModel()
explorer = Explorer(model)
explorer"""

FORWARD = """\
y = model(torch.randn(64, 5))
print("forward done", tuple(y.shape), explorer.selected)"""


def notebook(cells: list[str]) -> dict:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell{i}",
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 rooted in a temp dir holding the test notebook."""
    root = tmp_path_factory.mktemp("lab")
    (root / "explorer_e2e.ipynb").write_text(json.dumps(notebook([DEFINE, FORWARD, "explorer"])))
    home = tmp_path_factory.mktemp("jupyter-home")
    env = {
        **os.environ,
        # isolate from the user's Jupyter/IPython settings and workspaces
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.expose_app_in_browser=True",
        f"--ServerApp.root_dir={root}",
    ]
    log = (home / "server.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited: {(home / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"jupyter lab did not start: {(home / 'server.log').read_text()[-3000:]}"
                )
            time.sleep(0.3)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own session: server and its kernels
            proc.wait()
        log.close()


RUN_CELL = """async (i) => {
    const app = window.jupyterapp;
    const notebook = app.shell.currentWidget.content;
    notebook.activeCellIndex = i;
    notebook.deselectAll();  // run exactly cell i, whatever a click in an output selected
    await app.commands.execute('notebook:run-cell');
}"""

OUTPUTS = """() => [...document.querySelectorAll('.jp-Cell')].map((c, i) =>
    `[${i}] ${c.querySelector('.jp-OutputArea')?.innerText.slice(0, 400) ?? ''}`).join('\\n')"""

CELL_COUNT = "() => window.jupyterapp.shell.currentWidget.content.widgets.length"

CANVAS_PAINTED = """(view) => {
    const root = document.querySelectorAll('.sw-explorer')[view];
    const c = root?.querySelector(
        '[data-layer="layer2"] canvas[aria-label^="Histogram of layer2"]');
    if (!c || !c.width) return false;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) return true;
    return false;
}"""


def test_select_layer2_then_forward_draws_its_histogram(browser, jupyterlab):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(60_000)  # CI machines can be busy; every wait below has its own bound
    try:
        page.goto(f"{jupyterlab}/lab/tree/explorer_e2e.ipynb", timeout=60_000)
        page.wait_for_function(
            "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel",
            timeout=60_000,
        )
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.ready")

        page.evaluate(RUN_CELL, 0)
        row = page.locator('[role="treeitem"][data-name="layer2"]')
        row.wait_for(timeout=90_000)  # kernel start + torch import
        assert page.locator('.sw-explorer [role="tree"]').count() == 1
        row.click()
        assert row.get_attribute("aria-selected") == "true"
        page.locator('[data-layer="layer2"]').wait_for(timeout=10_000)
        # Python attached a hook for the selection (hooks trait -> hooks panel)
        page.wait_for_function(
            "() => document.querySelector('.sw-hooks')?.textContent.includes('layer2')",
            timeout=20_000,
        )

        page.evaluate(RUN_CELL, 1)
        page.locator(".jp-OutputArea-output", has_text="forward done").wait_for(timeout=30_000)
        page.wait_for_function(CANVAS_PAINTED, arg=0, timeout=20_000)
        stats = page.locator('[data-layer="layer2"] .sw-stats').first
        stats.wait_for(state="visible", timeout=10_000)
        text = stats.inner_text()
        assert text.startswith("mean "), text
        assert "shape [64, 2] float32" in text, text

        # typing in the widget must not reach notebook shortcuts ("a" = insert cell, "dd" = delete)
        cells = page.evaluate(CELL_COUNT)
        search = page.locator(".sw-explorer .sw-search")
        search.press_sequentially("dda")
        assert search.input_value() == "dda"
        assert page.evaluate(CELL_COUNT) == cells
        search.fill("")
        row.click()  # focus in the tree, not in a text box
        page.keyboard.press("a")
        page.keyboard.press("b")
        page.keyboard.press("d")
        page.keyboard.press("d")
        assert page.evaluate(CELL_COUNT) == cells

        # a second view of the same widget asks for the history ("hello") and draws it
        page.evaluate(RUN_CELL, 2)
        page.wait_for_function(CANVAS_PAINTED, arg=1, timeout=20_000)
        second = (
            page.locator(".sw-explorer").nth(1).locator('[data-layer="layer2"] .sw-stats').first
        )
        assert second.inner_text() == stats.inner_text()
        assert errors == [], errors
    except Exception as e:
        # say where it stopped: the cells' outputs show kernel errors (e.g. an import failure)
        raise AssertionError(f"{e}\n--- notebook outputs ---\n{page.evaluate(OUTPUTS)}") from e
    finally:
        context.close()
