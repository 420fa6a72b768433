"""Device-side accumulation of float64 values into their keys' bucket rows (no sync, no collective).

One call reduces a batch of values, each tagged with its key's row (``rows``; ``None``: every
value goes to the single row given): finite/NaN/zero counts, the float64 sum, the sum of squares
centred on each row's own mean in this batch (``m2``) and ``sum**2 / n`` (which the merge needs
to combine centred sums exactly), exact finite min/max, and the fixed log-spaced buckets
(:mod:`.buckets`). The number of tensor operations does not depend on how many keys are in
the batch, which is what keeps the recorder's cost per key small: about thirty plain torch calls,
the same on every device (nothing compiled, no thread of ours), every temporary in a reused
:class:`Workspace` (fresh multi-megabyte CPU tensors page-fault on every call and cost more than
the arithmetic). Counts that the host knows (calls, numel, shapes, modes) are not accumulated
here.

>>> import torch
>>> from surgeon_widgets.record.layout import MAX_WIDTH, SUM_WIDTH, FINITE, NANS, HIST
>>> s = torch.zeros(2, SUM_WIDTH, dtype=torch.float64)
>>> m = torch.full((2, MAX_WIDTH), float("-inf"), dtype=torch.float64)
>>> x = torch.tensor([0.0, 1.0, 2.0, float("nan"), 5.0], dtype=torch.float64)
>>> accumulate(s, m, x, torch.tensor([0, 0, 0, 0, 1]), torch.zeros(2, dtype=torch.float64))
>>> s[:, FINITE].tolist(), s[:, NANS].tolist(), s[:, HIST:].sum(1).tolist()
([3.0, 1.0], [1.0, 0.0], [3.0, 1.0])
>>> m[:, 0].tolist(), (-m[:, 1]).tolist()  # max, min
([2.0, 5.0], [0.0, 5.0])
"""

from __future__ import annotations

import numpy as np
import torch

from .buckets import BUCKETS, bucket_index, bucket_index_numpy
from .layout import FINITE, HIST, M2, MAX, NANS, NEG_MIN, SQ, SUM, ZEROS

__all__ = ["Workspace", "accumulate", "accumulate_calls", "real_values"]

INF = float("inf")


