"""The tree panel's model side: module rows, graph-node rows on demand, output shapes.

Module rows are read once; graph nodes are traced the first time they are shown (a model
torch.fx cannot trace shows why in ``nodes_error``, and its module rows stay usable). Rows
come from the pure functions of :mod:`.tree`. The Explorer asks for graph-node rows only on
the main thread between forwards (:meth:`~..runtime.handover.Handover.later`): the trace
never runs inside the user's forward nor beside their running code.

>>> import torch
>>> from torch import nn
>>> panel = TreePanel(nn.Sequential(nn.Linear(2, 3), nn.ReLU()), torch.ones(1, 2))
>>> [r["name"] for r in panel.rows(show_nodes=False)[0]], panel.shapes()[0]["0"]["shape"]
(['0', '1'], [1, 3])
>>> rows, error = panel.rows(show_nodes=True); error, "relu" in panel.node_names()
('', False)
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ...engine.naming import UnknownNameError
from ...engine.tracing import ExampleInputs
from . import tree

__all__ = ["TreePanel"]


class TreePanel:
    """Rows of ``model``'s tree; ``example_inputs`` give shapes and trace what fx cannot."""

    def __init__(self, model: nn.Module, example_inputs: ExampleInputs = None) -> None:
        self.model = model
        self.example_inputs = example_inputs
        self.module_rows = tree.module_rows(model)
        self.layers = frozenset(r["name"] for r in self.module_rows)
        self._node_rows: list[dict] | None = None

    @property
    def traced(self) -> bool:
        """Were the graph nodes traced (they are only once first shown)?"""
        return self._node_rows is not None

    def node_names(self) -> list[str]:
        """The graph nodes' names, once they were shown (else none)."""
        return [r["name"] for r in self._node_rows or ()]

    def check(self, names: list[str], nodes: bool = True) -> None:
        """``UnknownNameError`` (closest names listed) for a name that is not a module (or,
        with ``nodes``, a graph node shown in the tree)."""
        modules = [r["name"] for r in self.module_rows]
        valid = [*modules, *self.node_names()] if nodes else modules
        hint = (
            "Hint: explorer.rows (or get_layers(model)) lists every valid name; graph nodes "
            "are listed once show_nodes is on"
            if nodes
            else "Hint: live stats are for modules; get_layers(model) lists them"
        )
        for name in names:
            if name not in self.layers and name not in valid:
                raise UnknownNameError(name, valid, "layer", hint)

    def rows(self, show_nodes: bool) -> tuple[list[dict], str]:
        """The rows to show, and why graph nodes cannot be shown (``""``: they can)."""
        if not show_nodes:
            return self.module_rows, ""
        if self._node_rows is None:
            try:
                self._node_rows = tree.node_rows(self.model, self.example_inputs, self.layers)
            except Exception as error:  # shown in the tree; the module rows stay usable
                return self.module_rows, f"{type(error).__name__}: {error}"
        order = tree.execution_order(self.model, example_inputs=self.example_inputs)
        return tree.merge_rows(self.module_rows, self._node_rows, order), ""

    def shapes(self) -> tuple[dict[str, Any], str]:
        """Each module's output shape in one forward on the example inputs, or why not."""
        if self.example_inputs is None:
            return {}, ""
        try:
            return tree.output_shapes(self.model, self.example_inputs), ""
        except Exception as error:
            return {}, (
                "could not run the model on example_inputs to show output shapes (the tree "
                "works without them; check the inputs' shapes and device): "
                f"{type(error).__name__}: {error}"
            )
