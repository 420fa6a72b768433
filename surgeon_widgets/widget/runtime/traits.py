"""The view's changes of chosen traits applied on the model's thread, through ``set_state``.

A view's change reaches ipywidgets' public ``Widget.set_state`` ("called when a state is
received from the front-end") on whatever thread handles its comm message: the kernel's main
thread, or the widget's own subshell while a cell runs (:mod:`.kernel_comms`). A widget whose
``set_state`` calls :meth:`ViewState.set_state` applies the values of ``names`` (traits whose
observers touch the model) through its :class:`~.handover.Handover` inbox, on the model's
thread: at once there, else at the model's next forward or when the cell ends. The traits, their
validation, their observers and ipywidgets' echo all happen then, in one ``apply`` (one hold of
notifications, so ``node_in`` and ``node_out`` changed together are seen together); the newest
value of a trait wins. Every other value applies at once.

A change made in Python is the user's own: it applies on the thread that makes it, as in
plain traitlets, and is newer than any view value still waiting (:meth:`ViewState.superseded`).

>>> applied, posted = [], []
>>> class Inbox:
...     def post(self, key, apply, value): posted.append(key); apply(value)
>>> view = ViewState({"size"}, Inbox(), applied.append)
>>> view.set_state({"size": 3, "label": "x"})
>>> applied, posted
([{'label': 'x'}, {'size': 3}], ['view state'])
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any, Protocol

__all__ = ["ViewState"]


class Inbox(Protocol):
    def post(self, key: str | None, apply: Callable[[Any], None], value: Any) -> None: ...


class ViewState:
    """The view's values of ``names`` not yet applied; ``apply(values)`` is ipywidgets' own
    ``set_state`` (``super().set_state`` of the widget)."""

    KEY = "view state"  # the inbox's key: a newer post moves it after what came before

    def __init__(
        self, names: Collection[str], inbox: Inbox, apply: Callable[[dict[str, Any]], None]
    ) -> None:
        self.names = frozenset(names)
        self._inbox = inbox
        self._apply = apply
        self._waiting: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._applying: int | None = None  # the thread applying the view's values now

    @property
    def waiting(self) -> list[str]:
        """The traits whose view values wait for the model's thread."""
        with self._lock:
            return list(self._waiting)

    def set_state(self, sync_data: dict[str, Any]) -> None:
        """A state from the view (any thread): ``names`` through the inbox, the rest now."""
        later = {name: value for name, value in sync_data.items() if name in self.names}
        now = {name: value for name, value in sync_data.items() if name not in self.names}
        if now or not later:
            self._apply(now)
        if later:
            with self._lock:
                for name, value in later.items():
                    self._waiting.pop(name, None)  # the newest value goes last
                    self._waiting[name] = value
            self._inbox.post(self.KEY, self._apply_waiting, None)

    def superseded(self, name: str) -> None:
        """``name`` changed in Python: a view value of it still waiting is older, dropped."""
        if self._applying == threading.get_ident():
            return  # the view's own values being applied (a newer one may be waiting)
        with self._lock:
            self._waiting.pop(name, None)

    def _apply_waiting(self, _: Any) -> None:
        with self._lock:
            values, self._waiting = self._waiting, {}
        if values:
            self._applying = threading.get_ident()
            try:
                self._apply(values)
            finally:
                self._applying = None
