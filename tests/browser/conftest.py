"""Headless Chromium (Debian's /usr/bin/chromium, never a downloaded build) and a static server.

Browser tests skip only when /usr/bin/chromium is missing; CI installs it.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "surgeon_widgets" / "static" / "explorer.js"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the base class's signature
        pass


@pytest.fixture(scope="session")
def static_server() -> Iterator[str]:
    """Serve the repository root on 127.0.0.1 (harness page + built bundle); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(REPO))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole session (sync Playwright API)."""
    if not CHROMIUM.exists():
        pytest.skip("needs /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def harness(browser, static_server):
    """A fresh page with the harness loaded; fails the test on any page error."""
    if not BUNDLE.exists():
        pytest.fail(f"{BUNDLE} missing: run `cd js && npm ci && npm run build`")
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{static_server}/tests/browser/harness.html")
    page.evaluate("() => window.harnessReady")
    yield page
    context.close()
    assert errors == [], f"browser errors: {errors}"
