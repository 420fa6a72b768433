"""A widget whose comm opens when it is first shown, so one never shown can be collected.

ipywidgets 8 opens a widget's comm in ``Widget.__init__`` (through ``open()``), which keeps
the widget for the kernel's life (``ipywidgets.widgets.widget._instances`` and the comm's
callback, so that a displayed widget with no name left still works after a page reload).
:class:`ShownLater` opens it only when a view needs it: its display (``_repr_mimebundle_``
reads ``model_id``), ``model_id`` itself (a ``Box``'s children, ``jslink``, embedding) or
``open()``. So an Explorer never shown (a script, a recording cell, one read through
``stats()``) is freed by ``del explorer`` once Python's cycle collector runs
(``gc.collect()``; plain ``del`` is not enough, its parts and traitlets' observers refer back
to it, and the automatic collector may not get to it for long). A shown one is kept by
ipywidgets and, when it was a cell's value, by IPython's ``Out`` history: call ``close()``.

This rests on ipywidgets calling ``open()`` from ``__init__``; if a release stops doing so,
``open()`` is simply called later, and the comm opens at the first display as before.

>>> w = ShownLater()
>>> w.comm is None  # not shown yet
True
>>> w.open(); w.comm.comm_id == w.model_id
True
>>> w.close()
"""

from __future__ import annotations

from typing import Any

import ipywidgets

__all__ = ["ShownLater"]


class ShownLater(ipywidgets.Widget):
    """Opens no comm until :meth:`open` (a display or ``model_id`` calls it); see the module."""

    _constructed = False  # ipywidgets' __init__ calls open(): not yet
    reopen_hint = "make a new one"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._constructed = True

    def may_open(self) -> bool:
        """Whether a view may open the comm now (a closed Explorer opens none)."""
        return True

    def open(self) -> None:
        """Open the comm to the front end, if not yet open; showing the widget does this."""
        if self.comm is None and self._constructed and self.may_open():
            super().open()

    @property
    def model_id(self) -> str:
        """The id of the widget's comm; asking for it opens the comm (see :meth:`open`)."""
        self.open()
        if self.comm is None:
            raise RuntimeError(f"this {type(self).__name__} is closed: {self.reopen_hint}")
        return self.comm.comm_id

    def __del__(self) -> None:
        super().close()  # as ipywidgets' own __del__ (not a subclass's close: no trait changes)
