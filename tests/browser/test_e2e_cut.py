"""End to end: mark a cut by clicking in a real JupyterLab, press Insert, run the new cell.

The server (``jupyterlab`` fixture of test_e2e_jupyterlab.py) exposes ``window.jupyterapp``, so
the Insert button first takes the app's ``notebook:insert-cell-below`` command; with the app
hidden (JupyterLab's default) it goes through the notebook's DOM (prompt click, ``b``, paste).
"""

from __future__ import annotations

import inspect

from support.models import SomeModel
from support.notebook_page import RUN_CELL, notebook_page

DEFINE = f"""\
import torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer

{inspect.getsource(SomeModel)}
torch.manual_seed(0)
net = SomeModel()
explorer = Explorer(net, show_nodes=True)
explorer"""

CHECK = """\
h = torch.randn(4, 3)
out = cut_model(h)  # a single node_out: one tensor
same = torch.equal(out, net.layer3(net.layer2(h)))
print("cut ok", type(cut_model).__name__, cut_model.summary["input"], same)"""

SOURCE = "(i) => window.app.shell.currentWidget.content.widgets[i]?.model.sharedModel.getSource()"


def test_mark_cut_by_clicking_then_insert_a_cell_that_runs(browser, jupyterlab):
    opened = notebook_page(browser, jupyterlab, "lab", "cut_e2e.ipynb", [DEFINE, CHECK])
    with opened as (page, errors):
        page.evaluate("() => { window.app = window.jupyterapp; }")  # SOURCE reads through it
        page.evaluate(RUN_CELL, 0)
        mark_in = page.locator('[role="treeitem"][data-name="layer1"] .sw-mark-in')
        mark_in.wait_for(timeout=90_000)  # kernel start + torch import
        mark_in.click()
        page.locator('[role="treeitem"][data-name="layer3"] .sw-mark-out').click()
        code = page.locator(".sw-explorer .sw-code")
        page.wait_for_function(
            "() => document.querySelector('.sw-explorer .sw-code')?.textContent"
            ".includes(\"node_out='layer3'\")",
            timeout=20_000,
        )
        assert "✓ valid cut" in page.inner_text(".sw-explorer .sw-cut-summary")
        text = code.inner_text()
        assert "cut_model = Extract(net, node_in='layer1', node_out='layer3')" in text

        page.locator(".sw-explorer .sw-insert").click()
        page.wait_for_function(f"() => ({SOURCE})(1)?.includes('cut_model = Extract')")
        assert page.evaluate(SOURCE, 1) == text
        assert page.inner_text(".sw-explorer .sw-cut-status") == "Inserted a new cell below"

        page.evaluate(RUN_CELL, 1)
        page.evaluate(RUN_CELL, 2)
        out = page.locator(".jp-OutputArea-output", has_text="cut ok")
        out.wait_for(timeout=30_000)
        assert out.inner_text().strip() == "cut ok Extract ('layer1',) True"

        # JupyterLab's default: no window.jupyterapp; the button goes through the notebook's DOM
        page.evaluate("() => { delete window.jupyterapp; }")
        page.locator('[role="treeitem"][data-name="layer2"] .sw-mark-out').click()
        page.wait_for_function(
            "() => document.querySelector('.sw-explorer .sw-code')?.textContent"
            ".includes(\"'layer2'\")",
            timeout=20_000,
        )
        text = code.inner_text()
        page.locator(".sw-explorer .sw-insert").click()
        page.wait_for_function(f"() => ({SOURCE})(1)?.includes(\"'layer2'\")", timeout=10_000)
        assert page.evaluate(SOURCE, 1) == text
        assert page.inner_text(".sw-explorer .sw-cut-status") == "Inserted a new cell below"
        page.evaluate(RUN_CELL.replace("window.jupyterapp", "window.app"), 1)
        page.wait_for_function(
            "() => window.app.shell.currentWidget.content.widgets[1].model.executionCount"
        )
        assert page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea-output").count() == 0
        assert errors == [], errors
