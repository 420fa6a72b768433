"""Model -> tree rows (pure functions): modules, graph nodes nested under their owner, shapes.

Row dict (``js/PROTOCOL.md``): ``{name, parent, depth, cls, kind, params, children}``, in
pre-order; names are the ``get_layers`` / ``get_nodes`` names. Parameter counts read only
``numel()``, so a model built on the meta device costs no memory.

>>> from torch import nn
>>> rows = module_rows(nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU())))
>>> [(r["name"], r["parent"], r["depth"], r["params"], r["children"]) for r in rows]
[('0', None, 0, 9, 0), ('1', None, 0, 0, 1), ('1.0', '1', 1, 0, 0)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ...engine import guard
from ...engine.module_tree import module_rows
from ...engine.nodes import execution_order
from ...engine.registry import HookRegistry
from ...engine.tensors import first_tensor
from ...engine.tracing import NAME, OWNER, ExampleInputs, is_internal_node, trace

__all__ = [
    "call_model",
    "execution_order",
    "filter_rows",
    "merge_rows",
    "module_rows",
    "node_rows",
    "output_shapes",
    "seen_shape",
]

Row = dict[str, Any]


def _parent(name: str) -> str | None:
    return name.rsplit(".", 1)[0] if "." in name else None


def node_rows(
    model: nn.Module, example_inputs: ExampleInputs = None, modules: frozenset[str] = frozenset()
) -> list[Row]:
    """Rows for the graph nodes that are not modules, in graph order, parented to their owner.

    torch.export's bookkeeping (shape reads, assertions) is left out: it is no cut point.
    The trace is the one the engine shares (get_nodes, the cut report, Extract).

    Raises:
        TracingError: the model cannot be traced (see :func:`surgeon_widgets.get_nodes`).
    """
    graph = trace(model, example_inputs=example_inputs).graph
    rows = []
    for node in graph.nodes:
        name = node.meta.get(NAME)
        if name is None or name in modules or is_internal_node(node):
            continue
        owner = node.meta.get(OWNER, "")
        if node.op == "call_module":  # a repeated call: a sibling of the module, not its child
            owner = _parent(str(node.target)) or ""
        cls = getattr(node.target, "__name__", str(node.target))
        if node.op == "placeholder":
            cls = "input"
        elif node.op == "call_module":
            cls = type(model.get_submodule(str(node.target))).__name__
        rows.append({"name": name, "parent": owner if owner in modules else None, "depth": 0,
                     "cls": cls, "kind": "node", "params": 0, "children": 0})  # fmt: skip
    return rows


def merge_rows(modules: list[Row], nodes: list[Row], order: Sequence[str] = ()) -> list[Row]:
    """Pre-order rows with graph nodes under their owner; depths and child counts recomputed.

    With ``order`` (:func:`~surgeon_widgets.engine.nodes.execution_order`) the children of
    every row (submodules and the row's own graph nodes) come in the order the forward first
    runs them, so the graph's inputs come first; modules the traced forward never calls
    follow the called ones, in definition order. Without it: the graph's inputs first, then
    the modules in definition order, then each owner's nodes.

    >>> mods = [{"name": "head", "parent": None, "cls": "Linear"},
    ...         {"name": "body", "parent": None, "cls": "Linear"}]
    >>> nodes = [{"name": "x", "parent": None, "cls": "input"},
    ...          {"name": "relu", "parent": None, "cls": "relu"}]
    >>> [r["name"] for r in merge_rows(mods, nodes, ["x", "body", "relu", "head"])]
    ['x', 'body', 'relu', 'head']
    >>> [r["name"] for r in merge_rows(mods, nodes)]
    ['x', 'head', 'body', 'relu']
    """
    inputs = [r for r in nodes if r["cls"] == "input" and r["parent"] is None]
    others = [r for r in nodes if not (r["cls"] == "input" and r["parent"] is None)]
    rows = [*inputs, *modules, *others]
    if order:
        rank = {name: i for i, name in enumerate(order)}
        rows.sort(key=lambda row: rank.get(row["name"], len(rank)))  # stable: uncalled keep theirs
    kids: dict[str | None, list[Row]] = {}
    for row in rows:
        kids.setdefault(row["parent"], []).append(row)
    out: list[Row] = []
    stack = [(row, 0) for row in reversed(kids.get(None, []))]
    while stack:
        row, depth = stack.pop()
        below = kids.get(row["name"], [])
        out.append({**row, "depth": depth, "children": len(below)})
        stack.extend((child, depth + 1) for child in reversed(below))
    return out


def filter_rows(rows: list[Row], query: str) -> list[Row]:
    """Rows whose name or class contains ``query`` (any case), with their ancestors, in order.

    >>> rows = [{"name": "a", "parent": None, "cls": "Seq"}, {"name": "a.b", "parent": "a",
    ...          "cls": "Linear"}, {"name": "c", "parent": None, "cls": "ReLU"}]
    >>> [r["name"] for r in filter_rows(rows, "lin")]
    ['a', 'a.b']
    """
    q = query.strip().lower()
    if not q:
        return rows
    parents = {r["name"]: r["parent"] for r in rows}
    keep: set[str] = set()
    for row in rows:
        if q in row["name"].lower() or q in row["cls"].lower():
            name: str | None = row["name"]
            while name is not None and name not in keep:
                keep.add(name)
                name = parents.get(name)
    return [r for r in rows if r["name"] in keep]


def call_model(model: nn.Module, example_inputs: ExampleInputs) -> Any:
    """``model(*args)`` / ``model(**kwargs)`` / ``model(tensor)`` for the example inputs."""
    if isinstance(example_inputs, Mapping):
        return model(**example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return model(*example_inputs)
    return model(example_inputs)


def output_shapes(model: nn.Module, example_inputs: ExampleInputs) -> dict[str, dict]:
    """Run ``model`` once (no grad) and return ``{name: {shape, dtype, example}}`` of each
    module's output (``example``: the same ``{shape, dtype}``, kept when later forwards differ).

    The first tensor leaf of the first call is shown; modules that did not run are left out.
    The forward runs inside :func:`~surgeon_widgets.engine.guard.internal`: no live view sees it.
    """
    shapes: dict[str, dict] = {}

    def record(name: str):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            leaf = first_tensor(output)
            if leaf is not None:
                shape = {"shape": list(leaf.shape), "dtype": _dtype(leaf)}
                shapes.setdefault(name, {**shape, "example": shape})

        return hook

    with HookRegistry("Explorer shapes") as hooks, torch.no_grad(), guard.internal():
        for name, module in list(model.named_modules())[1:]:
            hooks.forward(module, record(name), name=name)
        call_model(model, example_inputs)
    return shapes


def seen_shape(
    shapes: Mapping[str, dict], layer: str, shape: list[int], dtype: str
) -> dict[str, dict] | None:
    """``shapes`` with ``layer`` showing the latest output shape seen (its example-input
    shape kept as ``example``), or ``None`` when it already shows that one.

    >>> first = seen_shape({"fc": {"shape": [1, 2], "dtype": "float32",
    ...                            "example": {"shape": [1, 2], "dtype": "float32"}}},
    ...                    "fc", [8, 2], "float32")
    >>> first["fc"]["shape"], first["fc"]["example"]["shape"]
    ([8, 2], [1, 2])
    >>> seen_shape(first, "fc", [8, 2], "float32") is None
    True
    """
    old = shapes.get(layer) or {}
    if old.get("shape") == shape and old.get("dtype") == dtype:
        return None
    example = {"example": old["example"]} if "example" in old else {}
    return {**shapes, layer: {"shape": shape, "dtype": dtype, **example}}


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")
