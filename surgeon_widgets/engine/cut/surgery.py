"""Graph surgery as small passes: select outputs, replace inputs, prune (leaks: :mod:`.leaks`).

Each pass takes a ``torch.fx.Graph`` and changes it in place; ``Extract`` runs them in order.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import fx

from ..naming import NameSpec
from ..torch_internals import LAZY_CLONE
from ..tracing import NAME

__all__ = [
    "auto_input_key",
    "input_identifier",
    "is_kept",
    "mutation_readers",
    "prune",
    "replace_inputs",
    "reroute_shape_reads",
    "select_outputs",
]


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
        return graph.call_function(LAZY_CLONE.get(), (node,))


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


def _storage_root(node: fx.Node, roots: dict[fx.Node, fx.Node]) -> fx.Node:
    """The node whose memory ``node`` is: itself, or what it views or writes in place."""
    if node in roots:
        return roots[node]
    root = node
    first = node.args[0] if node.args else None
    if isinstance(first, fx.Node) and (_op_name(node) in _VIEWS or _writes_in_place(node)):
        root = _storage_root(first, roots)
    roots[node] = root
    return root


def mutation_readers(graph: fx.Graph) -> dict[fx.Node, list[fx.Node]]:
    """``{node: [in-place ops that wrote the memory it reads]}``, for nodes after such a write.

    Graph edges do not show that ``side.add_(1)`` changes what later readers of ``side`` see;
    these extra dependencies do.
    """
    roots: dict[fx.Node, fx.Node] = {}
    writes: dict[fx.Node, list[fx.Node]] = {}
    extra: dict[fx.Node, list[fx.Node]] = {}
    for node in graph.nodes:
        for parent in node.all_input_nodes:
            for write in writes.get(_storage_root(parent, roots), ()):
                if write is not node:
                    extra.setdefault(node, []).append(write)
        if _writes_in_place(node) and node.args and isinstance(node.args[0], fx.Node):
            writes.setdefault(_storage_root(node.args[0], roots), []).append(node)
    return extra


def auto_input_key(name: str, key: str) -> str:
    """The new input's key: a node named like a Python keyword or ``self`` that names its own
    input (``node_in="class"``) gets ``class_``; a new name the user chose is kept as given."""
    if key == name and (keyword.iskeyword(key) or key == "self"):
        return f"{key}_"
    return key


def is_kept(node: fx.Node) -> bool:
    """Whether pruning must keep ``node`` though nothing reads it (a real side effect).

    Random ops (dropout, attention) count as pure: a cut that does not need them drops them.
    An in-place write is a side effect only on an input or a parameter/buffer; on a temporary
    it matters only if the temporary is read (see :func:`mutation_readers`).
    """
    if _writes_in_place(node) and node.args and isinstance(node.args[0], fx.Node):
        root = _storage_root(node.args[0], {})
        return root.op in ("placeholder", "get_attr")
    return node.is_impure(impure_random=False)


def live_nodes(graph: fx.Graph) -> set[fx.Node]:
    """The nodes the output needs, the side effects and what they need, in-place writes included."""
    extra = mutation_readers(graph)
    todo = [n for n in graph.nodes if n.op == "output" or (n.op != "placeholder" and is_kept(n))]
    live: set[fx.Node] = set()
    while todo:
        node = todo.pop()
        if node in live:
            continue
        live.add(node)
        todo.extend(node.all_input_nodes)
        todo.extend(extra.get(node, ()))
    return live


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
    reroute_shape_reads(graph, created)
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
    live = live_nodes(graph)
    for node in reversed(list(graph.nodes)):
        if node not in live and not node.users:
            graph.erase_node(node)
    graph.lint()


_SHAPE_READS = ("sym_size", "sym_numel", "sym_stride")


def reroute_shape_reads(graph: fx.Graph, new_inputs: Sequence[fx.Node]) -> None:
    """Read sizes from the new inputs where they carry the same symbolic size.

    torch.export records symbolic shapes in ``meta["val"]``: a ``sym_size(input_ids, 1)`` that
    a cut after the embeddings still needs reads the sequence length ``s1``, which the new
    hidden-state input also has, so the cut does not take ``input_ids`` for its length.
    """
    sizes: dict[Any, tuple[fx.Node, int]] = {}
    for placeholder in new_inputs:
        value = placeholder.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue
        for dim, size in enumerate(value.shape):
            if isinstance(size, torch.SymInt):
                sizes.setdefault(size.node.expr, (placeholder, dim))
    if not sizes:
        return
    fed = downstream(new_inputs)
    anchor = [n for n in graph.nodes if n.op == "placeholder"][-1]
    for node in list(graph.nodes):
        if node in fed or node.op != "call_function" or not _op_name(node).startswith(_SHAPE_READS):
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.SymInt) or value.node.expr not in sizes:
            continue
        placeholder, dim = sizes[value.node.expr]
        with graph.inserting_after(anchor):
            read = graph.call_function(torch.ops.aten.sym_size.int, (placeholder, dim))
        read.meta = dict(node.meta)
        node.replace_all_uses_with(read)
        node.meta.pop(NAME, None)  # the new read carries the public name
        anchor = read


def reachable(
    nodes: Iterable[fx.Node], neighbours: Callable[[fx.Node], Iterable[fx.Node]]
) -> set[fx.Node]:
    """``nodes`` and every node reached from them by repeatedly following ``neighbours``."""
    seen = set(nodes)
    todo = list(seen)
    while todo:
        for node in neighbours(todo.pop()):
            if node not in seen:
                seen.add(node)
                todo.append(node)
    return seen


def downstream(nodes: Iterable[fx.Node]) -> set[fx.Node]:
    """``nodes`` and every node that reads them, directly or not."""
    return reachable(nodes, lambda node: node.users)


def upstream(nodes: Iterable[fx.Node]) -> set[fx.Node]:
    """``nodes`` and every node they read, directly or not."""
    return reachable(nodes, lambda node: node.all_input_nodes)
