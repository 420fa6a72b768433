"""End to end (JupyterLab 4, real kernel, headless Chromium): an Explorer shown after it recorded.

An Explorer opens its widget comm only when first shown. This one selects ``layer2`` with
gradients, trains three steps before it has any view, and is shown in the next cell: the view
gets the state with the comm and the recorded steps with its ``hello`` (no forward runs after),
and a click in it still attaches a hook.
"""

from __future__ import annotations

import inspect

from support.models import SomeModel
from support.notebook_page import HISTOGRAM_PAINTED, HOOKS_LISTED, RUN_CELL, notebook_page

TRAIN_UNSHOWN = f"""\
import torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer

{inspect.getsource(SomeModel)}
torch.manual_seed(0)
model = SomeModel()
explorer = Explorer(model, selected=["layer2"], gradients=True, max_rate=0)
for _ in range(3):
    model(torch.randn(64, 5)).sum().backward()
print("trained, comm open:", explorer.comm is not None)"""

TITLES = """(layer) => [...document.querySelectorAll(
    `.sw-explorer [data-layer="${layer}"] .sw-leaf-title`)].map((e) => e.textContent)"""


def test_an_explorer_shown_after_training_shows_what_it_recorded(browser, jupyterlab):
    hooks_cell = "print('hooks', sorted({h['name'] for h in explorer.hooks}))"
    cells = [TRAIN_UNSHOWN, "explorer", hooks_cell]
    with notebook_page(browser, jupyterlab, "lab", "shown_later.ipynb", cells) as (page, errors):
        page.evaluate(RUN_CELL, 0)
        output = page.locator(".jp-OutputArea-output", has_text="trained, comm open:")
        output.wait_for(timeout=90_000)  # kernel start + torch import
        assert "comm open: False" in output.inner_text()
        page.evaluate(RUN_CELL, 1)
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "layer2"], timeout=30_000)
        page.wait_for_function(f"() => ({TITLES})('layer2').length >= 2", timeout=10_000)
        titles = page.evaluate(TITLES, "layer2")
        assert all("step 2" in t for t in titles), titles  # the last step before it was shown
        assert any("activation" in t for t in titles) and any("gradient" in t for t in titles)

        page.locator('.sw-explorer [role="treeitem"][data-name="layer1"]').click(
            modifiers=["Control"]
        )  # adds layer1 to the selection: the comm routes clicks as for any shown Explorer
        page.wait_for_function(HOOKS_LISTED, arg="layer1", timeout=20_000)
        page.evaluate(RUN_CELL, 2)
        hooks = page.locator(".jp-OutputArea-output", has_text="hooks [")
        hooks.wait_for(timeout=30_000)
        assert "['layer1', 'layer2']" in hooks.inner_text()
        assert errors == [], errors
