"""How a traced graph is called: map a call of the original ``forward`` to graph inputs.

A :class:`CallLayout` records, at trace time, the model's ``forward`` signature and how the
example was passed; :class:`Binder` then turns any call the original ``forward`` accepts
(``cut(x, y)``, ``cut(input_ids=ids, use_cache=False)``), or a call by the cut's own input
names (``summary["input"]``), into the values of the cut graph's placeholders in order.
Non-tensor arguments that the trace fixed (torch.export specializes them, fx takes them
from ``concrete_args``) are checked against the value traced with.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .torch_internals import PYTREE

__all__ = ["Binder", "CallLayout", "FixedArgumentError", "signature_of"]

_MISSING = object()
ANY = object()


class FixedArgumentError(ValueError):
    """An argument the trace fixed (a non-tensor, or a tensor the trace did not have) differs."""


def signature_of(model: torch.nn.Module) -> inspect.Signature | None:
    try:
        return inspect.signature(model.forward)
    except (TypeError, ValueError):  # builtins and odd callables
        return None


@dataclass
class CallLayout:
    """How the traced example was passed to ``forward``.

    ``method="export"``: placeholders are the pytree leaves of ``(args, kwargs)`` as passed
    (``positional`` parameter names, then ``keywords`` in the order given), in ``spec``'s order.
    ``method="fx"``: one placeholder per ``forward`` parameter, named by it.
    ``traced``: parameter -> value traced with (tensor leaves kept as tensors); parameters
    not passed were traced with their default.
    """

    signature: inspect.Signature | None
    method: str
    positional: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    spec: Any = None  # the pytree TreeSpec of (args, kwargs)
    traced: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_export(
        cls, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> CallLayout:
        signature = signature_of(model)
        _, spec = PYTREE.get().tree_flatten((args, kwargs))
        traced: dict[str, Any] = {}
        positional: tuple[str, ...] = ()
        if signature is not None:
            bound = signature.bind(*args, **kwargs)
            traced = dict(bound.arguments)
            names = list(signature.parameters)
            positional = tuple(names[: len(args)])
        return cls(signature, "export", positional, tuple(kwargs), spec, traced)

    @classmethod
    def for_fx(cls, model: torch.nn.Module, concrete_args: dict[str, Any] | None) -> CallLayout:
        return cls(signature_of(model), "fx", traced=dict(concrete_args or {}))

    def default(self, name: str) -> Any:
        """The value ``name`` was traced with (its default when the example did not pass it);
        ``ANY`` when the trace did not fix it (an fx placeholder)."""
        if name in self.traced:
            return self.traced[name]
        if self.method == "fx":
            return ANY
        parameter = self.signature.parameters.get(name) if self.signature else None
        if parameter is None or parameter.default is inspect.Parameter.empty:
            return _MISSING
        return parameter.default


@dataclass
class Slot:
    """One placeholder of the cut graph: where its value comes from and what it may be called.

    ``index``: position among the trace's flat inputs (export); ``param``: the ``forward``
    parameter it is (fx), or holds a leaf of (export); ``None`` for a new input.
    """

    names: tuple[str, ...]
    param: str | None = None
    index: int | None = None


class Binder:
    """Turns a call of the cut model into its graph's placeholder values, in order."""

    def __init__(self, layout: CallLayout, slots: Sequence[Slot]) -> None:
        self.layout = layout
        self.slots = list(slots)
        self.has_new_inputs = any(slot.param is None for slot in self.slots)

    # Summary names first (documented form), then the aliases.
    def input_names(self) -> list[str]:
        return [slot.names[0] for slot in self.slots]

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        if not self.has_new_inputs and self.layout.signature is not None:
            try:
                return self._bind_model_call(args, kwargs)
            except TypeError as model_error:
                if len(args) > len(self.slots):
                    raise
                try:
                    return self._bind_own_inputs(args, kwargs)
                except TypeError:
                    raise model_error from None
        return self._bind_own_inputs(args, kwargs)

    # -- the model's own call -------------------------------------------------------------------

    def _bind_model_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        signature = self.layout.signature
        assert signature is not None
        kwargs = self._unalias(kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{error}; {self._how_to_call()}") from None
        arguments = dict(bound.arguments)
        for name, value in arguments.items():  # only what is passed: omitted means "as traced"
            self._check_fixed(name, value)
        for name, value in self.layout.traced.items():  # tensors left out stay missing
            arguments.setdefault(name, PYTREE.get().tree_map(_missing_if_tensor, value))
        return self._from_arguments(arguments)

    def _from_arguments(self, arguments: dict[str, Any]) -> list[Any]:
        layout = self.layout
        if layout.method == "export":
            flat = self._flat_export_inputs(arguments)
            values = [flat[slot.index] for slot in self.slots]  # type: ignore[index]
            for slot, value in zip(self.slots, values):
                if value is _MISSING:
                    raise TypeError(f"missing argument {slot.param!r}; {self._how_to_call()}")
            return values
        values = []
        for slot in self.slots:
            if slot.param in arguments:
                values.append(arguments[slot.param])
            else:
                default = _default_of(layout.signature, slot.param or "")
                if default is _MISSING:
                    raise TypeError(f"missing argument {slot.param!r}; {self._how_to_call()}")
                values.append(default)
        return values

    def _flat_export_inputs(self, arguments: dict[str, Any]) -> list[Any]:
        layout = self.layout
        args = []
        for name in layout.positional:
            if name not in arguments:
                raise TypeError(f"missing argument {name!r}; {self._how_to_call()}")
            args.append(arguments[name])
        kwargs = {}
        for name in layout.keywords:
            if name not in arguments:
                raise TypeError(f"missing argument {name!r}; {self._how_to_call()}")
            kwargs[name] = arguments[name]
        flat, spec = PYTREE.get().tree_flatten((tuple(args), kwargs))
        if spec != layout.spec:
            raise FixedArgumentError(
                "the inputs are not structured as when the model was traced "
                f"(traced: {layout.spec}; got: {spec}); rebuild the Extract with "
                "example_inputs of this structure"
            )
        return flat

    # -- the cut's own inputs -------------------------------------------------------------------

    def _bind_own_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        if len(args) > len(self.slots):
            raise TypeError(
                f"the cut model takes {len(self.slots)} inputs {tuple(self.input_names())} "
                f"but {len(args)} were given positionally; {self._how_to_call()}"
            )
        values: list[Any] = list(args) + [_MISSING] * (len(self.slots) - len(args))
        lookup = {name: i for i, slot in enumerate(self.slots) for name in slot.names}
        for name, value in kwargs.items():
            i = lookup.get(name)
            if i is None:
                self._check_unused(name, value)
                continue
            if values[i] is not _MISSING:
                raise TypeError(f"got multiple values for input {name!r}")
            values[i] = value
        missing = [self.slots[i].names[0] for i, v in enumerate(values) if v is _MISSING]
        if missing:
            names = ", ".join(map(repr, missing))
            raise TypeError(f"missing input(s) {names}; {self._how_to_call()}")
        return values

    def _check_unused(self, name: str, value: Any) -> None:
        """A keyword the cut does not read: fine if the model takes it and the trace agrees."""
        signature = self.layout.signature
        takes_any = signature is not None and any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()
        )
        if signature is None or (name not in signature.parameters and not takes_any):
            valid = self.input_names() + (list(signature.parameters) if signature else [])
            close = difflib.get_close_matches(name, valid, n=3)
            hint = f"; closest: {', '.join(map(repr, close))}" if close else ""
            raise TypeError(f"unexpected argument {name!r}{hint}; {self._how_to_call()}")
        self._check_fixed(name, value)

    # -- checks -----------------------------------------------------------------------------

    def _check_fixed(self, name: str, value: Any) -> None:
        """Non-tensor values must be those traced with; a tensor where the trace had none too."""
        traced = self.layout.default(name)
        if traced is ANY or _same_fixed(traced, value):
            return
        was = "not given" if traced is _MISSING else f"{name}={_short(traced)}"
        raise FixedArgumentError(
            f"this Extract was traced with {was} and is fixed to it; got {name}={_short(value)}. "
            f"Rebuild it with that value: Extract(model, ..., "
            f"example_inputs={{..., {name!r}: ...}})"
        )

    def _unalias(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        aliases = {
            alias: slot.param
            for slot in self.slots
            if slot.param is not None
            for alias in slot.names
            if alias != slot.param
        }
        out = {}
        for name, value in kwargs.items():
            out[aliases.get(name, name)] = value
        return out

    def _how_to_call(self) -> str:
        names = ", ".join(self.input_names())
        return f"call it as the model is called, or with its inputs ({names}) in order or by name"


def _missing_if_tensor(value: Any) -> Any:
    return _MISSING if isinstance(value, torch.Tensor) else value


def _default_of(signature: inspect.Signature | None, name: str) -> Any:
    parameter = signature.parameters.get(name) if signature else None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return _MISSING
    return parameter.default


def _same_fixed(traced: Any, value: Any) -> bool:
    """Equal where it matters: tensors match tensors (any value), other leaves by ``==``."""
    if traced is _MISSING:
        return value is None or value is _MISSING
    if isinstance(traced, torch.Tensor):
        return isinstance(value, torch.Tensor)
    if isinstance(traced, Mapping) and isinstance(value, Mapping):
        return traced.keys() == value.keys() and all(
            _same_fixed(traced[k], value[k]) for k in traced
        )
    if isinstance(traced, (list, tuple)) and isinstance(value, (list, tuple)):
        return len(traced) == len(value) and all(map(_same_fixed, traced, value))
    if isinstance(value, torch.Tensor):
        return False
    try:
        return bool(traced == value)
    except Exception:
        return traced is value


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
