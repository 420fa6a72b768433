"""Headless Chromium (Debian's /usr/bin/chromium, never a downloaded build) and local servers.

Browser tests skip only when /usr/bin/chromium is missing; CI installs it.

The tests run offline: every context made through the ``browser`` fixture aborts any request
(HTTP or WebSocket) to a host other than 127.0.0.1/localhost and records it, and the test fails
if anything was recorded (a CDN script, a font, a news feed...).
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
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
def chromium():
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
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{static_server}/tests/browser/harness.html")
    page.evaluate("() => window.harnessReady")
    yield page
    context.close()
    assert errors == [], f"browser errors: {errors}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# per app: the `jupyter` subcommand, its own flags, and the URL path opening a notebook
JUPYTER_APPS = {
    "lab": (
        "lab",
        [
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.expose_app_in_browser=True",
        ],
        "lab/tree",
    ),
    "notebook": ("notebook", ["--JupyterNotebookApp.expose_app_in_browser=True"], "notebooks"),
}


def notebook_url(base: str, app: str, name: str) -> str:
    return f"{base}/{JUPYTER_APPS[app][2]}/{name}"


def _jupyter_server(app: str, tmp_path_factory) -> Iterator[str]:
    """A Jupyter server (``app``: "lab" or "notebook") on 127.0.0.1 rooted in a temp dir.

    Exposes the app as ``window.jupyterapp``; yields the base URL.
    """
    subcommand, flags, _ = JUPYTER_APPS[app]
    root = tmp_path_factory.mktemp(app)
    home = tmp_path_factory.mktemp(f"jupyter-home-{app}")
    env = {
        **os.environ,
        # isolate from the user's Jupyter/IPython settings and workspaces
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        subcommand,
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",
        f"--ServerApp.root_dir={root}",
        *flags,
    ]
    log_path = home / "server.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter {subcommand} exited: {log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter {subcommand} did not start: {log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own session: server and its kernels
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def jupyterlab(tmp_path_factory) -> Iterator[str]:
    """A JupyterLab 4 server for the whole session; yields its base URL."""
    yield from _jupyter_server("lab", tmp_path_factory)


@pytest.fixture(scope="session")
def notebook7(tmp_path_factory) -> Iterator[str]:
    """A Notebook 7 server for the whole session; yields its base URL."""
    yield from _jupyter_server("notebook", tmp_path_factory)
