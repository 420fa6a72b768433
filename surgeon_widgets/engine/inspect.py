"""Inspect: run the whole model and return chosen layers' outputs beside its own (hooks).

Captured values are copy-on-write clones taken inside the hook, so a later in-place op in the
model (``out += identity``, ``ReLU(inplace=True)``) cannot change them, while gradients still
flow through them; the copy is only made if such an op happens. Hooks live only for the
duration of one call, are private to the calling thread, and are removed even when the model
raises.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .naming import NameSpec, UnknownNameError, normalize_spec, split_call_suffix
from .registry import HookRegistry
from .torch_internals import LAZY_CLONE, PYTREE

__all__ = ["Inspect", "get_layers", "resolve_layer", "snapshot"]

# ids of the capture stores of the Inspect calls running in this thread / context
_active: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "surgeon_active_captures", default=frozenset()
)


def get_layers(model: nn.Module) -> list[str]:
    """Every named module of ``model`` but the root, in ``named_modules()`` order.

    >>> get_layers(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    ['0', '1']
    """
    return [name for name, _ in model.named_modules()][1:]


def resolve_layer(model: nn.Module, name: str) -> tuple[nn.Module, str, int]:
    """``(module, module_name, call_index)`` for a layer name; ``relu_2`` means the third call.

    Raises:
        UnknownNameError: no such module (the message lists the closest names).
    """
    modules = dict(model.named_modules())
    if name in modules and name != "":
        return modules[name], name, 0
    stem, index = split_call_suffix(name)
    if index and stem in modules and stem != "":
        return modules[stem], stem, index
    raise UnknownNameError(
        name, get_layers(model), "layer", "Hint: get_layers(model) lists every valid name"
    )


def snapshot(value: Any) -> Any:
    """The value as it is now: tensor leaves cloned (copy-on-write), gradients still flow.

    >>> t = torch.tensor([-1.0, 2.0]); kept = snapshot(t); _ = t.relu_()
    >>> kept
    tensor([-1.,  2.])
    """
    # copy-on-write: free unless the model later writes to the tensor in place, in which case
    # only that write pays for the copy
    clone = LAZY_CLONE.get()
    if isinstance(value, torch.Tensor):
        return clone(value)
    return PYTREE.get().tree_map_only(torch.Tensor, clone, value)


class Inspect(nn.Module):
    """Wrap ``model`` so each call also returns the outputs of the layers named in ``layer``.

    Args:
        model: any ``nn.Module``; it is not copied or changed.
        layer: a name from :func:`get_layers` (``"layer1.0.relu_1"`` is the second call of
            ``layer1.0.relu``), or a list / tuple / dict ``{name: key}`` of them. Results come
            back in the same form and order.
        keep_output: also return the model's own output first: ``(output, layers)``.
        all_calls: return a list with every call's output for each layer (a module called
            several times per forward) instead of the first call's.

    Example:
        >>> model = nn.Sequential(nn.Linear(5, 3), nn.ReLU(), nn.Linear(3, 1))
        >>> y, (a, b) = Inspect(model, layer=("0", "1"))(torch.rand(2, 5))
        >>> a.shape, b.min() >= 0
        (torch.Size([2, 3]), tensor(True))
    """

    def __init__(
        self,
        model: nn.Module,
        layer: NameSpec,
        keep_output: bool = True,
        all_calls: bool = False,
    ) -> None:
        super().__init__()
        self.model = model
        self.layer = layer
        self.keep_output = keep_output
        self.all_calls = all_calls
        self._targets = [
            (name, key, *resolve_layer(model, name)) for name, key in normalize_spec(layer, "layer")
        ]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        store: dict[str, list[Any]] = {}
        token = _active.set(_active.get() | {id(store)})
        try:
            with HookRegistry("Inspect") as hooks:
                for module, module_name in dict.fromkeys((t[2], t[3]) for t in self._targets):
                    hooks.forward(module, _make_hook(module_name, store), name=module_name)
                output = self.model(*args, **kwargs)
        finally:
            _active.reset(token)
        captured = self._collect(store)
        return (output, captured) if self.keep_output else captured

    def _collect(self, store: Mapping[str, list[Any]]) -> Any:
        values = [self._value(store, t) for t in self._targets]
        if isinstance(self.layer, str):
            return values[0]
        if isinstance(self.layer, Mapping):
            return {t[1]: v for t, v in zip(self._targets, values)}
        return tuple(values) if isinstance(self.layer, tuple) else values

    def _value(self, store: Mapping[str, list[Any]], target: tuple[Any, ...]) -> Any:
        name, _, _, module_name, index = target
        calls = store.get(module_name, [])
        if self.all_calls:
            return calls
        if index >= len(calls):
            raise LookupError(
                f"layer {name!r}: module {module_name!r} ran {len(calls)} time(s) in this "
                f"forward, so call {index} does not exist"
                + ("; it may not be used by forward()" if not calls else "")
            )
        return calls[index]

    def extra_repr(self) -> str:
        return f"layer={self.layer!r}, keep_output={self.keep_output}"


def _make_hook(module_name: str, owner_store: dict[str, list[Any]]):
    def hook(module: nn.Module, args: Any, output: Any) -> None:
        # Hooks are shared by every thread running the model: record only for our own call.
        if id(owner_store) in _active.get():
            owner_store.setdefault(module_name, []).append(snapshot(output))

    return hook
