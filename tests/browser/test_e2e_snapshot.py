"""A notebook executed by nbclient, saved, then opened in JupyterLab 4 whose fresh kernel holds
no Explorer: the panels are painted from the saved ``snapshot`` and say so, with nothing that
waits for the kernel."""

from __future__ import annotations

import os

from support.executed import executed
from support.notebook_page import HISTOGRAM_PAINTED, notebook_page

from surgeon_widgets.widget.still_display import MARKER

NOTE = ".sw-explorer.sw-snapshot .sw-snapshot-note"
# the ::before display of every view ipywidgets marks as disconnected that holds a snapshot
GLYPHS = """() => [...document.querySelectorAll('.jupyter-widgets-disconnected')]
    .filter((e) => e.querySelector('.sw-snapshot'))
    .map((e) => getComputedStyle(e, '::before').display)"""
PICTURE = f".jp-OutputArea-child:has(.{MARKER}) + .jp-OutputArea-child"


def test_saved_notebook_reopened_without_an_explorer_paints_the_snapshot(browser, jupyterlab):
    saved = executed(trust=True)  # two Explorers: layer2 at step 4, layer1 at step 2
    with notebook_page(browser, jupyterlab, "lab", "snapshot_e2e.ipynb", saved) as (page, errors):
        note = page.locator(NOTE)
        note.first.wait_for(timeout=60_000)  # the saved state renders once the kernel is connected
        page.wait_for_function(f"() => document.querySelectorAll('{NOTE}').length === 2")
        assert note.all_inner_texts() == [
            "snapshot at step 4 · train, no kernel",
            "snapshot at step 2 · train, no kernel",
        ]
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "layer2"], timeout=10_000)
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[1, "layer1"], timeout=10_000)
        first = page.locator(".sw-explorer").first
        panel = first.locator('[data-layer="layer2"]')
        assert "shape [64, 2] float32" in panel.locator(".sw-stats").first.inner_text()
        assert "step 4 · train" in panel.locator(".sw-leaf-title").first.inner_text()
        # the heat strip and curves have the history: five steps, not only the latest
        steps = [first.locator(f".sw-step-{end}").first.inner_text() for end in ("first", "last")]
        assert [s.removeprefix("step ") for s in steps] == ["0", "4"], steps
        right = first.locator(".sw-right")
        assert "Waiting for a forward pass" not in right.inner_text()
        assert "Active hooks" not in right.inner_text()
        for control in (".sw-gradients", ".sw-rate", ".sw-remove-hooks", "input.sw-params"):
            assert first.locator(control).first.is_disabled(), control
        assert first.locator(".sw-search").is_enabled()
        # the saved state draws the panels: the static picture beside them is hidden
        assert page.locator(PICTURE).count() == 2 and not page.locator(PICTURE).first.is_visible()
        assert not page.locator(PICTURE).nth(1).is_visible()
        # ipywidgets' "disconnected" glyph at the top left is not drawn over the snapshot
        glyphs = page.evaluate(GLYPHS)
        assert glyphs and set(glyphs) == {"none"}, glyphs
        if os.environ.get("SW_SHOTS"):
            page.screenshot(path=f"{os.environ['SW_SHOTS']}/snapshot-reopened.png")
        assert errors == [], errors
