"""A Jupyter server (JupyterLab 4 or Notebook 7) on 127.0.0.1 without a token, isolated from
the user's Jupyter and IPython settings."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from .servers import free_port, http_get, repo_env, started, wait_for

# per app: the `jupyter` subcommand, its own flags, and the URL path opening a notebook
JUPYTER_APPS = {
    "lab": (
        "lab",
        [
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, for the page scripts
        ],
        "lab/tree",
    ),
    "notebook": ("notebook", ["--JupyterNotebookApp.expose_app_in_browser=True"], "notebooks"),
}


def notebook_url(base: str, app: str, name: str) -> str:
    """The URL opening notebook ``name`` in ``app`` ("lab" or "notebook") at ``base``."""
    return f"{base}/{JUPYTER_APPS[app][2]}/{name}"


def jupyter_env(home: Path, **extra: str) -> dict[str, str]:
    """:func:`repo_env` with Jupyter's and IPython's config, runtime, settings and workspace
    folders under ``home``."""
    return repo_env(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        IPYTHONDIR=str(home / "ipython"),
        **extra,
    )


@contextlib.contextmanager
def jupyter_server(app: str, root: Path, home: Path, timeout: float = 90) -> Iterator[str]:
    """Run ``jupyter lab`` or ``jupyter notebook`` (``app``: "lab" or "notebook") serving
    ``root``, with its settings under ``home`` and its log in ``home/server.log``; yields the
    base URL once ``/api/status`` answers, stops the server and its kernels on leaving."""
    subcommand, flags, _ = JUPYTER_APPS[app]
    port = free_port()
    command = [
        sys.executable, "-m", "jupyter", subcommand, "--no-browser", "--allow-root",
        "--ip=127.0.0.1", f"--port={port}", "--ServerApp.token=", "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}", *flags,
    ]  # fmt: skip
    home.mkdir(parents=True, exist_ok=True)
    log = home / "server.log"
    base = f"http://127.0.0.1:{port}"
    with started(command, log, cwd=root, env=jupyter_env(home)) as proc:
        wait_for(
            lambda: http_get(f"{base}/api/status"), proc, log, timeout=timeout,
            what=f"jupyter {subcommand}",
        )  # fmt: skip
        yield base
