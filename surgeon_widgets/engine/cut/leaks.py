"""What a ``node_in`` cut still recomputes from the model's original inputs: its leaks.

A cut may read an original input it needs: the attention mask a block after the cut applies,
a residual ``x + f(h)``, a shape. Those reads are parameter-free and make the input simply an
input of the cut. A *leak* is an original input from which the cut recomputes a part of the
model with parameters (embeddings, a stem, the branch beside ``node_in``), work the cut was
meant to replace; :func:`find_leaks` reports those, and ``suggest_fix`` ends them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from torch import fx, nn

from ..naming import base_name
from ..tracing import NAME, is_internal_node
from .surgery import reachable, upstream

__all__ = ["find_leaks", "recomputed", "value_downstream"]


def recomputed(graph: fx.Graph, originals: Sequence[fx.Node]) -> set[fx.Node]:
    """Nodes that use parameters and are computed without any new input: the part of the
    model a cut re-runs from the original inputs (or from constants alone).

    A node uses parameters when it calls a module that has some or reads a parameter
    (directly or through ops on parameters alone, ``self.weight.t()``).
    """
    old = set(originals)
    new = [n for n in graph.nodes if n.op == "placeholder" and n not in old]
    fed = value_downstream(new)
    weights = _parameter_values(graph)
    found = set()
    for node in graph.nodes:
        if node in fed or node.op not in ("call_module", "call_function", "call_method"):
            continue
        if any(i in weights for i in node.all_input_nodes) or _module_has_parameters(node):
            found.add(node)
    return found


def value_downstream(nodes: Sequence[fx.Node]) -> set[fx.Node]:
    """``nodes`` and every node computed from their values; a read of only their shape
    (``sym_size``, ``.size()``, ``.shape``) does not count: BART's encoder reads the batch
    size from a decoder-side input of the cut, yet is not computed from it."""
    return reachable(nodes, lambda node: [u for u in node.users if not _reads_shape(u)])


def _reads_shape(node: fx.Node) -> bool:
    if is_internal_node(node) and _SHAPE.match(base_name(node.name)):
        return True
    if node.op == "call_method" and node.target in ("size", "dim", "numel"):
        return True
    return node.op == "call_function" and node.target is getattr and node.args[1:2] == ("shape",)


_SHAPE = re.compile(r"^(sym_size|sym_numel|sym_stride)")


def find_leaks(graph: fx.Graph, original_inputs: Sequence[fx.Node]) -> dict[str, list[str]]:
    """Original inputs the cut recomputes parametrized work from: ``{input: [its readers
    on the way to that work]}``. Other reads of an original input are no leak (see above).

    >>> from surgeon_widgets.engine.cut import analyze_cut
    >>> class Both(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)
    ...     def forward(self, x):
    ...         return self.a(x) + self.b(x) + x
    >>> report = analyze_cut(Both(), node_in="a", node_out="add_1")
    >>> report.inputs, report.leaks  # x is read twice: b recomputes from it, + x is fine
    (('x', 'a'), {'x': ['b']})
    """
    reaches = upstream(recomputed(graph, original_inputs))  # the work and what leads to it
    leaks = {}
    for node in graph.nodes:
        if node.op != "placeholder" or node not in original_inputs:
            continue
        readers = [user for user in node.users if user in reaches]
        if readers:
            leaks[node.name] = [user.meta.get(NAME, user.name) for user in readers]
    return leaks


def _parameter_values(graph: fx.Graph) -> set[fx.Node]:
    """``get_attr`` parameters, and nodes computed from parameters and constants only."""
    root = graph.owning_module
    found: set[fx.Node] = set()
    from_inputs: set[fx.Node] = set()
    for node in graph.nodes:
        inputs = node.all_input_nodes
        if node.op == "placeholder" or any(i in from_inputs for i in inputs):
            from_inputs.add(node)
        elif node.op == "get_attr":
            if root is not None and isinstance(_attribute(root, str(node.target)), nn.Parameter):
                found.add(node)
        elif any(i in found for i in inputs):
            found.add(node)
    return found


def _module_has_parameters(node: fx.Node) -> bool:
    root = node.graph.owning_module
    if node.op != "call_module" or root is None:
        return False
    module = _attribute(root, str(node.target))
    return isinstance(module, nn.Module) and next(module.parameters(), None) is not None


def _attribute(root: nn.Module, target: str) -> object:
    try:
        return functools.reduce(getattr, target.split("."), root)
    except AttributeError:
        return None
