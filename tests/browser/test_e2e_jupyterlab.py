"""End to end: a real JupyterLab 4 or Notebook 7 server, a real kernel, headless Chromium.

Runs SEEDS.md's `SomeModel` (the source of `toy_models.SomeModel`) in a notebook, displays the
Explorer, selects `layer2` in the tree, runs a forward pass, and checks that layer2's histogram
is drawn and its stats are shown.
"""

from __future__ import annotations

import inspect

from support.models import SomeModel
from support.notebook_page import HISTOGRAM_PAINTED, HOOKS_LISTED, RUN_CELL, notebook_page

DEFINE = f"""\
import torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer

{inspect.getsource(SomeModel)}
torch.manual_seed(0)
model = SomeModel()
explorer = Explorer(model)
explorer"""

FORWARD = """\
y = model(torch.randn(64, 5))
print("forward done", tuple(y.shape), explorer.selected)"""


class ShortcutLeak(AssertionError):
    """Keys pressed on the focused tree reached the notebook's command-mode shortcuts."""


CELL_COUNT = "() => window.jupyterapp.shell.currentWidget.content.widgets.length"


def test_select_layer2_then_forward_draws_its_histogram(browser, jupyter_app):
    app, base = jupyter_app
    name = "explorer_e2e.ipynb"
    with notebook_page(browser, base, app, name, [DEFINE, FORWARD, "explorer"]) as (page, errors):
        page.evaluate(RUN_CELL, 0)
        row = page.locator('[role="treeitem"][data-name="layer2"]')
        row.wait_for(timeout=90_000)  # kernel start + torch import
        assert page.locator('.sw-explorer [role="tree"]').count() == 1
        row.click()
        assert row.get_attribute("aria-selected") == "true"
        page.locator('[data-layer="layer2"]').wait_for(timeout=10_000)
        # Python attached a hook for the selection (hooks trait -> hooks panel)
        page.wait_for_function(HOOKS_LISTED, arg="layer2", timeout=20_000)

        page.evaluate(RUN_CELL, 1)
        page.locator(".jp-OutputArea-output", has_text="forward done").wait_for(timeout=30_000)
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "layer2"], timeout=20_000)
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
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[1, "layer2"], timeout=20_000)
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


BREAKS = """\
import torch
from torch import nn
from surgeon_widgets import Explorer

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Linear(16, 1))
ex = Explorer(model, selected=["3", "2", "0"], max_rate=0)
ex"""

BREAK = """\
for step in range(4):
    if step == 2:
        with torch.no_grad():
            model[2].weight.fill_(float("nan"))
    model(torch.randn(4, 8))
print("broken", ex.nonfinite[0])"""


def test_nonfinite_values_are_named_marked_and_said(browser, jupyterlab, tmp_path):
    cells = [BREAKS, BREAK]
    with notebook_page(browser, jupyterlab, "lab", "nonfinite_e2e.ipynb", cells) as (page, errors):
        page.evaluate(RUN_CELL, 0)
        page.locator('[data-layer="2"]').wait_for(timeout=90_000)  # kernel start + torch
        page.wait_for_function(HOOKS_LISTED, arg="2", timeout=20_000)
        page.evaluate(RUN_CELL, 1)
        page.locator(".jp-OutputArea-output", has_text="broken").wait_for(timeout=30_000)
        line = page.locator(".sw-nonfinite-line")
        line.wait_for(state="visible", timeout=20_000)
        text = line.inner_text()
        assert text.startswith("Non-finite values first in 2 (output) at step 2: 64 NaN"), text
        assert page.locator('[data-name="2"] .sw-nonfinite-mark').inner_text() == "NaN"
        assert page.locator('[data-name="0"] .sw-nonfinite-mark').count() == 0
        empty = page.locator('[data-layer="2"] .sw-hist-empty')
        empty.wait_for(state="visible", timeout=10_000)
        assert empty.inner_text() == "all values NaN"
        assert not page.locator('[data-layer="0"] .sw-hist-empty').is_visible()
        page.screenshot(path=str(tmp_path / "nonfinite_lab.png"), full_page=True)
        assert errors == [], errors
