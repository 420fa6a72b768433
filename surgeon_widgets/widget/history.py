"""What the live hooks measured: one record per tensor leaf per update, and a bounded history.

The history also keeps, for good, the first record of each key that held a NaN or an Inf
(:meth:`History.nonfinite`), in the order they were measured, after the place where values
first broke when it was located (:meth:`History.locate`, from :mod:`.live.nonfinite`: every
module checked every step), even after the bounded history has moved past it.

>>> import torch
>>> from surgeon_widgets.engine.stats import tensor_stats
>>> history = History(maxlen=2)
>>> for step in range(3):
...     history.add(Record("fc/output", "fc", "output", "activation", step,
...                        tensor_stats(torch.ones(2))))
>>> series = history.layer("fc")["fc/output"]
>>> series.steps, series.latest.mean
([1, 2], 1.0)

``time`` is when a record was taken (the throttle's clock, in seconds); a key's update interval
is derived from them:

>>> timed = History()
>>> for step, at in enumerate([0.0, 2.5, 5.0, 8.0]):
...     timed.add(Record("fc/output", "fc", "output", "activation", step,
...                      tensor_stats(torch.ones(2)), time=at))
>>> timed.every("fc/output")
2.5
"""

from __future__ import annotations

import itertools
import statistics
import threading
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from ..engine.series import Series
from ..engine.stats import TensorStats

__all__ = ["INTERVALS", "History", "NonFinite", "Record", "Series"]

INTERVALS = 8  # a key's update interval is the median of its last this many


@dataclass(frozen=True)
class Record:
    """Stats of one tensor leaf (``key`` = ``layer/leaf``) of one layer at one step.

    ``step`` is the index of the watched model's forward (shared by every layer and kind);
    ``training`` is the model's mode in that forward (``None``: not known, e.g. a recorded run);
    ``time``: when it was taken, in seconds of the throttle's clock (``None``: not known).
    """

    key: str
    layer: str
    leaf: str
    kind: str  # "activation" or "gradient"
    step: int
    stats: TensorStats
    training: bool | None = True
    time: float | None = None


class NonFinite(NamedTuple):
    """The first record of ``key`` (of ``layer``) with NaN or Inf values: its step and counts."""

    layer: str
    key: str
    step: int
    nans: int
    infs: int


class History:
    """Bounded per-key history of :class:`Record`s (thread-safe; hooks may run in threads)."""

    def __init__(self, maxlen: int = 256) -> None:
        self.maxlen = maxlen
        self._data: dict[str, deque[Record]] = {}
        self._nonfinite: dict[str, NonFinite] = {}  # key -> first bad record, in arrival order
        self._origin: NonFinite | None = None  # where values first broke (see locate)
        self._lock = threading.Lock()

    def add(self, record: Record) -> NonFinite | None:
        """Keep ``record``; its :class:`NonFinite` when it is the first bad one of its key."""
        s = record.stats
        with self._lock:
            if record.key not in self._data:
                self._data[record.key] = deque(maxlen=self.maxlen)
            self._data[record.key].append(record)
            if (s.nans or s.infs) and record.key not in self._nonfinite:
                first = NonFinite(record.layer, record.key, record.step, s.nans, s.infs)
                self._nonfinite[record.key] = first
                return first
        return None

    def locate(self, origin: NonFinite) -> bool:
        """Keep ``origin``, the first non-finite value of the model (its counts from this
        key's record when it has one of that step); ``False`` when one was kept already."""
        with self._lock:
            if self._origin is not None:
                return False
            seen = self._nonfinite.get(origin.key)
            self._origin = seen if seen is not None and seen.step == origin.step else origin
            return True

    def nonfinite(self) -> list[NonFinite]:
        """Where values first broke (:meth:`locate`), then the first NaN / Inf record of each
        other key, oldest first (records come in the order the hooks ran: a forward's layers
        in order, then its backward's gradients)."""
        with self._lock:
            rest = sorted(self._nonfinite.values(), key=lambda n: n.step)  # stable: arrival
            origin = self._origin
        if origin is None:
            return rest
        return [origin, *(n for n in rest if n.key != origin.key)]

    def records(self, key: str) -> list[Record]:
        with self._lock:
            return list(self._data.get(key, ()))

    def keys(self, layer: str | None = None) -> list[str]:
        with self._lock:
            return [k for k, d in self._data.items() if layer is None or d[0].layer == layer]

    def every(self, key: str) -> float | None:
        """Median seconds between the last ``INTERVALS`` records of ``key`` (``None``: fewer
        than two timed records)."""
        with self._lock:
            recent = list(self._data.get(key, ()))[-INTERVALS - 1 :]
        times = [r.time for r in recent if r.time is not None]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return statistics.median(gaps) if gaps else None

    def latest(self) -> list[Record]:
        """The newest record of every key."""
        with self._lock:
            return [d[-1] for d in self._data.values() if d]

    def layer(self, name: str) -> dict[str, Series]:
        """Every key of layer ``name`` as a :class:`Series`, activations before gradients."""
        out: dict[str, Series] = {}
        for key in self.keys(name):
            recs = self.records(key)
            head = recs[0]
            out[key] = Series(
                key,
                head.layer,
                head.leaf,
                head.kind,
                [r.step for r in recs],
                [r.stats for r in recs],
                [r.training for r in recs],
            )
        return dict(sorted(out.items(), key=lambda kv: kv[1].kind != "activation"))

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)
