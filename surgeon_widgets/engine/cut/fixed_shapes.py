"""The input sizes a torch.export graph is fixed to, checked before the graph runs.

torch.export keeps a dimension symbolic only where it was asked to and could: a static trace
(the fallback past ``tracing.DYNAMIC_TIME_LIMIT``), an example of batch 1 (0/1 specialization)
or a model that needs a size fixes it. Fed another size, such a graph fails deep inside with
``mat1 and mat2 shapes cannot be multiplied``, or silently computes with the traced size; this
check says which input and dimension differ instead. fx graphs keep no sizes: nothing is fixed.

>>> import torch
>>> from torch import fx
>>> graph = fx.Graph()
>>> x = graph.placeholder("x")
>>> x.meta["val"] = torch.empty(1, 16)
>>> _ = graph.output(x)
>>> fixed = FixedShapes.of(graph, ["x"])
>>> fixed.check([torch.ones(1, 16)])
>>> fixed.check([torch.ones(1, 24)])
Traceback (most recent call last):
...
surgeon_widgets.engine.calling.FixedArgumentError: input 'x' has shape (1, 24), but this \
Extract is fixed to shape (1, 16) (dimension 1 is 16). Build it again with example inputs \
of the shape you need: Extract(model, ..., example_inputs=...)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from ..calling import FixedArgumentError

__all__ = ["FixedShapes"]

Shape = tuple[int | None, ...]  # None: a symbolic (free) dimension


@dataclass(frozen=True)
class FixedShapes:
    """Per graph input, its name and traced shape (``None`` for a non-tensor or unknown)."""

    inputs: tuple[tuple[str, Shape | None], ...]
    note: str = ""  # why the trace is static, if it is

    @classmethod
    def of(cls, graph: fx.Graph, names: Sequence[str], note: str = "") -> FixedShapes:
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        shapes = [_traced_shape(n.meta.get("val")) for n in placeholders]
        return cls(tuple(zip(names, shapes)), note)

    @property
    def fixes_any(self) -> bool:
        return any(s is not None and any(d is not None for d in s) for _, s in self.inputs)

    def check(self, values: Sequence[Any]) -> None:
        """Raise :class:`FixedArgumentError` for the first tensor whose size the graph fixed
        to another value."""
        for (name, traced), value in zip(self.inputs, values):
            if traced is None or not isinstance(value, torch.Tensor):
                continue
            shape = tuple(value.shape)
            if len(shape) == len(traced) and all(
                t is None or t == s for t, s in zip(traced, shape)
            ):
                continue
            self._refuse(name, shape, traced)

    def _refuse(self, name: str, shape: tuple[int, ...], traced: Shape) -> None:
        written = "(" + ", ".join("*" if d is None else str(d) for d in traced) + \
            ("," if len(traced) == 1 else "") + ")"  # fmt: skip
        if len(shape) != len(traced):
            which = f"{len(traced)} dimensions"
        else:
            dim = next(i for i, (t, s) in enumerate(zip(traced, shape)) if t is not None and t != s)
            which = f"dimension {dim} is {traced[dim]}"
        why = f"; {self.note}" if self.note else ""
        if not why and len(shape) == len(traced) and traced[dim] == 1:
            why = "; torch.export fixes a dimension of size 1: trace with 2 or more to vary it"
        raise FixedArgumentError(
            f"input {name!r} has shape {shape}, but this Extract is fixed to shape {written} "
            f"({which}{why}). Build it again with example inputs of the shape you need: "
            f"Extract(model, ..., example_inputs=...)"
        )


def _traced_shape(value: Any) -> Shape | None:
    if not isinstance(value, torch.Tensor):
        return None
    return tuple(d if isinstance(d, int) else None for d in value.shape)
