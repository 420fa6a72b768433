"""Merge the reduced buckets into one record per key, and the next histogram edges.

The buckets hold sums over every call on every rank (``sum`` bucket) and maxima (``max``
bucket), so a record is the statistics of all ranks' values together:

- ``mean = S / N`` and ``m2 = sum(m2_c) + sum(s_c**2 / n_c) - S**2 / N`` (the centred sums of
  the calls, combined by the law of total variance in float64), ``std = sqrt(m2 / (N - 1))``;
- min/max and NaN/Inf/zero counts exact;
- the histogram over edges identical on every rank, with underflow/overflow counts.

The next edges are this record's global range widened by ``WIDEN`` of its span on each side.

>>> import numpy as np
>>> from surgeon_widgets.record.layout import SUM_WIDTH, MAX_WIDTH
>>> sums, maxes = np.zeros((1, SUM_WIDTH)), np.full((1, MAX_WIDTH), -np.inf)
>>> sums[0, :10] = [2, 2, 4, 4, 0, 0, 0, 10.0, 1.0, 29.0]  # two calls: [1, 2] and [3, 4]
>>> maxes[0, :2] = [4.0, -1.0]
>>> rows, _ = merge(sums, maxes)
>>> float(rows[0, 7]), float(rows[0, 8]), float(rows[0, 9]), float(rows[0, 10])  # mean m2 min max
(2.5, 5.0, 1.0, 4.0)
>>> next_edges(rows, np.full((1, 2), np.nan)).round(2).tolist()
[[0.85, 4.15]]
"""

from __future__ import annotations

import numpy as np

from .layout import (
    BINS,
    CALLS,
    DIMS,
    DTYPE,
    FIELDS,
    FINITE,
    HAS,
    HIST,
    INFS,
    M2,
    MAX,
    MAX_DIMS,
    NANS,
    NDIM,
    NEG_MIN,
    NUMEL,
    OVER,
    SQ,
    SUM,
    UNDER,
    ZEROS,
)  # fmt: skip

__all__ = ["WIDEN", "merge", "next_edges"]

WIDEN = 0.05
F = {name: i for i, name in enumerate(FIELDS)}


def merge(
    sums: np.ndarray, maxes: np.ndarray, edges: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows[K, len(FIELDS)], hists[K, BINS])`` from the reduced buckets (one row per key)."""
    k = len(sums)
    edges = np.full((k, 2), np.nan) if edges is None else edges
    rows = np.zeros((k, len(FIELDS)))
    n = sums[:, FINITE]
    total = sums[:, SUM]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, total / n, np.nan)
        between = np.where(n > 0, sums[:, SQ] - total * total / n, 0.0)
    rows[:, F["ranks"]] = sums[:, HAS]
    rows[:, F["calls"]] = sums[:, CALLS]
    rows[:, F["numel"]] = sums[:, NUMEL]
    rows[:, F["finite"]] = n
    rows[:, F["nans"]] = sums[:, NANS]
    rows[:, F["infs"]] = sums[:, INFS]
    rows[:, F["zeros"]] = sums[:, ZEROS]
    rows[:, F["mean"]] = mean
    rows[:, F["m2"]] = sums[:, M2] + np.maximum(between, 0.0)
    rows[:, F["min"]] = np.where(n > 0, -maxes[:, NEG_MIN], np.nan)
    rows[:, F["max"]] = np.where(n > 0, maxes[:, MAX], np.nan)
    rows[:, F["lo"]] = edges[:, 0]
    rows[:, F["hi"]] = edges[:, 1]
    rows[:, F["under"]] = sums[:, UNDER]
    rows[:, F["over"]] = sums[:, OVER]
    rows[:, F["ndim"]] = maxes[:, NDIM]
    rows[:, F["dim0"] : F["dim0"] + MAX_DIMS] = maxes[:, DIMS : DIMS + MAX_DIMS]
    rows[:, F["dtype"]] = maxes[:, DTYPE]
    return rows, sums[:, HIST : HIST + BINS].copy()


def next_edges(rows: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Edges for the next record: this global range widened a little; kept where no data came."""
    lo, hi = rows[:, F["min"]], rows[:, F["max"]]
    span = hi - lo
    pad = np.where(span > 0, span * WIDEN, np.maximum(np.abs(hi) * WIDEN, 1e-6))
    fresh = np.stack([lo - pad, hi + pad], axis=1)
    known = np.isfinite(fresh).all(axis=1, keepdims=True)
    return np.where(known, fresh, edges)
