"""The visible status while dynamo compiles: the model's first compile, and recompiles.

The model's own first ``torch.compile`` (a compiled model's first call, see
:mod:`..runtime.eager_steps`) shows :data:`COMPILING` until that call returns.

A selection change that makes dynamo recompile shows "recompiling, ~N s".

Where the hooks do go into compiled code (blocks compiled in place in an eager model, a torch
without :mod:`..runtime.eager_steps`' door), a selection change recompiles at the next forward
and the first record of it waits for that. :class:`RecompileStatus` gives the line the view
shows meanwhile: at a change, ``"recompiling, ~N s"`` with the time the last change took to
its first record (``"recompiling"`` before any), and ``""`` once a record arrives.

>>> now = [0.0]
>>> status = RecompileStatus(now=lambda: now[0])
>>> status.changed()
'recompiling'
>>> now[0] = 30.6; status.recorded()
''
>>> status.changed()
'recompiling, ~31 s'
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable

__all__ = ["COMPILING", "RecompileStatus", "weakly"]

COMPILING = "the model is compiling: first record after it"


class RecompileStatus:
    """The status line of recompiles: :meth:`changed` at a selection change, :meth:`recorded`
    at each record; each returns the line to show (``""``: none)."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.took: float | None = None  # seconds from the last change to its first record
        self._since: float | None = None  # the change waiting for its first record

    def changed(self) -> str:
        self._since = self.now()
        return "recompiling" if self.took is None else f"recompiling, ~{self.took:.0f} s"

    def recorded(self) -> str:
        if self._since is not None:
            self.took = self.now() - self._since
            self._since = None
        return ""


def weakly(method: Callable[[bool], None]) -> Callable[[bool], None]:
    """``method`` of an object held weakly: the model's compiled call must not keep the
    Explorer alive (gone: nothing to tell)."""
    ref = weakref.WeakMethod(method)  # type: ignore[arg-type]

    def tell(running: bool) -> None:
        bound = ref()
        if bound is not None:
            bound(running)

    return tell
