"""The Explorer's front end: the bundle and the synced traits every view of it reads.

The live :class:`~surgeon_widgets.widget.explorer.Explorer` and a recorded run's view
(:mod:`.run_view`) draw with the same bundle; each adds the traits only it has. Types,
defaults and wire forms: ``js/PROTOCOL.md``.
"""

from __future__ import annotations

import os
from pathlib import Path

import anywidget
import traitlets as t

__all__ = ["FrontEnd"]

STATIC = Path(__file__).resolve().parent.parent / "static"


def _bundle(name: str) -> str | Path:
    """The file's text; its path only for hot reload (``ANYWIDGET_HMR=1``, a development setup).

    Given a path, anywidget 0.11 connects every widget to the file's ``changed`` signal with a
    strong reference, so no Explorer could ever be collected (and remove its hooks).
    """
    path = STATIC / name
    return path if os.environ.get("ANYWIDGET_HMR") == "1" else path.read_text(encoding="utf-8")


class FrontEnd(anywidget.AnyWidget):
    """The bundle (``static/explorer.js`` / ``.css``) and the traits shared by every view."""

    _esm = _bundle("explorer.js")
    _css = _bundle("explorer.css")

    rows = t.List(t.Dict()).tag(sync=True)
    shapes = t.Dict().tag(sync=True)
    show_nodes = t.Bool(False).tag(sync=True)
    nodes_error = t.Unicode("").tag(sync=True)
    selected = t.List(t.Unicode()).tag(sync=True)
    gradients = t.Bool(False).tag(sync=True)
    hooks = t.List(t.Dict()).tag(sync=True)
    search = t.Unicode("").tag(sync=True)
