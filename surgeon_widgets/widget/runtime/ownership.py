"""One live Explorer per model: the newest one owns the model's live hooks.

:func:`claim` records ``owner`` as the model's live owner and returns the one it replaces (if
still alive), which then removes its hooks and says so in its view. A replaced (or closed)
owner is read-only: its ``FROZEN`` traits refuse changes, from its view or from Python.
Models and owners are held weakly: a collected Explorer or model leaves nothing here.

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

__all__ = ["CLOSED", "FROZEN", "REPLACED", "claim", "owner_of", "release", "release_when_collected"]

REPLACED = (
    "Replaced by a newer Explorer on this model: this one removed its hooks and stays frozen."
)
CLOSED = "Closed: this Explorer removed its hooks and data; make a new one, Explorer(model)."
# the traits a replaced or closed Explorer refuses to change (from its view or from Python)
FROZEN = ("selected", "gradients", "param_layers", "node_in", "node_out", "show_nodes")

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


def release_when_collected(owner: Any, model: nn.Module, lease: Any) -> None:
    """When ``owner`` is collected, release ``lease`` and its claim on ``model`` (only if no
    newer owner claimed it since). Holds neither: its hooks went with their registries."""
    weakref.finalize(owner, _collected, weakref.ref(model), lease).atexit = False


def _collected(model: weakref.ref[nn.Module], lease: Any) -> None:
    lease.release()
    watched = model()
    if watched is not None:
        release(watched, None)


def release(model: nn.Module, owner: Any) -> None:
    """Forget ``owner`` as ``model``'s owner (only if it still is; ``None``: a collected one)."""
    with _LOCK:
        ref = _OWNERS.get(model)
        if ref is not None and ref() in (owner, None):
            del _OWNERS[model]