def real_values(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached and real (a complex tensor as its magnitude), in its own shape."""
    v = t.detach()
    return v.abs() if v.is_complex() else v


class Workspace:
    """Reused buffers per (device, dtype, slot), grown to the largest batch seen."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[torch.device, torch.dtype, int], torch.Tensor] = {}

    def get(self, n: int, dtype: torch.dtype, device: torch.device, slot: int = 0) -> torch.Tensor:
        key = (device, dtype, slot)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < n:
            buffer = self._buffers[key] = torch.empty(max(n, 1024), dtype=dtype, device=device)
        return buffer[:n]


def accumulate(
    sums: torch.Tensor,
    maxes: torch.Tensor,
    x: torch.Tensor,
    rows: torch.Tensor | None,
    centre: torch.Tensor | float = 0.0,
    work: Workspace | None = None,
) -> None:
    """Add the statistics of ``x`` (flat float64) into ``sums`` / ``maxes`` rows, in place.

    ``rows[i]`` is the row of ``x[i]`` (int64, on ``x``'s device); with ``rows=None`` the
    buckets have one row and every value belongs to it. The buckets are of ``x - centre``
    (``centre``: one float64 per row, or a float with ``rows=None``): log-spaced buckets
    resolve values relative to their distance from the centre, so a centre near the values'
    mean resolves them relative to their spread. ``x`` is left as it was.
    """
    k = len(sums)
    new, extremes, index = _reduce(x, rows, centre, k, work or Workspace())
    hist = _count(index, k * (BUCKETS + 1)).view(k, BUCKETS + 1)[:, :BUCKETS]
    sums[:, FINITE : SQ + 1].add_(new.to(sums.device))
    sums[:, HIST : HIST + BUCKETS].add_(hist.to(sums.device))  # int64 counts, added as floats
    torch.maximum(maxes[:, MAX : NEG_MIN + 1], extremes.to(maxes.device),
                  out=maxes[:, MAX : NEG_MIN + 1])  # fmt: skip


def accumulate_calls(
    sums: np.ndarray,
    maxes: np.ndarray,
    x: np.ndarray,
    keys: np.ndarray,
    sizes: np.ndarray,
    centres: np.ndarray,
) -> None:
    """:func:`accumulate` on the host for a batch of small calls, in numpy, in place.

    ``x`` (float64) holds the calls' values one after another: call ``i`` is ``sizes[i]`` (> 0)
    values of key ``keys[i]``. A numpy call costs a fraction of a torch call, and each
    reduction is one pass per call (``reduceat``) then one add per call into its key; the
    buckets are added where values fell (``add.at``), not over every bucket of every key.
    """
    k = len(sums)
    starts = np.cumsum(sizes) - sizes
    rows = np.repeat(keys, sizes)  # the key of each value
    with np.errstate(all="ignore"):  # inf - inf, overflowing float32 casts: handled below
        finite = np.isfinite(x)

        def per_key(values: np.ndarray) -> np.ndarray:
            return np.bincount(keys, np.add.reduceat(values, starts, dtype=np.float64), k)

        n = per_key(finite)
        total = per_key(np.where(finite, x, 0.0))
        held = np.maximum(n, 1.0)
        mean = total / held
        d = np.where(finite, x - mean[rows], 0.0)
        sums[:, FINITE] += n
        sums[:, NANS] += per_key(np.isnan(x))
        sums[:, ZEROS] += per_key(x == 0)
        sums[:, SUM] += total
        sums[:, M2] += per_key(d * d)
        sums[:, SQ] += total * total / held
        high, low = np.where(finite, x, -INF), np.where(finite, -x, -INF)
        np.maximum.at(maxes[:, MAX], keys, np.maximum.reduceat(high, starts))
        np.maximum.at(maxes[:, NEG_MIN], keys, np.maximum.reduceat(low, starts))
        index = bucket_index_numpy(x - centres[rows]) + (rows * sums.shape[1] + HIST)
    if n.sum() < len(x):
        index = index[finite]
    flat = sums.view()
    flat.shape = -1  # raises for a non-contiguous ``sums`` (a reshape would add into a copy)
    np.add.at(flat, index, 1.0)


def _reduce(
    x: torch.Tensor, rows: torch.Tensor | None, centre: torch.Tensor | float, k: int,
    work: Workspace,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(new [k, 6], extremes [k, 2], bucket of each value)`` in reused buffers, where ``new``
    is ``[n, nans, zeros, total, m2, total² / n]`` and ``extremes`` is ``[max, -min]``."""
    n_values, device = x.numel(), x.device

    def buffer(dtype: torch.dtype, slot: int = 0) -> torch.Tensor:
        return work.get(n_values, dtype, device, slot)

    f1, f2 = buffer(torch.float64, 1), buffer(torch.float64, 2)
    finite, flag, bad = buffer(torch.bool, 1), buffer(torch.bool, 2), buffer(torch.bool, 3)
    torch.lt(torch.abs(x, out=f1), INF, out=finite)  # NaN < inf is False too
    torch.logical_not(finite, out=bad)

    def per_row(values: torch.Tensor) -> torch.Tensor:  # [k] float64 sums
        # bool -> float64 casts are slow paths (ten times a sum): count, or fill a buffer
        if rows is None:
            if values.dtype == torch.bool:
                return torch.count_nonzero(values).to(torch.float64).view(1)
            return values.sum().view(1)
        if values.dtype == torch.bool:
            values = f2.zero_().masked_fill_(values, 1.0)
        if device.type == "cpu":  # index_add_ is a loop over values on the CPU; bincount is not
            return torch.bincount(rows, weights=values, minlength=k)
        return torch.zeros(k, dtype=torch.float64, device=device).index_add_(0, rows, values)

    n = per_row(finite)
    nans = per_row(torch.ne(x, x, out=flag))
    zeros = per_row(torch.eq(x, 0.0, out=flag))
    total = per_row(f1.copy_(x).masked_fill_(bad, 0.0))
    mean = total / n.clamp(min=1.0)
    d = f1.sub_(mean if rows is None else torch.index_select(mean, 0, rows, out=f2))
    m2 = per_row(d.masked_fill_(bad, 0.0).mul_(d))  # x - mean, 0 where x is not finite, squared
    new = torch.stack([n, nans, zeros, total, m2, total * total / n.clamp(min=1.0)], 1)
    # max and -min of the finite values (-inf where there are none)
    high = f1.copy_(x).masked_fill_(bad, -INF)
    low = torch.neg(x, out=f2).masked_fill_(bad, -INF)
    if rows is None:
        extremes = torch.stack([high.amax(), low.amax()]).view(1, 2)
    else:
        extremes = torch.full((2, k), -INF, dtype=torch.float64, device=device)
        extremes[0].scatter_reduce_(0, rows, high, "amax")
        extremes[1].scatter_reduce_(0, rows, low, "amax")
        extremes = extremes.T
    if rows is None:
        shifted = torch.sub(x, centre, out=f1)
    else:
        shifted = torch.sub(x, torch.index_select(centre, 0, rows, out=f1), out=f1)
    index = bucket_index(shifted, bad, buffer(torch.float32), buffer(torch.int32, 1),
                         buffer(torch.int32, 2))  # fmt: skip
    if rows is not None:  # row r's buckets are r * (BUCKETS + 1) + ...
        index = torch.add(index, rows, alpha=BUCKETS + 1, out=buffer(torch.int64))
    return new, extremes, index


def _count(index: torch.Tensor, size: int) -> torch.Tensor:
    """How often each of ``size`` values occurs in ``index``."""
    if index.device.type == "cpu":  # bincount is the fastest count on the CPU
        return torch.bincount(index, minlength=size)
    # bincount sizes its output from the data, which syncs on accelerators; index_add does not
    ones = torch.ones(1, dtype=torch.int64, device=index.device).expand(index.numel())
    return torch.zeros(size, dtype=torch.int64, device=index.device).index_add_(0, index, ones)
