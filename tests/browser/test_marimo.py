"""The Explorer in marimo: ``mo.ui.anywidget(Explorer(model))`` on a marimo server on loopback.

The tree renders, a forward run by another cell updates the histogram, and "Insert as new cell"
says to copy (marimo gives widgets no way to add cells).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from support.browser import page_errors
from support.servers import free_port, http_get, repo_env, started, wait_for

pytestmark = pytest.mark.timeout(300)

APP = Path(__file__).with_name("marimo") / "explorer_app.py"


@pytest.fixture
def marimo_url(tmp_path):
    pytest.importorskip("marimo")
    port = free_port()
    app = tmp_path / APP.name
    shutil.copyfile(APP, app)
    env = repo_env(HOME=str(tmp_path))  # marimo's config and state stay in the test's folder
    command = [sys.executable, "-m", "marimo", "run", str(app), "--headless", "--host",
               "127.0.0.1", "--port", str(port), "--no-token"]  # fmt: skip
    log = tmp_path / "marimo.log"
    url = f"http://127.0.0.1:{port}/"
    with started(command, log, cwd=tmp_path, env=env) as proc:
        wait_for(lambda: http_get(url), proc, log, timeout=90, what="marimo run")
        yield url


def test_explorer_renders_and_updates_in_marimo(browser, marimo_url):
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    page = context.new_page()
    errors = page_errors(page)
    page.goto(marimo_url)
    page.locator(".sw-explorer [role='tree']").wait_for(timeout=60_000)
    assert page.locator(".sw-explorer [role='treeitem'][data-name='0']").count() == 1
    panel = page.locator(".sw-explorer [data-layer='0']")
    panel.wait_for()
    page.get_by_role("button", name="train steps").click()
    stats = panel.locator(".sw-stats").first
    stats.wait_for(timeout=60_000)
    title = panel.locator(".sw-leaf-title").first  # marimo renders widgets in a shadow root
    deadline = time.monotonic() + 60
    while "step" not in title.inner_text():  # nothing ran before the button's cell
        assert time.monotonic() < deadline, title.inner_text()
        time.sleep(0.2)
    assert "shape [4, 16] float32" in stats.inner_text()
    painted = page.locator("canvas[aria-label='Histogram of 0 output']").evaluate("""(c) => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 0; return n;
    }""")
    assert painted > 100
    page.locator(".sw-explorer .sw-insert").click()
    status = page.locator(".sw-explorer .sw-cut-status")
    while "Copy" not in status.inner_text():
        assert time.monotonic() < deadline + 30, status.inner_text()
        time.sleep(0.2)
    assert status.inner_text() == (
        "marimo cannot add cells from a widget: press Copy, then paste into a new cell"
    )
    page.screenshot(path=str(Path(os.environ.get("SW_SHOTS", "/tmp")) / "marimo.png"))
    context.close()
    assert errors == [], errors
