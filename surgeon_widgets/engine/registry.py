"""The one place where the package adds and removes PyTorch hooks.

Every hook the package registers goes through a :class:`HookRegistry`, which keeps the
handle together with what it belongs to, so that state is visible (``repr``, :meth:`list`)
and every registration has a removal on every path (``with`` block, :meth:`remove`, and the
registry's own collection: the hooks go with it, even when it dies in a reference cycle).

Example:
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(2, 2))
    >>> seen = []
    >>> with HookRegistry("doc") as hooks:
    ...     _ = hooks.forward(model[0], lambda m, i, o: seen.append(o.shape), name="0")
    ...     _ = model(torch.ones(1, 2))
    ...     len(hooks)
    1
    >>> seen, len(model[0]._forward_hooks)
    ([torch.Size([1, 2])], 0)
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

__all__ = ["HookRecord", "HookRegistry", "live_hooks"]

_LIVE: weakref.WeakSet[HookRegistry] = weakref.WeakSet()
_COLLECTED: set[weakref.ref[HookRegistry]] = set()  # one per live registry, see __init__


class HookRecord(NamedTuple):
    """One registered hook: its kind, the name of what it is attached to, and its handle
    (a tuple: the Recorder registers one per layer output and forward, so it must be cheap)."""

    kind: str
    name: str
    handle: Any  # a RemovableHandle, or anything else with .remove() (see add)


class HookRegistry:
    """Owns a set of hooks and removes them all on :meth:`remove` or when a ``with`` block ends.

    Args:
        owner: a label shown in ``repr`` and :func:`live_hooks` (who added these hooks).
    """

    def __init__(self, owner: str = "") -> None:
        self.owner = owner
        self._records: dict[int, HookRecord] = {}  # id(handle) -> record, in registration order
        self._lock = threading.Lock()
        _LIVE.add(self)
        # Not __del__: in a collected cycle the handles' weak references to the hook dicts are
        # already cleared. This callback keeps the records (and so the handles) reachable.
        _COLLECTED.add(weakref.ref(self, _on_collected(self._records)))

    def _add(self, kind: str, name: str, handle: Any) -> Any:
        with self._lock:
            self._records[id(handle)] = HookRecord(kind, name, handle)
        return handle

    def forward(
        self, module: nn.Module, fn: Callable[..., Any], name: str = "", **kwargs: Any
    ) -> RemovableHandle:
        """Register ``fn(module, args, output)`` as a forward hook of ``module``."""
        return self._add("forward", name, module.register_forward_hook(fn, **kwargs))

    def forward_pre(
        self, module: nn.Module, fn: Callable[..., Any], name: str = "", **kwargs: Any
    ) -> RemovableHandle:
        """Register ``fn(module, args)`` as a forward pre-hook of ``module``."""
        return self._add("forward_pre", name, module.register_forward_pre_hook(fn, **kwargs))

    def backward(
        self, module: nn.Module, fn: Callable[..., Any], name: str = ""
    ) -> RemovableHandle:
        """Register ``fn(module, grad_input, grad_output)`` as a full backward hook."""
        return self._add("backward", name, module.register_full_backward_hook(fn))

    def tensor(
        self, tensor: torch.Tensor, fn: Callable[..., Any], name: str = "", once: bool = False
    ) -> RemovableHandle:
        """Register ``fn(grad)`` on a tensor (runs during ``backward()``); ``once``: removed
        after its first call (a forward's output gets one gradient per backward)."""
        if not once:
            return self._add("tensor", name, tensor.register_hook(fn))
        me, handles = weakref.ref(self), []  # the tensor must not keep the registry alive

        def run_once(grad: torch.Tensor) -> Any:
            # removing itself while autograd runs the hooks is safe: it iterates a copy of
            # the hook dict's values (pytorch/pytorch#58354)
            registry = me()
            if registry is not None:
                registry.discard(handles[0])
            return fn(grad)

        handles.append(self._add("tensor", name, tensor.register_hook(run_once)))
        return handles[0]

    def post_accumulate_grad(
        self, tensor: torch.Tensor, fn: Callable[..., Any], name: str = ""
    ) -> RemovableHandle:
        """Register ``fn(param)`` on a leaf tensor; it runs once ``backward()`` set ``.grad``."""
        return self._add("grad", name, tensor.register_post_accumulate_grad_hook(fn))

    def add(self, kind: str, name: str, handle: Any) -> Any:
        """Own ``handle`` (anything with ``.remove()``, e.g. a forward wrapper) like a hook."""
        return self._add(kind, name, handle)

    def remove(self, name: str | None = None) -> int:
        """Remove every hook (or only those attached to ``name``); return how many."""
        with self._lock:  # in place: the collection callback holds the dict
            drop = [r for r in self._records.values() if name is None or r.name == name]
            for record in drop:
                del self._records[id(record.handle)]
        for record in drop:
            record.handle.remove()
        return len(drop)

    def list(self) -> list[tuple[str, str]]:
        """``(kind, name)`` for each live hook, in registration order (a hook whose tensor or
        module was freed is gone with it, and forgotten here)."""
        with self._lock:
            _replace(self._records, [r for r in self._records.values() if _registered(r.handle)])
            return [(r.kind, r.name) for r in self._records.values()]

    def __len__(self) -> int:  # cheap: may still count hooks whose tensor was freed (see list)
        return len(self._records)

    def discard(self, handle: Any) -> None:
        """Remove the one hook of ``handle`` (a handle this registry returned; else no-op)."""
        with self._lock:
            record = self._records.pop(id(handle), None)
        if record is not None:
            record.handle.remove()

    def __enter__(self) -> HookRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        kinds: dict[str, int] = {}
        for kind, _ in self.list():
            kinds[kind] = kinds.get(kind, 0) + 1
        counts = ", ".join(f"{k}={v}" for k, v in kinds.items()) or "none"
        return f"HookRegistry(owner={self.owner!r}, hooks: {counts})"


def _replace(records: dict[int, HookRecord], keep: list[HookRecord]) -> None:
    records.clear()
    records.update((id(r.handle), r) for r in keep)


def _registered(handle: Any) -> bool:
    """Is the hook still attached? A ``RemovableHandle``'s hook dict dies with its tensor."""
    ref = getattr(handle, "hooks_dict_ref", None)
    return ref is None or ref() is not None


def _on_collected(
    records: dict[int, HookRecord],
) -> Callable[[weakref.ref[HookRegistry]], None]:
    def remove(ref: weakref.ref[HookRegistry]) -> None:
        _COLLECTED.discard(ref)
        for record in list(records.values()):
            record.handle.remove()
        records.clear()

    return remove


def live_hooks() -> list[tuple[str, str, str]]:
    """Every hook still registered by this package: ``(owner, kind, name)``.

    Tests use it to prove nothing is left behind.
    """
    return [(reg.owner, kind, name) for reg in list(_LIVE) for kind, name in reg.list()]
