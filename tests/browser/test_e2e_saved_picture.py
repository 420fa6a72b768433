"""End to end (JupyterLab 4 / Notebook 7, real kernel, headless Chromium): a notebook that
trained, saved through the front end with its default settings (no widget state), shows the
last picture when reopened with a fresh kernel that holds no Explorer and once that kernel is
shut down; while the view is live the picture is hidden beside it (``widget/still_display.py``).

Screenshots (light and dark) of each state go to ``$SW_SHOTS`` when it is set."""

from __future__ import annotations

import inspect
import io
import json
import os
import urllib.request
from pathlib import Path

import nbformat
import numpy as np
from nbconvert import HTMLExporter
from PIL import Image
from support.executed import executed
from support.models import SomeModel
from support.notebook_page import (
    HISTOGRAM_PAINTED,
    RUN_CELL,
    notebook_page,
)

from surgeon_widgets.widget.still_display import MARKER

TRAIN_STEPS = 6
CELLS = [
    f"""import torch
from torch import nn
from surgeon_widgets import Explorer

{inspect.getsource(SomeModel)}
torch.manual_seed(0)
model = SomeModel()
explorer = Explorer(model, selected=["layer2"], max_rate=0)
explorer""",
    f"for _ in range({TRAIN_STEPS}):\n    model(torch.randn(64, 5))\nprint('trained')",
    "explorer.close()",
]
LAST = f"last step {TRAIN_STEPS - 1})"
PICTURE = f".jp-OutputArea-child:has(.{MARKER}) + .jp-OutputArea-child"
WIDGET = f".jp-OutputArea-child:has(+ .jp-OutputArea-child .{MARKER})"
BAR = (0x4C, 0x72, 0xB0)  # the histogram bars' colour (views/figures.py)

CELL0 = "window.jupyterapp.shell.currentWidget.content.model.cells.get(0)"
# cell 0's picture output as the front end holds it: its text/plain
PICTURE_TEXT = f"""() => {{
    const outputs = {CELL0}.outputs;
    return outputs.length > 2 ? outputs.get(2).data['text/plain'] : null;
}}"""
KERNEL_GONE = "() => !window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel"


def painted(page, index: int = 0) -> float:
    """Share of picture output ``index``'s image region painted in the bars' colour, as the
    page shows it (pixels of a screenshot, not the data)."""
    image = page.locator(f"{PICTURE} img").nth(index)
    image.wait_for(state="visible", timeout=30_000)
    pixels = np.asarray(Image.open(io.BytesIO(image.screenshot())).convert("RGB")).astype(int)
    return float((np.abs(pixels - BAR).sum(-1) < 40).mean())


def shoot(page, name: str) -> None:
    """Light and dark screenshots of the page into ``$SW_SHOTS`` (if set)."""
    folder = os.environ.get("SW_SHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        page.evaluate("(t) => window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: t})", theme)  # fmt: skip
        page.wait_for_function(
            "(dark) => document.body.dataset.jpThemeLight === String(!dark)",
            arg=theme.endswith("Dark"),
        )
        page.wait_for_timeout(500)
        page.screenshot(path=f"{folder}/{name}-{theme.split()[1].lower()}.png")


def contents(base: str, name: str) -> dict:
    with urllib.request.urlopen(f"{base}/api/contents/{name}?content=1", timeout=30) as r:
        return json.load(r)["content"]


def assert_picture_alone(page) -> None:
    """The picture is shown and painted; the widget's output ("model not found") is not."""
    assert page.locator(PICTURE).is_visible()
    assert not page.locator(WIDGET).is_visible()
    assert not page.get_by_text("Error displaying widget").is_visible()
    assert painted(page) > 0.03, "painted histogram bars, not text"


def html_shows_the_picture(chromium, nb: dict, text: str, shot: str) -> None:
    """``nbconvert --to html`` of ``nb`` opened offline (every request is aborted: the page's
    require.js, MathJax and widget manager from CDNs do not load) shows the picture named
    ``text`` painted, and hides the widget's output."""
    html, _ = HTMLExporter().from_notebook_node(nbformat.from_dict(nb))
    assert text in json.dumps(nb) and html.count(f'class="{MARKER}"') >= 1
    context = chromium.new_context(viewport={"width": 1000, "height": 900})
    context.route("**/*", lambda route: route.abort())  # offline, as the issue read it
    try:
        page = context.new_page()
        page.set_content(html, wait_until="load")
        pictures = sum(MARKER in json.dumps(c.get("outputs", [])) for c in nb["cells"])
        assert page.locator(PICTURE).count() == pictures
        for index in range(pictures):
            assert painted(page, index) > 0.03, "painted histogram bars, not text"
            assert not page.locator(WIDGET).nth(index).is_visible()
        folder = os.environ.get("SW_SHOTS")
        if folder:
            page.screenshot(path=f"{folder}/{shot}-light.png", full_page=True)
            dark, _ = HTMLExporter(theme="dark").from_notebook_node(nbformat.from_dict(nb))
            page.set_content(dark, wait_until="load")
            page.screenshot(path=f"{folder}/{shot}-dark.png", full_page=True)
    finally:
        context.close()


