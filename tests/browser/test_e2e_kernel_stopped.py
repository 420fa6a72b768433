"""End to end (issue 32 §4): when the kernel behind an open Explorer stops (Kernel > Shut Down,
Kernel > Restart), its view switches to its snapshot, says "kernel stopped" and disables every
control that needs a kernel, keeping the histograms it drew.

Real JupyterLab 4 and Notebook 7, a real kernel, their own commands (the restart through its
dialog).
"""

from __future__ import annotations

import os
import time

import pytest
from support.notebook_page import HISTOGRAM_PAINTED, RUN_CELL, notebook_page

SETUP = """\
import torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer
torch.manual_seed(0)
model = nn.Sequential()
model.add_module("layer1", nn.Linear(16, 64))
model.add_module("act", nn.ReLU())
model.add_module("layer2", nn.Linear(64, 8))
explorer = Explorer(model, selected=["layer2"], max_rate=0)
explorer"""

TRAIN = """\
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):
    loss = model(torch.randn(32, 16)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
print("trained")"""

SAVED = """print("snapshot at", explorer.snapshot.get("step"))"""  # refreshed when a cell ends

COMMAND = "(c) => { void window.jupyterapp.commands.execute(c); }"  # a dialog may wait
THEME = "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})"
STOPPED = '.sw-explorer[data-kernel="stopped"] .sw-snapshot-note.sw-kernel-stopped'
# the controls that need a kernel (the search box, the log-count switch and Copy do not)
KERNEL_CONTROLS = (".sw-gradients", ".sw-rate", ".sw-remove-hooks", "input.sw-params", ".sw-insert")


@pytest.mark.parametrize("how", ["shutdown", "restart"])
def test_a_stopped_kernel_turns_the_open_view_into_its_snapshot(browser, jupyter_app, how):
    app, base = jupyter_app
    shots = os.environ.get("SURGEON_SCREENSHOT_DIR")
    name = f"kernel_{how}_e2e.ipynb"
    with notebook_page(browser, base, app, name, [SETUP, TRAIN, SAVED]) as (page, errors):
        page.evaluate(RUN_CELL, 0)
        page.evaluate(RUN_CELL, 1)
        page.evaluate(RUN_CELL, 2)
        page.locator(".jp-OutputArea-output", has_text="snapshot at 4").wait_for(timeout=60_000)
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "layer2"], timeout=30_000)
        view = page.locator(".sw-explorer").first
        for control in KERNEL_CONTROLS:
            assert view.locator(control).first.is_enabled(), control  # live: all work
        assert page.locator(STOPPED).count() == 0

        started = time.monotonic()
        if how == "shutdown":
            page.evaluate(COMMAND, "kernelmenu:shutdown")
        else:
            page.evaluate(COMMAND, "kernelmenu:restart")
            page.locator(".jp-Dialog-button.jp-mod-accept").click()  # "Restart"
        note = page.locator(STOPPED)
        note.wait_for(timeout=30_000)
        signal = view.get_attribute("data-kernel-signal")
        print(f"{app} {how}: 'kernel stopped' after {time.monotonic() - started:.2f} s ({signal})")
        assert note.inner_text() == "kernel stopped · snapshot at step 4"
        for control in KERNEL_CONTROLS:
            assert view.locator(control).first.is_disabled(), control
        assert view.locator(".sw-search").is_enabled()
        assert view.locator("input.sw-logcount").first.is_enabled()
        assert view.locator(".sw-copy").is_enabled()  # the code is in the page
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "layer2"], timeout=5_000)  # kept
        title = view.locator('[data-layer="layer2"] .sw-leaf-title').first.inner_text()
        assert "step 4" in title, title
        right = view.locator(".sw-right").inner_text()
        assert "Waiting for a forward pass" not in right and "Active hooks" not in right
        if shots:
            view.screenshot(path=os.path.join(shots, f"kernel_{how}_{app}_light.png"))
            page.evaluate(THEME, "JupyterLab Dark")
            page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
            time.sleep(0.5)
            view.screenshot(path=os.path.join(shots, f"kernel_{how}_{app}_dark.png"))
            page.evaluate(THEME, "JupyterLab Light")
        assert errors == [], errors
