"""The module tree of a model as rows (pure function; the widget's tree and recorded runs).

Row dict (``js/PROTOCOL.md``): ``{name, parent, depth, cls, kind, params, children}``, in
pre-order. Parameter counts read only ``numel()``, so a model on the meta device costs nothing.

>>> from torch import nn
>>> rows = module_rows(nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU())))
>>> [(r["name"], r["parent"], r["depth"], r["params"], r["children"]) for r in rows]
[('0', None, 0, 9, 0), ('1', None, 0, 0, 1), ('1.0', '1', 1, 0, 0)]
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["module_rows"]


def _parent(name: str) -> str | None:
    return name.rsplit(".", 1)[0] if "." in name else None


def module_rows(model: nn.Module) -> list[dict[str, Any]]:
    """One row per named module but the root; ``params`` counts the module's whole subtree."""
    named = list(model.named_modules())[1:]
    own = {n: sum(p.numel() for p in m.parameters(recurse=False)) for n, m in named}
    total = dict(own)
    children = dict.fromkeys(own, 0)
    for name, _ in reversed(named):  # children come after parents: accumulate bottom-up
        parent = _parent(name)
        if parent is not None:
            total[parent] += total[name]
            children[parent] += 1
    return [
        {"name": n, "parent": _parent(n), "depth": n.count("."), "cls": type(m).__name__,
         "kind": "module", "params": total[n], "children": children[n]}
        for n, m in named
    ]  # fmt: skip
