"""Merge the reduced buckets into one record per key.

The buckets hold sums over every call on every rank (``sum`` bucket) and maxima (``max``
bucket), so a record is the statistics of all ranks' values together:

- ``mean = S / N`` and ``m2 = sum(m2_c) + sum(s_c**2 / n_c) - S**2 / N`` (the centred sums of
  the calls, combined by the law of total variance in float64), ``std = sqrt(m2 / (N - 1))``;
- ``l2 = sqrt(sum(m2_c) + sum(s_c**2 / n_c))``: the sum of squares, from the same sums;
- min/max and NaN/Inf/zero counts exact;
- the display histogram: the merged log-spaced buckets re-binned over ``[min, max]``
  (:func:`~.buckets.rebin`), so it covers every finite value of this record but the exact
  zeros (``zeros``: a bar of their own); the buckets are centred on the key's previous mean
  (:func:`next_centres`), the same on every rank;
- ``mode``: 0 when only training forwards (or gradients, parameters) fed the record, 1 when
  only eval forwards did, 2 when ranks differed.

>>> import numpy as np
>>> from surgeon_widgets.record.layout import SUM_WIDTH, MAX_WIDTH, FIELDS
>>> sums, maxes = np.zeros((1, SUM_WIDTH)), np.full((1, MAX_WIDTH), -np.inf)
>>> sums[0, :10] = [2, 2, 4, 0, 4, 0, 0, 10.0, 1.0, 29.0]  # two calls: [1, 2] and [3, 4]
>>> maxes[0, :4] = [4.0, -1.0, 1.0, 0.0]
>>> rows, _ = merge(sums, maxes, np.zeros(1))
>>> r = dict(zip(FIELDS, rows[0].tolist()))
>>> r["mean"], r["m2"], r["min"], r["max"], r["l2"] ** 2, r["mode"]
(2.5, 5.0, 1.0, 4.0, 30.0, 0.0)
"""

from __future__ import annotations

import numpy as np

from .accumulate_native import rebin as rebin_native
from .buckets import rebin
from .layout import (
    BINS,
    CALLS,
    DIMS,
    DTYPE,
    EVALED,
    EVALS,
    FIELDS,
    FINITE,
    HAS,
    HIST,
    M2,
    MAX,
    MAX_DIMS,
    NANS,
    NDIM,
    NEG_MIN,
    NUMEL,
    SQ,
    SUM,
    TRAINED,
    ZEROS,
)  # fmt: skip

__all__ = ["display_bins", "merge", "next_centres"]

F = {name: i for i, name in enumerate(FIELDS)}


def merge(
    sums: np.ndarray, maxes: np.ndarray, centres: np.ndarray | None, histograms: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(rows[K, len(FIELDS)], hists[K, BINS])`` from the reduced buckets (one row per key).

    ``centres``: the value each key's buckets were centred on (:func:`~.accumulate.accumulate`).
    ``histograms=False``: ``hists`` is ``None`` (a rank that writes nothing needs only the rows).
    """
    k = len(sums)
    rows = np.zeros((k, len(FIELDS)))
    n = sums[:, FINITE]
    total = sums[:, SUM]
    has = n > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(has, total / n, np.nan)
        between = np.where(has, sums[:, SQ] - total * total / n, 0.0)
    low = np.where(has, -maxes[:, NEG_MIN], np.nan)
    high = np.where(has, maxes[:, MAX], np.nan)
    rows[:, F["ranks"]] = sums[:, HAS]
    rows[:, F["calls"]] = sums[:, CALLS]
    rows[:, F["numel"]] = sums[:, NUMEL]
    rows[:, F["finite"]] = n
    rows[:, F["nans"]] = sums[:, NANS]
    rows[:, F["infs"]] = sums[:, NUMEL] - n - sums[:, NANS]
    rows[:, F["zeros"]] = sums[:, ZEROS]
    rows[:, F["mean"]] = mean
    rows[:, F["m2"]] = sums[:, M2] + np.maximum(between, 0.0)
    rows[:, F["min"]] = low
    rows[:, F["max"]] = high
    rows[:, F["lo"]] = low
    rows[:, F["hi"]] = high
    rows[:, F["ndim"]] = maxes[:, NDIM]
    rows[:, F["dim0"] : F["dim0"] + MAX_DIMS] = maxes[:, DIMS : DIMS + MAX_DIMS]
    rows[:, F["dtype"]] = maxes[:, DTYPE]
    rows[:, F["l2"]] = np.where(has, np.sqrt(np.maximum(sums[:, M2] + sums[:, SQ], 0.0)), np.nan)
    rows[:, F["eval_calls"]] = sums[:, EVALS]
    trained, evaled = maxes[:, TRAINED] > 0, maxes[:, EVALED] > 0
    rows[:, F["mode"]] = np.where(trained & evaled, 2.0, np.where(evaled, 1.0, 0.0))
    return rows, display_bins(sums, maxes, centres) if histograms else None


def display_bins(
    sums: np.ndarray, maxes: np.ndarray, centres: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """``[K, BINS]``: each key's merged buckets re-binned over its ``[min, max]``, exact zeros
    left out (:func:`~.buckets.rebin`; in C where it is built, reading only the buckets in that
    range)."""
    out = np.empty((len(sums), BINS)) if out is None else out
    if rebin_native(sums, maxes, centres, out):
        return out
    n = sums[:, FINITE]
    has = n > 0
    low = np.where(has, -maxes[:, NEG_MIN], np.nan)
    high = np.where(has, maxes[:, MAX], np.nan)
    out[...] = rebin(sums, low, high, centres, BINS, column=HIST, total=n, zeros=sums[:, ZEROS])
    return out


def next_centres(sums: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Bucket centres for the next record, from the reduced sum bucket: this record's mean,
    kept where it has none (every rank computes the same from the same reduced sums)."""
    n = sums[:, FINITE]
    return np.divide(sums[:, SUM], n, out=centres.copy(), where=n > 0)
