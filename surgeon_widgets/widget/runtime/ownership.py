"""One live Explorer per model: the newest one owns the model's live hooks.

:func:`claim` records ``owner`` as the model's live owner and returns the one it replaces (if
still alive), which then removes its hooks and says so in its view. Models and owners are held
weakly: a collected Explorer or model leaves nothing here.

>>> from torch import nn
>>> class Owner: pass
>>> model, first, second = nn.Linear(1, 1), Owner(), Owner()
>>> claim(model, first) is None, claim(model, second) is first, owner_of(model) is second
(True, True, True)
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from torch import nn

__all__ = ["claim", "owner_of", "release"]

_OWNERS: weakref.WeakKeyDictionary[nn.Module, weakref.ref[Any]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def claim(model: nn.Module, owner: Any) -> Any | None:
    """Make ``owner`` the live owner of ``model``; return the previous live owner, if any."""
    with _LOCK:
        previous = _OWNERS.get(model)
        _OWNERS[model] = weakref.ref(owner)
    before = previous() if previous is not None else None
    return before if before is not owner else None


def owner_of(model: nn.Module) -> Any | None:
    """The current live owner of ``model`` (``None`` when there is none)."""
    with _LOCK:
        ref = _OWNERS.get(model)
    return ref() if ref is not None else None


def release(model: nn.Module, owner: Any) -> None:
    """Forget ``owner`` as ``model``'s owner (only if it still is; ``None``: a collected one)."""
    with _LOCK:
        ref = _OWNERS.get(model)
        if ref is not None and ref() in (owner, None):
            del _OWNERS[model]
