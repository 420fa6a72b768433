"""Device-side accumulation of one tensor into its key's bucket rows (no host sync, no collective).

Every value is reduced where it lives, in float64: counts, the sum, the sum of squares centred
on this call's own mean (``m2``) and ``sum**2 / n`` (which the merge needs to combine centred
sums exactly), exact finite min/max, NaN/Inf/zero counts, and a histogram over the key's
shared edges with underflow/overflow counts. NaN edges (no range known yet) count no bins.

>>> import torch
>>> from surgeon_widgets.record.layout import MAX_WIDTH, SUM_WIDTH, FINITE, NANS, UNDER, HIST
>>> s = torch.zeros(SUM_WIDTH, dtype=torch.float64)
>>> m = torch.full((MAX_WIDTH,), float("-inf"), dtype=torch.float64)
>>> accumulate(s, m, torch.tensor([0.0, 1.0, 2.0, float("nan")]), torch.tensor([0.5, 2.5]))
>>> int(s[FINITE]), int(s[NANS]), int(s[UNDER]), int(s[HIST:].sum()), float(m[0]), -float(m[1])
(3, 1, 1, 2, 2.0, 0.0)
"""

from __future__ import annotations

import torch

from .layout import BINS, DIMS, HIST, MAX_DIMS, MAX_WIDTH, NDIM, dtype_code

__all__ = ["accumulate"]


def accumulate(sums: torch.Tensor, maxes: torch.Tensor, value: torch.Tensor, edges: torch.Tensor) -> None:
    """Add ``value``'s statistics into ``sums`` (a sum-bucket row) and ``maxes`` (a max row)."""
    v = value.detach()
    shape = torch.full((MAX_WIDTH - NDIM,), -1.0, dtype=torch.float64)
    shape[0] = v.dim()
    dims = list(v.shape)[:MAX_DIMS]
    shape[1 : 1 + len(dims)] = torch.tensor(dims, dtype=torch.float64)
    shape[-1] = dtype_code(v.dtype)
    x = v.reshape(-1)
    if x.is_complex():
        x = x.abs()
    x = x.to(torch.float64)
    device = x.device
    if x.numel() == 0:
        head = torch.zeros(HIST, dtype=torch.float64, device=device)
        head[1] = 1.0  # a call, no values
        sums[:HIST].add_(head.to(sums.device))
        maxes[NDIM:].copy_(torch.maximum(maxes[NDIM:], shape.to(maxes.device)))
        return
    finite = torch.isfinite(x)
    n = finite.sum(dtype=torch.float64)
    nans = torch.isnan(x).sum(dtype=torch.float64)
    xf = torch.where(finite, x, 0.0)
    total = xf.sum()
    mean = total / n.clamp(min=1.0)
    d = torch.where(finite, x - mean, 0.0)
    m2 = d.square().sum()
    lo, hi = edges[0].to(device), edges[1].to(device)
    index = ((xf - lo) * (BINS / (hi - lo))).floor()
    under = (finite & (index < 0)).sum(dtype=torch.float64)
    over = (finite & (index >= BINS)).sum(dtype=torch.float64)
    inside = finite & (index >= 0) & (index < BINS)
    bins = index.nan_to_num(0.0).clamp(0, BINS - 1).long()
    hist = torch.zeros(BINS, dtype=torch.float64, device=device).index_add_(0, bins, inside.double())
    numel = float(x.numel())
    head = torch.stack([
        torch.ones((), dtype=torch.float64, device=device),  # has data (set again in step())
        torch.ones((), dtype=torch.float64, device=device),  # calls
        torch.full((), numel, dtype=torch.float64, device=device),
        n, nans, numel - n - nans, (x == 0).sum(dtype=torch.float64),
        total, m2, total * total / n.clamp(min=1.0), under, over,
    ])  # fmt: skip
    sums.add_(torch.cat([head, hist]).to(sums.device))
    top = torch.where(finite, x, float("-inf")).max()
    bottom = torch.where(finite, x, float("inf")).min()
    extremes = torch.stack([top, -bottom]).to(maxes.device)
    maxes[:DIMS - 1].copy_(torch.maximum(maxes[:DIMS - 1], extremes))
    maxes[NDIM:].copy_(torch.maximum(maxes[NDIM:], shape.to(maxes.device)))
