"""End to end: a layer clicked while a ~25 s training cell runs draws before the cell ends.

Real JupyterLab 4 and Notebook 7 servers, a real kernel (ipykernel 7: the widget's own
subshell; with ipykernel 6 first on PYTHONPATH the same test runs the drain), headless
Chromium. The click is made 4 s into the cell; the histogram must be painted, the kernel must
still read "busy" and the cell must not have finished by then.
"""

from __future__ import annotations

import os
import time

from support.notebook_page import HISTOGRAM_PAINTED, notebook_page

SETUP = """\
import time, torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential()
model.add_module("layer1", nn.Linear(16, 64))
model.add_module("act", nn.ReLU())
model.add_module("layer2", nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
explorer = Explorer(model)
explorer"""

TRAIN = """\
print("training", explorer.clicks, flush=True)
end = time.monotonic() + 25
steps = 0
while time.monotonic() < end:
    loss = model(torch.randn(32, 16)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    steps += 1
    time.sleep(0.01)
print("cell done", steps, explorer.selected)"""

START_CELL = """(i) => {
    const app = window.jupyterapp;
    const notebook = app.shell.currentWidget.content;
    notebook.activeCellIndex = i;
    notebook.deselectAll();
    void app.commands.execute('notebook:run-cell');  // returns at once: the cell keeps running
}"""

KERNEL = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
KERNEL_STATUS = f"() => {KERNEL}.status"
KERNEL_IDLE = f"() => {KERNEL}.status === 'idle'"


def test_click_while_training_shows_histogram_before_the_cell_ends(browser, jupyter_app):
    app, base = jupyter_app
    cells = [SETUP, TRAIN]
    opened = notebook_page(browser, base, app, "clicks_e2e.ipynb", cells, viewport=(1400, 900))
    with opened as (page, errors):
        page.evaluate(START_CELL, 0)
        row = page.locator('[role="treeitem"][data-name="layer2"]')
        row.wait_for(timeout=90_000)
        page.wait_for_function(KERNEL_IDLE, timeout=30_000)

        page.evaluate(START_CELL, 1)
        started = page.locator(".jp-OutputArea-output", has_text="training")
        started.wait_for(timeout=30_000)
        mode = started.inner_text().split()[1]  # "subshell" on ipykernel 7, "drain" on 6
        assert mode in ("subshell", "drain"), mode
        time.sleep(4.0)  # 4 s into the cell
        clicked = time.monotonic()
        row.click()
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "layer2"], timeout=15_000, polling=20)
        painted = time.monotonic()
        status = page.evaluate(KERNEL_STATUS)
        finished = page.locator(".jp-OutputArea-output", has_text="cell done").count()
        stats = page.locator('[data-layer="layer2"] .sw-stats').first.inner_text()
        shot = os.environ.get("SURGEON_SCREENSHOT_DIR")
        if shot:
            page.screenshot(path=os.path.join(shot, f"clicks_{app}.png"))
        print(f"{app} ({mode}): click -> histogram {painted - clicked:.3f} s (status {status})")
        assert finished == 0, "the cell had already finished: the click was not live"
        assert status == "busy", status
        assert "shape [32, 8] float32" in stats, stats

        # clicks in a row each reach the kernel and take effect while the cell runs (the
        # widgets front end holds an update back until the previous one's idle)
        for name in ("layer1", "act", "layer2"):
            page.locator(f'[role="treeitem"][data-name="{name}"]').click()
            page.wait_for_function(
                """(name) => document.querySelector('.sw-hooks-list')?.innerText.trim()
                    .startsWith(name)""",
                arg=name,
                timeout=10_000,
            )
        assert page.locator(".jp-OutputArea-output", has_text="cell done").count() == 0

        done = page.locator(".jp-OutputArea-output", has_text="cell done")
        done.wait_for(timeout=60_000)
        assert "['layer2']" in done.inner_text()
        assert painted - clicked < 10
        assert errors == [], errors
