"""A notebook executed by nbclient, saved, then opened in JupyterLab 4 whose fresh kernel holds
no Explorer: the panels are painted from the saved ``snapshot`` and say so, with nothing that
waits for the kernel."""

from __future__ import annotations

from support.executed import executed, explorer_notebook
from support.notebook_page import HISTOGRAM_PAINTED, notebook_page

NOTE = ".sw-explorer.sw-snapshot .sw-snapshot-note"


def test_saved_notebook_reopened_without_an_explorer_paints_the_snapshot(browser, jupyterlab):
    saved = executed(explorer_notebook(["layer2"], forwards=5), trust=True)
    with notebook_page(browser, jupyterlab, "lab", "snapshot_e2e.ipynb", saved) as (page, errors):
        note = page.locator(NOTE)
        note.wait_for(timeout=60_000)  # the saved state renders once the kernel is connected
        assert note.inner_text() == "snapshot at step 4 · train, no kernel"
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "layer2"], timeout=10_000)
        panel = page.locator('.sw-explorer [data-layer="layer2"]')
        assert "shape [64, 2] float32" in panel.locator(".sw-stats").first.inner_text()
        assert panel.locator(".sw-leaf-title").first.inner_text().endswith("step 4 · train")
        # the curves have the history: five steps, not only the latest
        assert page.locator(".sw-explorer .sw-step-last").first.inner_text() == "step 4"
        right = page.locator(".sw-explorer .sw-right")
        assert "Waiting for a forward pass" not in right.inner_text()
        assert "Active hooks" not in right.inner_text()
        for control in (".sw-gradients", ".sw-rate", ".sw-remove-hooks", "input.sw-params"):
            assert page.locator(f".sw-explorer {control}").first.is_disabled(), control
        assert page.locator(".sw-explorer .sw-search").is_enabled()
        assert errors == [], errors
