"""The one path of a live hook that raised: the user's forward and backward go on, and the
failure is reported once through ``on_failure(layer, kind, error)``.

``kind`` says which hook: ``"activation"``, ``"gradient"``, ``"attention"`` or
``"parameters"``. The Explorer passes :meth:`~..views.errors.ErrorList.hook_failed`; alone, a
part logs (:func:`log_failure`).

>>> seen = []
>>> failed(lambda *args: seen.append(args[:2]), "fc", "activation", RuntimeError("boom"))
>>> failed(lambda *args: 1 / 0, "fc", "activation", RuntimeError("boom"))  # logged, not raised
>>> seen
[('fc', 'activation')]
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["Failure", "failed", "log_failure"]

log = logging.getLogger("surgeon_widgets.explorer")
Failure = Callable[[str, str, BaseException], None]


def log_failure(layer: str, kind: str, error: BaseException) -> None:
    """The default ``on_failure``: a warning in the log, with the traceback."""
    log.warning("Explorer hook failed on %s (%s)", layer, kind, exc_info=error)


def failed(on_failure: Failure, layer: str, kind: str, error: BaseException) -> None:
    """Report that ``layer``'s ``kind`` hook raised ``error``; never raises itself."""
    try:
        on_failure(layer, kind, error)
    except Exception:
        log.exception("Explorer: reporting a hook failure failed")
