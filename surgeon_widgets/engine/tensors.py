"""The tensor leaves of what a module returns: tuples, lists, dicts, dataclasses, nested."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = ["first_tensor", "iter_tensors"]


def iter_tensors(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """``(label, tensor)`` for every tensor leaf of a module output (tuples, dicts, dataclasses).

    >>> [label for label, _ in iter_tensors((torch.ones(1), {"a": torch.ones(1)}))]
    ['[0]', '[1].a']
    """
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from iter_tensors(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from iter_tensors(item, f"{prefix}[{i}]")
    elif hasattr(value, "__dataclass_fields__"):
        for key in value.__dataclass_fields__:
            yield from iter_tensors(getattr(value, key), f"{prefix}.{key}")


def first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor leaf of ``value`` (in :func:`iter_tensors` order), or ``None``."""
    for _, tensor in iter_tensors(value):
        return tensor
    return None
