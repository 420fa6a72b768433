"""The Explorer's error list: one readable line per distinct problem, repeats merged with a count.

A hook failure becomes an :class:`ErrorEntry` saying what failed, on which layer and what to do;
the raw exception text goes to ``detail`` (and the log, once per distinct problem). Entries are
keyed by ``(layer, what, exception type)``, so a failure on every forward is one line whose
``count`` grows, never 50 copies of a torch-internal message.

>>> errors = ErrorList()
>>> for _ in range(3):
...     errors.hook_failed("fc", "activation", RuntimeError("boom\\nlong torch detail"))
>>> [(e.text, e.count) for e in errors.entries]
[('fc: the activation statistics failed (RuntimeError: boom); the model ran on unharmed. \
Deselect fc to stop retrying, or report it with the detail.', 3)]
>>> errors.clear(); errors.entries
[]
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass

__all__ = ["MAX_ERRORS", "ErrorEntry", "ErrorList"]

log = logging.getLogger("surgeon_widgets.explorer")
MAX_ERRORS = 50  # distinct entries kept (repeats only raise a count)
_WHAT = {
    "activation": "the activation statistics",
    "gradient": "the gradient statistics",
    "attention": "the attention capture",
    "parameters": "the parameter statistics",
}


@dataclass(frozen=True)
class ErrorEntry:
    """One distinct problem: ``text`` is the readable line, ``detail`` the raw message."""

    text: str
    layer: str = ""
    count: int = 1
    detail: str = ""
    key: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


class ErrorList:
    """Merged, bounded, thread-safe list of :class:`ErrorEntry`; ``on_change`` gets the dicts."""

    def __init__(self, on_change: Callable[[list[dict]], None] = lambda entries: None) -> None:
        self.on_change = on_change
        self._entries: dict[str, ErrorEntry] = {}
        self._lock = threading.Lock()

    @property
    def entries(self) -> list[ErrorEntry]:
        with self._lock:
            return list(self._entries.values())

    def add(
        self,
        text: str,
        layer: str = "",
        detail: str = "",
        key: str | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Add ``text`` (or count one more repeat of the entry with the same ``key``)."""
        key = key or text
        with self._lock:
            old = self._entries.get(key)
            if old is not None:
                self._entries[key] = ErrorEntry(old.text, old.layer, old.count + 1, old.detail, key)
            else:
                self._entries[key] = ErrorEntry(text, layer, 1, detail, key)
                while len(self._entries) > MAX_ERRORS:
                    self._entries.pop(next(iter(self._entries)))
            snapshot = [e.to_dict() for e in self._entries.values()]
        if old is None:
            extra = f"\n{detail}" if detail and detail != text else ""
            log.warning("Explorer: %s%s", text, extra, exc_info=error)
        self.on_change(snapshot)

    def hook_failed(self, layer: str, kind: str, error: BaseException) -> None:
        """``layer``'s ``kind`` hook (activation, gradient, attention, parameters) raised."""
        detail = f"{type(error).__name__}: {error}"
        first = detail.splitlines()[0] if detail.strip() else type(error).__name__
        if len(first) > 120:
            first = first[:117] + "..."
        what = _WHAT.get(kind, kind)
        text = (
            f"{layer}: {what} failed ({first}); the model ran on unharmed. "
            f"Deselect {layer} to stop retrying, or report it with the detail."
        )
        self.add(text, layer, detail, key=f"{layer}|{kind}|{type(error).__name__}", error=error)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
        self.on_change([])
