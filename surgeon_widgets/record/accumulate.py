"""Device-side accumulation of float64 values into their keys' bucket rows (no sync, no collective).

One call reduces a batch of values, each tagged with its key's row (``rows``; ``None``: every
value goes to the single row given): finite/NaN/zero counts, the float64 sum, the sum of squares
centred on each row's own mean in this batch (``m2``) and ``sum**2 / n`` (which the merge needs
to combine centred sums exactly), exact finite min/max, and the fixed log-spaced buckets
(:mod:`.buckets`). The number of tensor operations does not depend on how many keys are in
the batch, which is what keeps the recorder's cost per key small. Counts that the host knows
(calls, numel, shapes, modes) are not accumulated here.

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

import torch

from .buckets import BUCKETS, bucket_index
from .layout import FINITE, HIST, MAX, NEG_MIN, SQ

__all__ = ["accumulate", "flat_values"]

INF = float("inf")


def flat_values(t: torch.Tensor, copy: bool) -> torch.Tensor:
    """``t`` flat, detached, real (complex: its magnitude); ``copy``: safe from in-place edits.

    The copy keeps ``t``'s dtype: a same-dtype copy costs a third of a converting one on small
    tensors, and the batch converts to float64 once.
    """
    v = t.detach()
    if v.is_complex():
        return v.abs().reshape(-1)
    v = v.reshape(-1)
    return v.clone() if copy else v


def accumulate(
    sums: torch.Tensor,
    maxes: torch.Tensor,
    x: torch.Tensor,
    rows: torch.Tensor | None,
    centre: torch.Tensor | float = 0.0,
) -> None:
    """Add the statistics of ``x`` (flat float64) into ``sums`` / ``maxes`` rows, in place.

    ``rows[i]`` is the row of ``x[i]`` (int64, on ``x``'s device); with ``rows=None`` the
    buckets have one row and every value belongs to it. The buckets are of ``x - centre``
    (``centre``: one float64 per row, or a float with ``rows=None``): log-spaced buckets
    resolve values relative to their distance from the centre, so a centre near the values'
    mean resolves them relative to their spread.
    """
    k = len(sums)
    device = x.device
    finite = torch.isfinite(x)
    xf = x.masked_fill(~finite, 0.0)
    counts = torch.stack([finite, torch.isnan(x), x == 0], 1).to(torch.float64)
    first = torch.cat([counts, xf[:, None]], 1)  # finite, nans, zeros, sum
    first = _per_row(first, rows, k)
    n, total = first[:, 0], first[:, 3]
    mean = total / n.clamp(min=1.0)
    d = xf - (mean if rows is None else mean[rows])
    d.masked_fill_(~finite, 0.0)
    m2 = _per_row((d * d)[:, None], rows, k)[:, 0]
    sq = total * total / n.clamp(min=1.0)
    new = torch.cat([first, m2[:, None], sq[:, None]], 1)
    high = x.masked_fill(~finite, -INF)
    low = x.neg().masked_fill_(~finite, -INF)
    if rows is None:
        extremes = torch.stack([high.amax(), low.amax()]).view(1, 2)
    else:
        extremes = torch.full((k, 2), -INF, dtype=torch.float64, device=device)
        extremes[:, 0].scatter_reduce_(0, rows, high, "amax")
        extremes[:, 1].scatter_reduce_(0, rows, low, "amax")
    index = bucket_index(x - (centre if rows is None else centre[rows]), finite)
    if rows is not None:
        index = index.to(torch.int64).add_(rows * (BUCKETS + 1))
    hist = _count(index, k * (BUCKETS + 1)).view(k, BUCKETS + 1)[:, :BUCKETS]
    target = sums.device
    sums[:, FINITE : SQ + 1].add_(new.to(target))
    sums[:, HIST : HIST + BUCKETS].add_(hist.to(target, torch.float64))
    torch.maximum(maxes[:, MAX : NEG_MIN + 1], extremes.to(maxes.device),
                  out=maxes[:, MAX : NEG_MIN + 1])  # fmt: skip


def _per_row(values: torch.Tensor, rows: torch.Tensor | None, k: int) -> torch.Tensor:
    """``[k, C]`` column sums of ``values[N, C]`` per row (one row: a plain sum)."""
    if rows is None:
        return values.sum(0, keepdim=True)
    out = torch.zeros(k, values.shape[1], dtype=values.dtype, device=values.device)
    return out.index_add_(0, rows, values)


def _count(index: torch.Tensor, size: int) -> torch.Tensor:
    """How often each of ``size`` values occurs in ``index``."""
    if index.device.type == "cpu":  # bincount is the fastest count on the CPU
        return torch.bincount(index, minlength=size)
    # bincount sizes its output from the data, which syncs on accelerators; index_add does not
    ones = torch.ones(1, dtype=torch.int64, device=index.device).expand(index.numel())
    return torch.zeros(size, dtype=torch.int64, device=index.device).index_add_(0, index, ones)
