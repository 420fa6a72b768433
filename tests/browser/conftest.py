"""Headless Chromium (Debian's /usr/bin/chromium, never a downloaded build) and local servers.

Every test in this folder is marked ``browser`` here and skips only when /usr/bin/chromium is
missing; CI installs it.

The tests run offline: every context made through the ``browser`` fixture aborts any request
(HTTP or WebSocket) to a host other than 127.0.0.1/localhost and records it, and the test fails
if anything was recorded (a CDN script, a font, a news feed...).
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.browser import CHROMIUM, launch, page_errors
from support.jupyter import jupyter_server

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "surgeon_widgets" / "static" / "explorer.js"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items) -> None:
    """Every test in this folder is a ``browser`` test, skipped when Chromium is missing."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.browser)
            if not CHROMIUM.exists():
                item.add_marker(pytest.mark.skip(reason=f"needs {CHROMIUM}"))


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
def chromium():
    """One headless Chromium for the whole session (sync Playwright API)."""
    if not CHROMIUM.exists():
        pytest.skip("needs /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        try:
            yield b
        finally:
            b.close()


# any http(s)/ws(s) URL whose host is not the loopback: routed (aborted), the rest goes through
# untouched, so the many local requests of JupyterLab never wait on the Python side
NOT_LOCAL = re.compile(
    r"^(?:https?|wss?)://(?!(?:127\.0\.0\.1|localhost|\[::1\])(?::\d+)?(?:[/?#]|$))",
    re.IGNORECASE,
)


class OfflineBrowser:
    """Wraps a Playwright Browser: each new context aborts and records non-local requests."""

    def __init__(self, browser, blocked: list[str]):
        self._browser = browser
        self.blocked = blocked

    def new_context(self, **kwargs):
        context = self._browser.new_context(**kwargs)
        context.route(NOT_LOCAL, self._abort)
        context.route_web_socket(NOT_LOCAL, self._close_web_socket)
        return context

    def new_page(self, **kwargs):
        raise NotImplementedError("use browser.new_context(...).new_page() (routed context)")

    def _abort(self, route):
        self.blocked.append(f"{route.request.method} {route.request.url}")
        route.abort("internetdisconnected")

    def _close_web_socket(self, ws):
        self.blocked.append(f"WebSocket {ws.url}")
        ws.close()

    def __getattr__(self, name):
        return getattr(self._browser, name)


@pytest.fixture
def browser(chromium) -> Iterator[OfflineBrowser]:
    """The session's Chromium, network unreachable but for 127.0.0.1/localhost.

    Fails the test if a page asked for anything else.
    """
    blocked: list[str] = []
    yield OfflineBrowser(chromium, blocked)
    assert blocked == [], f"non-local requests (the tests must run offline): {blocked}"


@pytest.fixture
def harness(browser, static_server):
    """A fresh page with the harness loaded; fails the test on any page error."""
    if not BUNDLE.exists():
        pytest.fail(f"{BUNDLE} missing: run `cd js && npm ci && npm run build`")
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    page = context.new_page()
    errors = page_errors(page, console=True)
    page.goto(f"{static_server}/tests/browser/harness.html")
    page.evaluate("() => window.harnessReady")
    yield page
    context.close()
    assert errors == [], f"browser errors: {errors}"


def _jupyter_server(app: str, tmp_path_factory) -> Iterator[str]:
    """A Jupyter server (``app``: "lab" or "notebook") on 127.0.0.1 rooted in a temp dir.

    Exposes the app as ``window.jupyterapp``; yields the base URL.
    """
    root = tmp_path_factory.mktemp(app)
    home = tmp_path_factory.mktemp(f"jupyter-home-{app}")
    with jupyter_server(app, root, home) as base:
        yield base


@pytest.fixture(scope="session")
def jupyterlab(tmp_path_factory) -> Iterator[str]:
    """A JupyterLab 4 server for the whole session; yields its base URL."""
    yield from _jupyter_server("lab", tmp_path_factory)


@pytest.fixture(scope="session")
def notebook7(tmp_path_factory) -> Iterator[str]:
    """A Notebook 7 server for the whole session; yields its base URL."""
    yield from _jupyter_server("notebook", tmp_path_factory)


@pytest.fixture(
    params=[pytest.param("lab", id="jupyterlab4"), pytest.param("notebook", id="notebook7")]
)
def jupyter_app(request) -> tuple[str, str]:
    """(app, base URL) of a session-wide JupyterLab 4 or Notebook 7 server."""
    server = request.getfixturevalue("jupyterlab" if request.param == "lab" else "notebook7")
    return request.param, server
