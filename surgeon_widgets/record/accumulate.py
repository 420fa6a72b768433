"""Device-side accumulation of one tensor into its key's bucket rows (no host sync, no collective).

Every value is reduced where it lives, in float64: counts, the sum, the sum of squares centred
on this call's own mean (``m2``) and ``sum**2 / n`` (which the merge needs to combine centred
sums exactly), exact finite min/max, NaN/Inf/zero counts, and a histogram over the key's
shared edges with underflow/overflow counts. NaN edges (no range known yet) count no bins.
Every pass is over float64 values; sums never round to float32.

>>> import torch
>>> from surgeon_widgets.record.layout import MAX_WIDTH, SUM_WIDTH, FINITE, NANS, UNDER, HIST
>>> s = torch.zeros(SUM_WIDTH, dtype=torch.float64)
>>> m = torch.full((MAX_WIDTH,), float("-inf"), dtype=torch.float64)
>>> accumulate(s, m, torch.tensor([0.0, 1.0, 2.0, float("nan")]), (0.5, 2.5))
>>> int(s[FINITE]), int(s[NANS]), int(s[UNDER]), int(s[HIST:].sum()), float(m[0]), -float(m[1])
(3, 1, 1, 2, 2.0, 0.0)
"""

from __future__ import annotations

import functools
import math

import torch

from .layout import BINS, DIMS, HIST, MAX_DIMS, NDIM, dtype_code

__all__ = ["accumulate"]


def accumulate(
    sums: torch.Tensor, maxes: torch.Tensor, value: torch.Tensor, edges: tuple[float, float]
) -> None:
    """Add ``value``'s statistics into ``sums`` (a sum-bucket row) and ``maxes`` (a max row).

    ``edges`` are host floats (known to every rank after the previous record), so choosing the
    bins never syncs with the device.
    """
    v = value.detach()
    shape = _shape_row(tuple(v.shape), v.dtype, maxes.device)
    torch.maximum(maxes[NDIM:], shape, out=maxes[NDIM:])
    x = v.reshape(-1)
    if x.is_complex():
        x = x.abs()
    x = x.to(torch.float64)
    device = x.device
    if x.numel() == 0:
        head = torch.zeros(HIST, dtype=torch.float64, device=device)
        head[1] = 1.0  # a call, no values
        sums[:HIST].add_(head.to(sums.device))
        return
    numel = float(x.numel())
    finite = torch.isfinite(x)
    n = finite.sum(dtype=torch.float64)
    nans = torch.isnan(x).sum(dtype=torch.float64)
    bad = numel - n
    zeros = numel - torch.count_nonzero(x).to(torch.float64)
    total = torch.where(finite, x, 0.0).sum()
    mean = total / n.clamp(min=1.0)
    # non-finite values take the mean: they add nothing to m2 and stay inside [min, max]
    xm = torch.where(finite, x, mean)
    low, high = torch.aminmax(xm)
    d = xm - mean
    m2 = torch.dot(d, d)
    lo, hi = edges
    hist = torch.zeros(BINS, dtype=torch.float64, device=device)
    under = over = torch.zeros((), dtype=torch.float64, device=device)
    if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
        scale = BINS / (hi - lo)
        index = d.copy_(xm).sub_(lo).mul_(scale).floor_()
        mean_index = ((mean - lo) * scale).floor()
        raw_under = (index < 0).sum(dtype=torch.float64)
        raw_over = (index >= BINS).sum(dtype=torch.float64)
        index = index.clamp_(0, BINS - 1)
        if device.type == "cpu":  # uint8 bincount: the fastest count on CPU
            hist = torch.bincount(index.to(torch.uint8), minlength=BINS).double()
        else:  # bincount sizes its output from the data, which syncs; scatter does not
            ones = torch.ones(1, dtype=torch.float64, device=device).expand(index.numel())
            hist = torch.zeros(BINS, dtype=torch.float64, device=device)
            hist.scatter_add_(0, index.long(), ones)
        # clamped values sit in the end bins, and the non-finite ones where the mean falls
        hist[0] -= raw_under
        hist[-1] -= raw_over
        inside = (mean_index >= 0) & (mean_index < BINS)
        hist.index_add_(0, mean_index.clamp(0, BINS - 1).long().view(1), (-bad * inside).view(1))
        under = raw_under - bad * (mean_index < 0)
        over = raw_over - bad * (mean_index >= BINS)
    one = torch.ones((), dtype=torch.float64, device=device)
    head = torch.stack([
        one, one,  # has data (set again in step()), calls
        torch.full((), numel, dtype=torch.float64, device=device),
        n, nans, bad - nans, zeros, total, m2, total * total / n.clamp(min=1.0), under, over,
    ])  # fmt: skip
    sums.add_(torch.cat([head, hist]).to(sums.device))
    # with no finite value, aminmax saw only the mean's NaN: contribute -inf
    extremes = torch.stack([high, -low]).nan_to_num_(float("-inf"), float("-inf"), float("-inf"))
    torch.maximum(maxes[: DIMS - 1], extremes.to(maxes.device), out=maxes[: DIMS - 1])


@functools.lru_cache(maxsize=1024)
def _shape_row(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[ndim, dims (-1 padded), dtype code]`` for the max bucket (cached: shapes repeat)."""
    dims = list(shape[:MAX_DIMS]) + [-1] * (MAX_DIMS - min(len(shape), MAX_DIMS))
    return torch.tensor([len(shape), *dims, dtype_code(dtype)], dtype=torch.float64, device=device)