def test_nbconvert_html_shows_the_last_picture_offline(chromium):
    nb = executed()  # nbclient saves the widget state; JupyterLab by default does not
    bare = {**nb, "metadata": {k: v for k, v in nb.metadata.items() if k != "widgets"}}
    last = nb.cells[0].outputs[2]["data"]["text/plain"]
    assert last.endswith("last step 4)")
    html_shows_the_picture(chromium, nb, last, "nbconvert-with-widget-state")
    html_shows_the_picture(chromium, bare, last, "nbconvert-without-widget-state")


def test_a_notebook_saved_with_default_settings_shows_the_last_picture(
    browser, chromium, jupyter_app
):
    app, base = jupyter_app
    name = f"saved_picture_{app}.ipynb"
    with notebook_page(browser, base, app, name, CELLS) as (page, errors):
        page.evaluate(RUN_CELL, 0)
        page.locator(".sw-explorer").wait_for(timeout=90_000)  # kernel start + torch import
        page.wait_for_function(f"() => ({PICTURE_TEXT})() !== null")
        first = page.evaluate(f"() => {CELL0}.outputs.get(2).data")
        assert first["text/plain"].endswith("nothing recorded yet)")
        page.evaluate(RUN_CELL, 1)
        page.locator(".jp-OutputArea-output", has_text="trained").wait_for(timeout=30_000)
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "layer2"], timeout=20_000)
        # the cell's end published the last picture beside the live view, which hides it
        page.wait_for_function(f"() => ({PICTURE_TEXT})()?.endsWith({LAST!r})", timeout=20_000)
        assert page.locator(PICTURE).count() == 1 and not page.locator(PICTURE).is_visible()
        assert page.locator(WIDGET).is_visible()
        shoot(page, f"{app}-1-live")
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
        page.evaluate(RUN_CELL, 2)  # closed (after the save): its line, the last picture under it
        page.locator(".sw-explorer.sw-closed").wait_for()
        page.locator(PICTURE).wait_for(state="visible")
        assert painted(page) > 0.03
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        page.wait_for_function(KERNEL_GONE)
        assert errors == [], errors

    saved = contents(base, name)
    assert "widgets" not in saved["metadata"]  # the default: no widget state saved
    widget, marker, picture = saved["cells"][0]["outputs"]
    assert picture["data"]["text/plain"].endswith(LAST)
    assert picture["data"]["image/png"] != first["image/png"]  # not the first display's
    assert "image/png" not in widget["data"] and MARKER in marker["data"]["text/html"]
    print(f"saved outputs: {len(json.dumps(saved['cells'][0]['outputs']))} bytes")
    html_shows_the_picture(chromium, saved, picture["data"]["text/plain"], f"{app}-nbconvert")

    with notebook_page(browser, base, app, name, None) as (page, errors):  # the saved file
        # a fresh kernel that holds no Explorer: ipywidgets finds no model for the output
        page.get_by_text("Error displaying widget: model not found").wait_for(state="attached")
        assert page.evaluate(PICTURE_TEXT).endswith(LAST)
        assert_picture_alone(page)
        shoot(page, f"{app}-2-fresh-kernel")
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        page.wait_for_function(KERNEL_GONE)
        page.wait_for_timeout(1000)  # what the page does once the kernel went
        assert_picture_alone(page)
        shoot(page, f"{app}-3-no-kernel")
        assert errors == [], errors

    # an untrusted copy (not saved by its user): the widget output shows its text/plain (the
    # widget-view renderer is not "safe"), the sanitizer drops the marker's <style>
    saved["cells"][1]["source"] += "\n# a copy"
    for cell in saved["cells"]:
        cell["metadata"].pop("trusted", None)  # what a file from elsewhere lacks
    with notebook_page(browser, base, app, f"untrusted_{name}", saved) as (page, errors):
        page.locator(PICTURE).wait_for(state="visible")
        assert page.evaluate(f"() => {CELL0}.trusted") is False
        assert page.locator(WIDGET).inner_text() == "Explorer(SomeModel, 3 layers)"
        assert painted(page) > 0.03
        shoot(page, f"{app}-4-untrusted")
        assert errors == [], errors
