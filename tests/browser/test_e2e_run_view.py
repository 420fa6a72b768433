"""Explorer.from_run in a real JupyterLab: the recorded run's tree, histogram and status line.

A run is recorded in the kernel (one process), then shown; the test waits for the status line
to say finished, the tree to list the model's modules, and the histogram canvas of a recorded
layer to be painted, and checks the live-only controls (gradients, max rate, hooks, cut) are
hidden and the unrecorded layer says so, and a recorded ReLU's exact zeros are a bar of their
own; screenshots in light and dark themes go to the test's tmp folder.
"""

from __future__ import annotations

from support.notebook_page import HISTOGRAM_PAINTED, RUN_CELL, notebook_page

RECORD = """\
import tempfile, torch
from torch import nn
from surgeon_widgets import Explorer, Recorder

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4), nn.ReLU())
folder = tempfile.mkdtemp()
with Recorder(model, folder, layers=["0", "1", "2"], every=1) as rec:
    for step in range(12):
        model(torch.randn(16, 8) * (1 + step / 4)).pow(2).mean().backward()
        rec.step()
view = Explorer.from_run(folder, poll=0.2)
assert view.wait(20)
view"""

CLOSE = """\
view.close()
print("closed", view.view.closed)"""

FOLLOW = """\
import os, subprocess, sys, tempfile, time
from pathlib import Path
from surgeon_widgets import Explorer

run_dir = Path(tempfile.mkdtemp()) / "job"
job = subprocess.Popen([sys.executable, "-m", "surgeon_widgets.demo.record_job", str(run_dir),
                        "--steps", "40", "--every", "1", "--nprocs", "1", "--delay", "0.15"])
while not (run_dir / "status.json").exists():
    time.sleep(0.05)
live = Explorer.from_run(run_dir, selected=["fc"], poll=0.2)
live"""

STEP_OF = """() => {
    const t = document.querySelector('[data-layer="fc"] .sw-leaf-title')?.textContent ?? '';
    const m = t.match(/step (\\d+)/);
    return m ? Number(m[1]) : -1;
}"""


def test_from_run_shows_tree_status_and_histograms(browser, jupyterlab, tmp_path):
    print("screenshots:", tmp_path)
    opened = notebook_page(
        browser, jupyterlab, "lab", "run_view_e2e.ipynb", [RECORD, CLOSE], viewport=(1400, 900)
    )
    with opened as (page, errors):
        page.evaluate(RUN_CELL, 0)
        page.locator(".sw-run-status", has_text="finished").wait_for(timeout=90_000)
        status = page.locator(".sw-run-status").inner_text()
        assert "last recorded step 11 · 12 recorded steps" in status and "1 rank(s)" in status
        assert page.locator('[role="treeitem"][data-name="2"]').count() == 1
        # a run, not a live capture: no live-only controls; the unrecorded ReLU says so
        for live_only in (".sw-gradients", ".sw-rate", ".sw-remove-hooks", "section.sw-cut",
                          ".sw-switch"):  # fmt: skip
            assert page.locator(live_only).count() == 1, live_only  # rendered, then hidden
            assert not page.locator(live_only).is_visible(), f"{live_only} shown for a run"
        assert page.locator(".sw-run-note").is_visible()
        relu = page.locator('[role="treeitem"][data-name="3"]')
        assert relu.get_attribute("aria-disabled") == "true" and "not recorded" in relu.inner_text()
        recorded = page.locator('[role="treeitem"][data-name="2"]')
        assert recorded.get_attribute("aria-disabled") is None
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "0"], timeout=20_000)
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "2"], timeout=20_000)
        stats = page.locator('[data-layer="2"] .sw-stats').first.inner_text()
        assert stats.startswith("mean ") and "shape [16, 4]" in stats, stats
        # the recorded ReLU "1": its exact zeros in a bar of their own, not in the bins (512
        # values a step, about half of them zeros: in a bin, they would be its count's max)
        page.wait_for_function(HISTOGRAM_PAINTED, arg=[0, "1"], timeout=20_000)
        bar = '[data-layer="1"] .sw-zero'
        assert page.locator(bar).first.is_visible()
        label = page.locator(f"{bar} .sw-zero-label").first.inner_text()
        share = int(label.removeprefix("0: ").removesuffix("%")) / 100
        assert 0.2 < share < 0.8, label
        most = int(page.locator('[data-layer="1"] .sw-count-max').first.inner_text())
        assert most < share * 512 / 2, (most, label)
        page.screenshot(path=str(tmp_path / "run_view_light.png"), full_page=True)
        page.locator('[data-layer="1"]').first.screenshot(path=str(tmp_path / "relu_light.png"))
        page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: 'JupyterLab Dark'})")  # fmt: skip
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
        page.wait_for_timeout(500)
        page.screenshot(path=str(tmp_path / "run_view_dark.png"), full_page=True)
        page.locator('[data-layer="1"]').first.screenshot(path=str(tmp_path / "relu_dark.png"))
        page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: 'JupyterLab Light'})")  # fmt: skip
        page.evaluate(RUN_CELL, 1)  # close(): the view leaves a placeholder, the status says so
        page.locator(".sw-closed", has_text="Run view closed").wait_for(timeout=20_000)
        # the status line is another widget: its update may come after the placeholder
        page.locator(".sw-run-status", has_text="closed, no longer followed").wait_for()
        # only this notebook's: JupyterLab keeps other tests' notebooks open in hidden tabs
        page.locator('[role="treeitem"]:visible').first.wait_for(state="detached", timeout=20_000)
        assert errors == [], errors


def test_from_run_follows_a_running_job_in_the_page(browser, jupyterlab, tmp_path):
    # the view's background thread sends each new step to the page while the job runs
    print("screenshots:", tmp_path)
    cells = [FOLLOW, "job.wait(120)"]
    opened = notebook_page(
        browser, jupyterlab, "lab", "run_follow_e2e.ipynb", cells, viewport=(1400, 900)
    )
    with opened as (page, _):
        page.evaluate(RUN_CELL, 0)
        page.locator(".sw-run-status", has_text="running").wait_for(timeout=90_000)
        page.wait_for_function(f"() => ({STEP_OF})() >= 0", timeout=30_000)
        first = page.evaluate(STEP_OF)
        page.wait_for_function(f"() => ({STEP_OF})() > {first} + 2", timeout=30_000)
        assert "running" in page.locator(".sw-run-status").inner_text()
        page.screenshot(path=str(tmp_path / "run_view_running.png"), full_page=True)
        page.locator(".sw-run-status", has_text="finished").wait_for(timeout=60_000)
        page.wait_for_function(f"() => ({STEP_OF})() === 39", timeout=20_000)
        assert "last recorded step 39" in page.locator(".sw-run-status").inner_text()
