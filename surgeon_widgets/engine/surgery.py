"""Graph surgery as small passes: select outputs, replace inputs, prune, find leaks.

Each pass takes a ``torch.fx.Graph`` and changes it in place; ``Extract`` runs them in order.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping, Sequence
from typing import Any

from torch import fx

from .inspect import lazy_clone
from .naming import NameSpec
from .tracing import NAME

__all__ = ["find_leaks", "input_identifier", "is_kept", "prune", "replace_inputs", "select_outputs"]


def select_outputs(
    graph: fx.Graph, spec: NameSpec, nodes: Sequence[fx.Node], keys: Sequence[str], keep: bool
) -> None:
    """Make ``nodes`` the graph's output, shaped like ``spec`` (str, list, tuple or dict) and in
    the order asked; with ``keep`` the original output comes first: ``(original, selected)``."""
    output = next(n for n in graph.nodes if n.op == "output")
    original = output.args[0]
    nodes = [_snapshot_if_written_later(graph, node) for node in nodes]
    selected: Any
    if isinstance(spec, str):
        selected = nodes[0]
    elif isinstance(spec, Mapping):
        selected = dict(zip(keys, nodes))
    elif isinstance(spec, tuple):
        selected = tuple(nodes)
    else:
        selected = list(nodes)
    output.args = ((original, selected) if keep else selected,)


def _snapshot_if_written_later(graph: fx.Graph, node: fx.Node) -> fx.Node:
    """A copy-on-write snapshot of ``node`` if a later op may write to it in place (ResNet's
    ``relu(inplace=True)`` after ``bn1``), so the output keeps the value as computed."""
    if not any(_writes_in_place(user) for user in _readers(node)):
        return node
    with graph.inserting_after(node):
        return graph.call_function(lazy_clone, (node,))


_VIEWS = {"getitem", "view", "reshape", "transpose", "permute", "flatten", "unsqueeze",
          "squeeze", "expand", "narrow", "select", "slice", "t", "contiguous", "alias"}  # fmt: skip


def _readers(node: fx.Node) -> list[fx.Node]:
    """Nodes reading ``node`` directly or through views of it (which alias its memory)."""
    found, todo = [], list(node.users)
    while todo:
        user = todo.pop()
        found.append(user)
        if _op_name(user) in _VIEWS:
            todo.extend(user.users)
    return found


def _op_name(node: fx.Node) -> str:
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name.split(".")[0]


def _writes_in_place(node: fx.Node) -> bool:
    if node.op == "call_module":
        module = node.graph.owning_module.get_submodule(str(node.target))
        return bool(getattr(module, "inplace", False))
    if node.op not in ("call_function", "call_method"):
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        return schema.is_mutable
    name = _op_name(node)
    return (
        node.kwargs.get("inplace") is True
        or name in ("iadd", "isub", "imul", "setitem")
        or (name.endswith("_") and not name.startswith("_"))
    )


def input_identifier(name: str) -> str:
    """The argument name a new input called ``name`` gets: ``layer1.0.conv1`` -> ``layer1_0_conv1``.

    Raises:
        ValueError: the name is a Python keyword or ``self``.
    """
    ident = re.sub(r"\W", "_", name)
    ident = f"_{ident}" if ident[:1].isdigit() else ident
    if keyword.iskeyword(ident) or ident == "self":
        raise ValueError(f"{name!r} cannot name an input (a Python keyword or 'self')")
    return ident


def is_kept(node: fx.Node) -> bool:
    """Whether pruning must keep ``node`` though nothing reads it (a real side effect).

    Random ops (dropout, attention) count as pure: a cut that does not need them drops them.
    """
    return node.is_impure(impure_random=False)


def replace_inputs(graph: fx.Graph, nodes: Sequence[fx.Node], keys: Sequence[str]) -> list[fx.Node]:
    """Feed each of ``nodes`` from a new placeholder named after its key; return the placeholders.

    New placeholders go after the existing ones, in the order given.
    """
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    anchor = placeholders[-1] if placeholders else next(iter(graph.nodes))
    created = []
    names = [input_identifier(key) for key in keys]
    for node, key, name in zip(nodes, keys, names):
        if node.op == "placeholder":
            node.target = node.name = name
            created.append(node)
            continue
        insert = (
            graph.inserting_after(anchor)
            if placeholders or created
            else graph.inserting_before(anchor)
        )
        with insert:
            placeholder = graph.placeholder(f"__surgeon_in_{len(created)}")
        placeholder.meta.update({k: v for k, v in node.meta.items() if k in ("val", "tensor_meta")})
        placeholder.meta[NAME] = key
        node.replace_all_uses_with(placeholder)
        anchor = placeholder
        created.append(placeholder)
    prune(graph)
    others = {n.name: n for n in graph.nodes if n not in created}
    for placeholder, name in zip(created, names):
        other = others.get(name)
        if other is not None and other.op == "placeholder":
            raise ValueError(
                f"new input name {name!r} is already an input of the cut graph; "
                "give node_in as a dict {node: new_name} with another name"
            )
        if other is not None:  # an internal fx name only (public names live in node.meta)
            other._rename(f"{name}_")
        placeholder.target = placeholder.name = name
    return created


def prune(graph: fx.Graph) -> None:
    """Remove every node the output does not need, unused inputs included."""
    graph.eliminate_dead_code(is_impure_node=is_kept)
    for node in list(graph.nodes):
        if node.op == "placeholder" and not node.users:
            graph.erase_node(node)
    graph.lint()


def find_leaks(graph: fx.Graph, original_inputs: Sequence[fx.Node]) -> dict[str, list[str]]:
    """Original inputs still read after a cut: ``{input: [names of the nodes reading it]}``."""
    leaks = {}
    for node in graph.nodes:
        if node.op == "placeholder" and node in original_inputs and node.users:
            leaks[node.name] = [user.meta.get(NAME, user.name) for user in node.users]
    return leaks
