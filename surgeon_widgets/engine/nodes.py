"""get_nodes: the names of every graph node, the strings Extract accepts."""

from __future__ import annotations

from typing import Any

from torch import fx, nn

from .tracing import ExampleInputs, trace

__all__ = ["get_nodes"]


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
