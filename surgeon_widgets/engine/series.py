"""The history of one statistic: the steps it was taken at and a TensorStats for each.

Shared by the live Explorer (``widget/history.py``) and recorded runs (``record/reader.py``),
so ``stats()`` and ``figure()`` read both the same way.

>>> import torch
>>> from surgeon_widgets.engine.stats import tensor_stats
>>> s = Series("fc/output", "fc", "output", "activation", [3], [tensor_stats(torch.ones(2))])
>>> s.latest.mean
1.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .stats import TensorStats

__all__ = ["Series"]


@dataclass
class Series:
    """The history of one key, oldest first: ``steps[i]`` is when ``values[i]`` was taken."""

    key: str
    layer: str
    leaf: str
    kind: str
    steps: list[int] = field(default_factory=list)
    values: list[TensorStats] = field(default_factory=list)
    training: list[bool] = field(default_factory=list)  # train/eval mode at each step, if known

    @property
    def latest(self) -> TensorStats:
        """The most recent stats."""
        return self.values[-1]
