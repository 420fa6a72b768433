"""Graph surgery as small passes: select outputs, replace inputs, prune, find leaks.

Each pass takes a ``torch.fx.Graph`` and changes it in place; ``Extract`` runs them in order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from torch import fx

from .naming import NameSpec
from .tracing import NAME

__all__ = ["find_leaks", "prune", "replace_inputs", "select_outputs"]


def select_outputs(
    graph: fx.Graph, spec: NameSpec, nodes: Sequence[fx.Node], keys: Sequence[str], keep: bool
) -> None:
    """Make ``nodes`` the graph's output, shaped like ``spec`` (str, list, tuple or dict) and in
    the order asked; with ``keep`` the original output comes first: ``(original, selected)``."""
    output = next(n for n in graph.nodes if n.op == "output")
    original = output.args[0]
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


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    return f"_{ident}" if ident[:1].isdigit() else ident


def replace_inputs(graph: fx.Graph, nodes: Sequence[fx.Node], keys: Sequence[str]) -> list[fx.Node]:
    """Feed each of ``nodes`` from a new placeholder named after its key; return the placeholders.

    New placeholders go after the existing ones, in the order given.
    """
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    anchor = placeholders[-1] if placeholders else next(iter(graph.nodes))
    created = []
    for node, key in zip(nodes, keys):
        if node.op == "placeholder":
            node.target = node.name = _identifier(key)
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
    for placeholder, key in zip(created, keys):
        placeholder.target = placeholder.name = _identifier(key)
    return created


def prune(graph: fx.Graph) -> None:
    """Remove every node the output does not need, unused inputs included."""
    graph.eliminate_dead_code()
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
