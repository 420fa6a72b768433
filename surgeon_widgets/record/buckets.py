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
to ``[min, max]``): every finite value lands inside the display bins, except the exact zeros
when their count is given (shown as a bar of their own: a ReLU's half of zeros would flatten
the rest of the histogram).

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

__all__ = [
    "BUCKETS", "EDGES", "E_HIGH", "E_LOW", "SUB_BITS", "bucket_index", "bucket_index_numpy",
    "rebin",
]  # fmt: skip

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


def bucket_index_numpy(x: np.ndarray) -> np.ndarray:
    """:func:`bucket_index` of finite float64 values in numpy: the same rule, bit for bit
    (int64; a non-finite value's bucket is meaningless: leave it out)."""
    bits = x.astype(np.float32).view(np.int32).astype(np.int64)
    sign = bits >> 31
    q = np.minimum(np.maximum(((bits & 0x7FFFFFFF) >> _SHIFT) - (_LOW - 1), 0), SIDE)
    return (q ^ sign) - sign + SIDE


def rebin(
    counts: np.ndarray, lo: np.ndarray, hi: np.ndarray, centre: np.ndarray, bins: int = 64,
    column: int = 0, total: np.ndarray | None = None, zeros: np.ndarray | None = None,
) -> np.ndarray:
    """``[K, bins]`` equal bins over ``[lo, hi]`` per row from bucket counts.

    The buckets are ``counts[:, column : column + BUCKETS]`` (``counts`` C-contiguous: a
    recorder's whole sum bucket, read in place); row ``k``'s are of ``value - centre[k]``.
    ``total``: each row's count, where the caller knows it. Bins hold whole counts (the cdf at
    the edges, rounded), summing to the row's count. ``zeros``: each row's count of exact
    zeros, left out of the bins (taken from the bucket the recorder counted them in, that of
    ``float32(0 - centre)``). A row with ``lo == hi`` has every (non-zero) count in bin 0; a
    row with no finite ``lo`` is all zeros.
    """
    k, width = counts.shape
    ok = np.isfinite(lo) & np.isfinite(hi)
    lo, hi = np.where(ok, lo, 0.0), np.where(ok, hi, 0.0)
    edges = (lo - centre)[:, None] + (hi - lo)[:, None] * (np.arange(bins + 1) / bins)
    j = _bucket_of(edges)
    start, width_j = EDGES[j], EDGES[j + 1] - EDGES[j]
    frac = np.minimum(np.maximum((edges - start) / width_j, 0.0), 1.0)
    # whole buckets between consecutive edges: one reduceat over the flat counts (a cumsum
    # over every bucket of every row costs ten times more)
    flat = np.ascontiguousarray(counts).ravel()
    starts = (np.arange(k) * width + column)[:, None]
    at = np.concatenate([starts, starts + j], axis=1).ravel()
    spans = np.add.reduceat(flat, at).reshape(k, bins + 2)
    # reduceat gives a[i] for an empty span: the one below the first edge's bucket too
    spans[:, 1:-1][j[:, 1:] == j[:, :-1]] = 0.0
    spans[j[:, 0] == 0, 0] = 0.0
    below = np.cumsum(spans[:, :-1], axis=1)  # counts in buckets before each edge's bucket
    cdf = below + flat[starts + j] * frac
    if total is None:
        total = counts[:, column : column + BUCKETS].sum(axis=1)
    if zeros is not None:  # the zeros out of their bucket's share of the cdf (counts: read-only)
        with np.errstate(over="ignore", invalid="ignore"):  # a centre past float32: clamped
            z = bucket_index_numpy(0.0 - centre)[:, None]
        cdf -= zeros[:, None] * np.where(j > z, 1.0, np.where(j == z, frac, 0.0))
        total = total - zeros
    cdf[:, 0], cdf[:, -1] = 0.0, total  # clamped: every value is inside [lo, hi]
    # whole counts: the rounded cdf keeps the total and never decreases
    hist = np.diff(np.round(cdf), axis=1)
    flat_rows = hi == lo
    hist[flat_rows] = 0.0
    hist[flat_rows, 0] = total[flat_rows]
    hist[~ok] = 0.0
    return hist


def _bucket_of(edges: np.ndarray) -> np.ndarray:
    """The bucket ``j`` with ``EDGES[j] <= edge < EDGES[j + 1]`` of each finite float64 edge
    (clamped to the outermost): read from its float32 bits, then corrected where rounding to
    float32 crossed a bucket boundary (a binary search over the edges costs three times more)."""
    with np.errstate(over="ignore", invalid="ignore"):  # edges past float32's range: clamped
        j = np.minimum(np.maximum(bucket_index_numpy(edges), 0), BUCKETS - 1)
    j -= (edges < EDGES[j]) & (j > 0)
    j += (edges >= EDGES[j + 1]) & (j < BUCKETS - 1)
    return j
