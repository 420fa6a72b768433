"""End to end: a real JupyterLab 4 or Notebook 7 server, a real kernel, headless Chromium.

Runs SEEDS.md's `SomeModel` in a notebook, displays the Explorer, selects `layer2` in the tree,
runs a forward pass, and checks that layer2's histogram is drawn and its stats are shown.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from conftest import notebook_url

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


def put_notebook(base: str, name: str, cells: list[str]) -> None:
    """Write a notebook through the server's contents API."""
    body = json.dumps({"type": "notebook", "content": notebook(cells)}).encode()
    request = urllib.request.Request(f"{base}/api/contents/{name}", body, method="PUT")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status in (200, 201)


def known_app_error(app: str, error) -> bool:
    """Notebook 7.6's own page error, thrown on opening any notebook (no widget involved)."""
    stack = (error.stack or "").splitlines()
    return (
        app == "notebook"
        and str(error) == "Cannot read properties of undefined (reading 'schema')"
        and len(stack) > 1
        and "/static/notebook/notebook_core." in stack[1]
    )


class ShortcutLeak(AssertionError):
    """Keys pressed on the focused tree reached the notebook's command-mode shortcuts."""


@pytest.fixture(
    params=[
        pytest.param("lab", id="jupyterlab4"),
        pytest.param("notebook", id="notebook7"),
    ]
)
def jupyter_app(request) -> tuple[str, str]:
    """(app, base URL) of a session-wide JupyterLab 4 or Notebook 7 server."""
    server = request.getfixturevalue("jupyterlab" if request.param == "lab" else "notebook7")
    return request.param, server


KERNEL_OF = """(name) => {
    const w = window.jupyterapp?.shell.currentWidget;
    return w?.context?.path === name && !!w.sessionContext?.session?.kernel;
}"""


def open_notebook(page, base: str, app: str, name: str) -> None:
    """Open notebook `name` and wait until it is the current widget and has a kernel.

    The servers live for the whole session: JupyterLab's workspace would restore the notebooks
    of earlier tests (``?reset`` drops it), and the path check makes sure cells run in `name`.
    """
    url = notebook_url(base, app, name) + ("?reset" if app == "lab" else "")
    page.goto(url, timeout=60_000)
    page.wait_for_function(KERNEL_OF, arg=name, timeout=60_000)
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.ready")


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


def test_select_layer2_then_forward_draws_its_histogram(browser, jupyter_app):
    app, base = jupyter_app
    put_notebook(base, "explorer_e2e.ipynb", [DEFINE, FORWARD, "explorer"])
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: None if known_app_error(app, e) else errors.append(str(e)))
    page.set_default_timeout(60_000)  # CI machines can be busy; every wait below has its own bound
    try:
        open_notebook(page, base, app, "explorer_e2e.ipynb")

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

        # a second view of the same widget asks for the history ("hello") and draws it
        page.evaluate(RUN_CELL, 2)
        page.wait_for_function(CANVAS_PAINTED, arg=1, timeout=20_000)
        second = (
            page.locator(".sw-explorer").nth(1).locator('[data-layer="layer2"] .sw-stats').first
        )
        assert second.inner_text() == stats.inner_text()
        assert errors == [], errors

        # Notebook 7 matches shortcuts in the capture phase: only the focused element's
        # data-lm-suppress-shortcuts keeps a/b/d d away from the notebook
        row.first.click()  # focus in the first view's tree, not in a text box
        page.keyboard.press("a")
        page.keyboard.press("b")
        page.keyboard.press("d")
        page.keyboard.press("d")
        if page.evaluate(CELL_COUNT) != cells:
            raise ShortcutLeak(f"{page.evaluate(CELL_COUNT)} cells, expected {cells}")
    except ShortcutLeak:
        raise
    except Exception as e:
        # say where it stopped: the cells' outputs show kernel errors (e.g. an import failure)
        raise AssertionError(f"{e}\n--- notebook outputs ---\n{page.evaluate(OUTPUTS)}") from e
    finally:
        context.close()
