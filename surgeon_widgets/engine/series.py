"""The history of one statistic: the steps it was taken at and a TensorStats for each.

Shared by the live Explorer (``widget/history.py``) and recorded runs (``record/reader.py``),
so ``stats()``, ``figure()`` and ``to_pandas()`` read both the same way. A recorded run's
values are a :class:`StatsTable` (numpy columns, each TensorStats built when it is asked for).

>>> import torch
>>> from surgeon_widgets.engine.stats import tensor_stats
>>> s = Series("fc/output", "fc", "output", "activation", [3], [tensor_stats(torch.ones(2))])
>>> s.latest.mean
1.0
>>> int(s.histogram(3).counts.sum()), s.columns()["numel"].tolist()
(2, [2])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .stats import TensorStats

if TYPE_CHECKING:
    import pandas

__all__ = ["COLUMNS", "Histogram", "Series", "StatsTable", "import_pandas"]

# the columns of Series.to_pandas(), after "training"
COLUMNS = ("numel", "mean", "std", "min", "max", "l2", "zeros", "nans", "infs")


class Histogram(NamedTuple):
    """One step's histogram: ``counts[i]`` finite values in ``[edges[i], edges[i + 1])``."""

    edges: np.ndarray
    counts: np.ndarray


class StatsTable(Sequence[TensorStats]):
    """Values held as numpy columns: ``columns()`` gives :data:`COLUMNS` without building
    a TensorStats per step (a recorded run's 10k steps), indexing builds them one at a time."""

    def columns(self) -> dict[str, np.ndarray]:
        raise NotImplementedError


def import_pandas() -> Any:
    """pandas, or an ImportError naming the extra that installs it."""
    try:
        import pandas
    except ImportError as error:
        raise ImportError(
            "to_pandas() needs pandas (an optional dependency): "
            "pip install 'surgeon-widgets[pandas]'"
        ) from error
    return pandas


def stats_columns(values: Sequence[TensorStats]) -> dict[str, np.ndarray]:
    """:data:`COLUMNS` of ``values`` (``NaN`` where a moment is ``None``: no finite value)."""
    if isinstance(values, StatsTable):
        return values.columns()

    def num(v: float | None) -> float:
        return math.nan if v is None else float(v)

    return {
        "numel": np.array([v.numel for v in values], np.int64),
        **{name: np.array([num(getattr(v, name)) for v in values], np.float64)
           for name in ("mean", "std", "min", "max", "l2", "zeros")},
        "nans": np.array([v.nans for v in values], np.int64),
        "infs": np.array([v.infs for v in values], np.int64),
    }  # fmt: skip


@dataclass
class Series:
    """The history of one key, oldest first: ``steps[i]`` is when ``values[i]`` was taken."""

    key: str
    layer: str
    leaf: str
    kind: str
    steps: list[int] = field(default_factory=list)
    values: Sequence[TensorStats] = field(default_factory=list)
    training: Sequence[bool | None] = field(default_factory=list)  # mode at each step, if known

    @property
    def latest(self) -> TensorStats:
        """The most recent stats."""
        return self.values[-1]

    def tail(self, n: int) -> Series:
        """The same series with its last ``n`` steps only (a recorded one reads no more)."""
        cut = max(len(self.steps) - n, 0)
        modes = self.training[cut:] if len(self.training) == len(self.steps) else []
        return Series(self.key, self.layer, self.leaf, self.kind, list(self.steps[cut:]),
                      self.values[cut:], list(modes))  # fmt: skip

    def columns(self) -> dict[str, np.ndarray]:
        """``{column: array}`` of :data:`COLUMNS`, one entry per step."""
        return stats_columns(self.values)

    def histogram(self, step: int, training: bool | None = None) -> Histogram:
        """The histogram recorded at ``step`` (the last one there; ``training`` picks a mode).

        Raises ``KeyError`` naming the closest recorded steps when there is none.
        """
        modes = list(self.training) if len(self.training) == len(self.steps) else []
        for i in range(len(self.steps) - 1, -1, -1):
            if self.steps[i] == step and (training is None or (modes and modes[i] == training)):
                v = self.values[i]
                return Histogram(np.linspace(v.lo, v.hi, len(v.hist) + 1), np.asarray(v.hist))
        near = sorted(set(self.steps), key=lambda s: (abs(s - step), s))[:3]
        mode = "" if training is None else f" in {'training' if training else 'eval'} mode"
        raise KeyError(
            f"{self.key}: no record at step {step}{mode}; closest recorded steps: "
            f"{', '.join(map(str, sorted(near))) or 'none (empty series)'}"
        )

    def to_pandas(self) -> pandas.DataFrame:
        """A DataFrame indexed by ``step``: ``training`` (nullable), then :data:`COLUMNS`.

        ``std`` and the extremes are ``NaN`` at a step with no finite value; ``zeros`` is the
        fraction of values that are zero. Needs pandas (``pip install surgeon-widgets[pandas]``).
        """
        pd = import_pandas()
        n = len(self.steps)
        known = len(self.training) == n
        training = pd.array(list(self.training) if known else [None] * n, dtype="boolean")
        return pd.DataFrame(
            {"training": training, **self.columns()},
            index=pd.Index(np.asarray(self.steps, np.int64), name="step"),
        )
