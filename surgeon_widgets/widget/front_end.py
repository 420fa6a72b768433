"""The Explorer's front end: the bundle and the synced traits every view of it reads.

The live :class:`~surgeon_widgets.widget.explorer.Explorer` and a recorded run's view
(:mod:`.run_view`) draw with the same bundle; each adds the traits only it has. Types,
defaults and wire forms: ``js/PROTOCOL.md``.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets as t

__all__ = ["FrontEnd"]

STATIC = Path(__file__).resolve().parent.parent / "static"


class FrontEnd(anywidget.AnyWidget):
    """The bundle (``static/explorer.js`` / ``.css``) and the traits shared by every view."""

    _esm = STATIC / "explorer.js"
    _css = STATIC / "explorer.css"

    rows = t.List(t.Dict()).tag(sync=True)
    shapes = t.Dict().tag(sync=True)
    show_nodes = t.Bool(False).tag(sync=True)
    nodes_error = t.Unicode("").tag(sync=True)
    selected = t.List(t.Unicode()).tag(sync=True)
    gradients = t.Bool(False).tag(sync=True)
    hooks = t.List(t.Dict()).tag(sync=True)
    search = t.Unicode("").tag(sync=True)
