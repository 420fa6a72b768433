"""Observers of chosen traits run on the model's thread: a door on traitlets' dispatch.

traitlets calls every observer of a change through the private ``HasTraits._notify_observers``;
:func:`hand_over` routes the changes of ``names`` through a
:class:`~.handover.Handover` instead (the other traits' observers run at once, as always). It
looks the method up once, on the instance; without it (a traitlets that renamed it), observers
run on the thread that made the change, as plain traitlets does, and it returns ``False``.
``method`` names the dispatch to route (a missing name forces the fallback).

>>> import traitlets as t
>>> class Box(t.HasTraits):
...     size = t.Int(0)
>>> posted = []
>>> class Inbox:
...     def post(self, key, apply, value): posted.append(key); apply(value)
>>> box = Box()
>>> hand_over(box, frozenset({"size"}), Inbox()), hand_over(Box(), {"size"}, Inbox(), "gone")
(True, False)
>>> box.size = 3; posted
['size']
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Protocol

__all__ = ["hand_over"]


class Inbox(Protocol):
    def post(self, key: str | None, apply: Callable[[Any], None], value: Any) -> None: ...


def hand_over(
    widget: Any, names: Collection[str], inbox: Inbox, method: str = "_notify_observers"
) -> bool:
    """Post ``widget``'s changes of ``names`` to ``inbox`` before their observers run."""
    notify = getattr(widget, method, None)
    if not callable(notify):
        return False

    def route(event: Any) -> None:
        name = event.get("name") if isinstance(event, dict) else None
        if name in names:
            inbox.post(name, notify, event)
        else:
            notify(event)

    setattr(widget, method, route)  # on the instance: traitlets looks it up there first
    return True
