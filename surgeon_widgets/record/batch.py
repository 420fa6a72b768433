"""One step's small values: copied at the hook into one float64 buffer per device, reduced at once.

A hook's tensor of up to :data:`BATCH_LIMIT` values is copied (a CPU one through numpy: a
numpy copy costs a fraction of a torch call) into its device's :class:`Batch`; ``rec.step()``
reduces the whole batch, every key together, in one pass: in numpy while it holds at most
:data:`HOST_BATCH` CPU values, else in one :func:`.accumulate.accumulate` call (one compiled
loop on a CPU). The per-key cost of a small tensor is one copy. A buffer holds at most
:data:`CAPACITY` values (2 MB): a value that does not fit makes the batch reduce first, so
memory stays bounded whatever the step does.

>>> import torch
>>> from surgeon_widgets.record.layout import MAX_WIDTH, SUM_WIDTH, FINITE, SUM
>>> sums = torch.zeros(2, SUM_WIDTH, dtype=torch.float64)
>>> maxes = torch.full((2, MAX_WIDTH), float("-inf"), dtype=torch.float64)
>>> batch = Batch(torch.device("cpu"))
>>> batch.add(0, torch.ones(3)), batch.add(1, torch.arange(4.0)), batch.add(0, torch.ones(2))
(True, True, True)
>>> batch.reduce(sums, maxes, np.zeros(2))
>>> sums[:, FINITE].tolist(), sums[:, SUM].tolist(), len(batch)
([5.0, 4.0], [5.0, 6.0], 0)
"""

from __future__ import annotations

import numpy as np
import torch

from .accumulate import Workspace, accumulate, accumulate_calls, real_values
from .accumulate_native import calls

__all__ = ["BATCH_LIMIT", "CAPACITY", "HOST_BATCH", "Batch"]

# a tensor up to this many values is batched; a larger one is reduced at the hook: batching
# 16k-value outputs made a transformer's recorded step 3.6x slower (one large batched pass
# per step, its temporaries out of cache, against one fused pass per tensor)
BATCH_LIMIT = 1 << 11
CAPACITY = 1 << 18  # values in one device's buffer (2 MB)
# a CPU batch up to this many values is reduced in numpy (a numpy call costs a fraction of a
# torch call; the compiled kernel's fixed cost pays off on larger batches)
HOST_BATCH = 1 << 13

_NUMPY_DTYPES = frozenset({
    torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool,
})  # fmt: skip


class Batch:
    """The values of one device waiting for ``step()``: call ``i`` of key ``keys[i]`` is
    ``sizes[i]`` values, one call after another in a float64 buffer (grown, reused)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.keys: list[int] = []
        self.sizes: list[int] = []
        self._used = 0
        self._buffer = torch.empty(0, dtype=torch.float64, device=device)
        self._host: np.ndarray | None = None  # the buffer's numpy view, on a CPU
        self._rows: tuple[tuple, torch.Tensor] | None = None

    def __len__(self) -> int:
        return self._used

    def add(self, key: int, value: torch.Tensor) -> bool:
        """Copy ``value`` (flat, real: a complex one as its magnitude) as one call of ``key``;
        ``False`` (nothing copied) when it does not fit :data:`CAPACITY`."""
        n = value.numel()
        start, end = self._used, self._used + n
        if end > len(self._buffer):
            if end > CAPACITY:
                return False
            self._grow(end)
        v = real_values(value)
        if self._host is not None and v.dtype in _NUMPY_DTYPES and not v.is_neg():
            a = v.numpy()
            np.copyto(self._host[start:end].reshape(a.shape), a)
        else:
            self._buffer[start:end].view(v.shape).copy_(v)
        self.keys.append(key)
        self.sizes.append(n)
        self._used = end
        return True

    def drop(self, key: int) -> None:
        """Forget every call of ``key`` (the others move up, in order)."""
        if key not in self.keys:
            return
        kept, at = [], 0
        for k, n in zip(self.keys, self.sizes, strict=True):
            if k != key:
                kept.append((k, at, n))
            at += n
        if kept:
            values = torch.cat([self._buffer[s : s + n] for _, s, n in kept])
            self._buffer[: len(values)].copy_(values)
        self.keys = [k for k, _, _ in kept]
        self.sizes = [n for _, _, n in kept]
        self._used = sum(self.sizes)

    def reduce(
        self,
        sums: torch.Tensor,
        maxes: torch.Tensor,
        centres: np.ndarray,
        work: Workspace | None = None,
    ) -> None:
        """Add every call's statistics into its key's row of ``sums`` / ``maxes``; empty the
        batch. ``centres``: each key's bucket centre (see :func:`.accumulate.accumulate`)."""
        if not self.keys:
            return
        n = self._used
        on_host = self._host is not None and sums.device.type == "cpu"
        if on_host and calls(sums, maxes, self._host[:n], self.keys, self.sizes, centres):
            pass
        elif on_host and n <= HOST_BATCH:
            accumulate_calls(sums.numpy(), maxes.numpy(), self._host[:n], np.array(self.keys),
                             np.array(self.sizes), centres)  # fmt: skip
        else:
            centre = torch.from_numpy(centres).to(self.device)
            accumulate(sums, maxes, self._buffer[:n], self._row_of_each(), centre, work)
        self.keys, self.sizes, self._used = [], [], 0

    def _row_of_each(self) -> torch.Tensor:
        """The key of each value (kept: the same layers batch the same sizes each step)."""
        layout = (tuple(self.keys), tuple(self.sizes))
        if self._rows is None or self._rows[0] != layout:
            rows = np.repeat(self.keys, self.sizes)
            self._rows = (layout, torch.from_numpy(rows).to(self.device))
        return self._rows[1]

    def _grow(self, size: int) -> None:
        size = min(CAPACITY, max(size, 2 * len(self._buffer), 1024))
        grown = torch.empty(size, dtype=torch.float64, device=self.device)
        grown[: self._used].copy_(self._buffer[: self._used])
        self._buffer = grown
        self._host = grown.numpy() if self.device.type == "cpu" else None
