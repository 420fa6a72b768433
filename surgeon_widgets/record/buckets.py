"""Fixed log-spaced histogram buckets: every finite value is counted, whatever its range.

A value's bucket is read from its float32 bits: the sign, the exponent and the top
:data:`SUB_BITS` mantissa bits, so each octave ``[2^e, 2^(e+1))`` has ``2^SUB_BITS`` buckets
(a bucket spans at most 1/8 of its lower edge: a bounded relative error, as in DDSketch or
Prometheus native histograms). Magnitudes from ``2^E_LOW`` to ``2^E_HIGH`` are resolved; smaller
ones share the zero bucket, larger ones the outermost bucket of their sign. The edges do not
depend on the data, so buckets from every call and rank merge by addition, exactly, and no
record waits for a range learnt from an earlier one.

For display, :func:`rebin` spreads the merged counts over :data:`~.layout.BINS` equal bins
between the record's exact min and max, each bucket's count uniformly over its span (clamped
to ``[min, max]``): every finite value lands inside the display bins.

>>> import torch
>>> x = torch.tensor([-3.0, 0.0, 1.0, 1.0, 2.5, float("nan")])
>>> counts = torch.bincount(bucket_index(x, ~torch.isfinite(x)), minlength=BUCKETS + 1)
>>> int(counts[:BUCKETS].sum()), int(counts[BUCKETS])  # NaN goes to the spare bucket
(5, 1)
>>> one = np.array([1.0])
>>> hist = rebin(counts[None, :BUCKETS].double().numpy(), -3 * one, 2.5 * one, 0 * one)
>>> float(hist.sum()), hist.shape
(5.0, (1, 64))
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["BUCKETS", "EDGES", "E_HIGH", "E_LOW", "SUB_BITS", "bucket_index", "rebin"]

SUB_BITS = 3
E_LOW, E_HIGH = -64, 32  # resolved magnitudes: [2^-64, 2^32)
_SHIFT = 23 - SUB_BITS  # float32 mantissa bits below the kept ones
_LOW = (E_LOW + 127) << SUB_BITS  # (biased exponent, top mantissa bits) of the first bucket
SIDE = (E_HIGH - E_LOW) << SUB_BITS  # buckets per sign
BUCKETS = 2 * SIDE + 1  # negative ones (descending magnitude), the zero bucket, positive ones

# |value| edges of one side's buckets: float32 numbers whose low mantissa bits are zero
_MAG = (((np.arange(SIDE + 1) + _LOW) << _SHIFT).astype(np.int32)).view(np.float32)
EDGES = np.concatenate([-_MAG[::-1], _MAG]).astype(np.float64)  # bucket j spans EDGES[j:j+2]


def bucket_index(
    x: torch.Tensor,
    bad: torch.Tensor,
    f32: torch.Tensor | None = None,
    sign: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bucket of each value of ``x`` (int32, on its device); those where ``bad`` (the
    non-finite ones) get ``BUCKETS``.

    ``f32`` (float32), ``sign`` and ``out`` (int32) are optional buffers of ``x``'s size.
    """
    f32 = x.to(torch.float32) if f32 is None else f32.copy_(x)
    bits = f32.view(torch.int32)
    sign = torch.bitwise_right_shift(bits, 31, out=sign)  # -1 for negative values (and -0.0)
    q = torch.bitwise_and(bits, 0x7FFFFFFF, out=out)
    q.bitwise_right_shift_(_SHIFT)  # exponent and top mantissa bits: monotone in |x|
    q.sub_(_LOW - 1).clamp_(0, SIDE)  # 0: the zero bucket; 1..SIDE: the side's buckets
    q.bitwise_xor_(sign).sub_(sign)  # -q for negative values (two's complement)
    return q.add_(SIDE).masked_fill_(bad, BUCKETS)


def rebin(
    counts: np.ndarray, lo: np.ndarray, hi: np.ndarray, centre: np.ndarray, bins: int = 64
) -> np.ndarray:
    """``[K, bins]`` equal bins over ``[lo, hi]`` per row from ``[K, BUCKETS]`` bucket counts.

    Row ``k``'s buckets are of ``value - centre[k]``. Bins hold whole counts (the cdf at the
    edges, rounded), summing to the row's count. A row with ``lo == hi`` has every count in
    bin 0; a row with no finite ``lo`` is all zeros.
    """
    k = len(counts)
    ok = np.isfinite(lo) & np.isfinite(hi)
    lo, hi = np.where(ok, lo, 0.0), np.where(ok, hi, 0.0)
    edges = (lo - centre)[:, None] + (hi - lo)[:, None] * (np.arange(bins + 1) / bins)
    # the bucket each display edge falls in, and how far across it
    # (np.minimum / np.maximum: np.clip costs more than the arithmetic on these small arrays)
    j = np.minimum(np.maximum(np.searchsorted(EDGES, edges, side="right") - 1, 0), BUCKETS - 1)
    start, width = EDGES[j], EDGES[j + 1] - EDGES[j]
    frac = np.minimum(np.maximum((edges - start) / width, 0.0), 1.0)
    # whole buckets between consecutive edges: one reduceat over the flat counts (a cumsum
    # over every bucket of every row costs ten times more)
    flat = np.ascontiguousarray(counts).ravel()
    starts = (np.arange(k) * BUCKETS)[:, None]
    at = np.concatenate([starts, starts + j], axis=1).ravel()
    spans = np.add.reduceat(flat, at).reshape(k, bins + 2)
    spans[:, 1:-1][j[:, 1:] == j[:, :-1]] = 0.0  # reduceat gives a[i] for an empty span
    below = np.cumsum(spans[:, :-1], axis=1)  # counts in buckets before each edge's bucket
    rows = np.arange(k)[:, None]
    cdf = below + counts[rows, j] * frac
    total = counts.sum(axis=1)
    cdf[:, 0], cdf[:, -1] = 0.0, total  # clamped: every value is inside [lo, hi]
    # whole counts: the rounded cdf keeps the total and never decreases
    hist = np.diff(np.round(cdf), axis=1)
    flat_rows = hi == lo
    hist[flat_rows] = 0.0
    hist[flat_rows, 0] = total[flat_rows]
    hist[~ok] = 0.0
    return hist
