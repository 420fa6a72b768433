"""get_nodes: the names of every graph node, the strings Extract accepts; execution_order: the
order modules and nodes first run in, for reading the model as it runs."""

from __future__ import annotations

from typing import Any

from torch import fx, nn

from .tracing import NAME, OWNER, ExampleInputs, Trace, is_internal_node, trace

__all__ = ["execution_order", "get_nodes", "run_order"]


def get_nodes(
    model: nn.Module,
    tracer: type[fx.Tracer] | None = None,
    concrete_args: dict[str, Any] | None = None,
    example_inputs: ExampleInputs = None,
    internals: bool = False,
) -> list[str]:
    """Names of the graph nodes of ``model`` (inputs, module calls, functions), in graph order.

    Traced with torch.fx; models fx cannot trace (Hugging Face transformers) need
    ``example_inputs`` (a tensor, a tuple of args or a dict of kwargs) for the
    ``torch.export`` fallback. A module's own name (``"layer1"``) is also accepted by
    ``Extract`` and means the last node inside that module. torch.export's bookkeeping nodes
    (``sym_size_int``, assertions) are listed only with ``internals=True``.

    >>> import torch
    >>> class M(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.layer1 = nn.Linear(5, 3)
    ...     def forward(self, x):
    ...         return torch.relu(self.layer1(x)) + torch.relu(x[:, :3])
    >>> get_nodes(M())
    ['x', 'layer1', 'relu', 'getitem', 'relu_1', 'add']
    """
    return trace(model, tracer, concrete_args, example_inputs).node_names(internals)


def execution_order(
    model: nn.Module,
    tracer: type[fx.Tracer] | None = None,
    concrete_args: dict[str, Any] | None = None,
    example_inputs: ExampleInputs = None,
) -> list[str]:
    """Module and graph node names in the order the traced forward first runs them.

    A module's place is where its first node runs (a block comes where its first layer
    does); a node's is its own. Modules the traced forward never calls are not listed.
    Arguments as for :func:`get_nodes`; the trace is the shared, cached one.

    >>> import torch
    >>> class Late(nn.Module):  # defined head first, runs it last
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.head, self.body, self.unused = nn.Linear(3, 1), nn.Linear(3, 3), nn.ReLU()
    ...     def forward(self, x):
    ...         return self.head(torch.relu(self.body(x)))
    >>> execution_order(Late())
    ['x', 'body', 'relu', 'head']
    """
    return run_order(trace(model, tracer, concrete_args, example_inputs))


def run_order(traced: Trace) -> list[str]:
    """:func:`execution_order` of a trace: names of the owners of each node (the module path
    and every module above it), then the node's own name, first occurrence kept."""
    seen: dict[str, None] = {}
    for node in traced.graph.nodes:
        name = node.meta.get(NAME)
        if name is None or is_internal_node(node):
            continue
        owner = str(node.target) if node.op == "call_module" else node.meta.get(OWNER, "")
        parts = owner.split(".") if owner else []
        for i in range(1, len(parts) + 1):
            seen.setdefault(".".join(parts[:i]))
        seen.setdefault(name)
    return list(seen)
