"""The three outputs an Explorer's display writes, so a saved notebook shows its last picture
whatever the front end kept of the widget.

JupyterLab 4 and Notebook 7 save no widget state by default ("Save Widget State
Automatically" is off); a trusted notebook reopened then shows the widget output as "Error
displaying widget: model not found", never the ``image/png`` of the same output (ipywidgets'
renderer has no fallback). So the picture is an output of its own, after the widget's:

1. the widget: the widget-view mimetype and a short ``text/plain``, never updated (an update
   would draw a live view again);
2. a marker: ``text/html`` holding only :data:`STYLE` (the page's CSS, no pixels);
3. the picture: ``image/png`` and ``text/plain`` naming the last step, with its own display id,
   updated in place (``update_display``) as the data changes and at each cell's end, also
   while a live view is open.

:data:`STYLE` hides the marker, the picture while the widget output beside it draws an
Explorer view (live, or the snapshot of saved widget state: no picture twice; not the "Explorer
closed" line, under which the last picture stays), and the widget output while it draws none
(its "model not found" line, an empty box, its text; not the box of a view that failed).
Nested ``:has()`` is invalid CSS: the rules never need it. It needs CSS ``:has()``
(Chromium 105, Firefox 121, Safari 15.4) and the JupyterLab output classes that JupyterLab,
Notebook 7 and ``nbconvert --to html`` (lab template) write. Measured (headless Chromium,
``tests/browser/test_e2e_saved_picture.py``): live, the picture is hidden; reopened with a
fresh kernel or with none, and in ``nbconvert --to html`` offline with or without widget
state, only the painted picture shows; untrusted, the sanitizer drops the ``<style>`` and the
widget output's ``text/plain`` shows above the picture, as in a front end without these
classes or ``:has()``. The picture is in the file once (``image/png``): the marker holds none.

>>> bundle = picture_bundle(b"\\x89PNG", "Explorer(M, 2 layers, selected=['fc'], last step 9)")
>>> sorted(bundle), bundle["text/plain"][-12:]
(['image/png', 'text/plain'], 'last step 9)')
>>> MARKER in marker_bundle()["text/html"]
True
"""

from __future__ import annotations

import base64

__all__ = ["MARKER", "STYLE", "marker_bundle", "picture_bundle"]

MARKER = "surgeon-widgets-still"  # the class of the marker output's element
_CHILD = ".jp-OutputArea-child"
_MARKED = f"{_CHILD}:has(.{MARKER})"
_VIEW = ".sw-explorer"  # the root of every Explorer view (js/src/index.js, snapshot.js)
_FAILED = ".jupyter-widgets-error-widget"  # ipywidgets' box for a view that failed: kept
STYLE = (
    f"{_MARKED}{{display:none}}"
    f"{_CHILD}:has(+ {_CHILD} .{MARKER}):not(:has({_VIEW}, {_FAILED})){{display:none}}"
    f"{_CHILD}:has({_VIEW}:not(.sw-closed)) + {_MARKED} + {_CHILD}{{display:none}}"
)


def marker_bundle() -> dict:
    """The marker output: :data:`STYLE` in an element of class :data:`MARKER`."""
    return {"text/html": f'<div class="{MARKER}" hidden><style>{STYLE}</style></div>'}


def picture_bundle(png: bytes, text: str) -> dict:
    """The picture output: ``png`` and ``text`` (which names the last step)."""
    return {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": text}
