"""record.accumulate: a batch's numbers per key against a float64 reference and the host path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from surgeon_widgets.record import accumulate as acc
from surgeon_widgets.record import buckets
from surgeon_widgets.record.layout import (
    FINITE,
    HIST,
    M2,
    MAX,
    MAX_WIDTH,
    NANS,
    NEG_MIN,
    SQ,
    SUM,
    SUM_WIDTH,
    ZEROS,
)


def _values(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.relu(torch.randn(n, generator=g, dtype=torch.float64) * 3 + 0.5)  # zeros too
    x[3], x[11], x[17] = math.nan, math.inf, -math.inf
    return x


def _reference(x: np.ndarray, rows: np.ndarray, centres: np.ndarray, k: int):
    """Each key's numbers one key at a time, in float64 numpy: what ``accumulate`` adds."""
    sums, maxes = np.zeros((k, SUM_WIDTH)), np.full((k, MAX_WIDTH), -math.inf)
    for key in range(k):
        v = x[rows == key]
        f = v[np.isfinite(v)]
        n = len(f)
        sums[key, FINITE], sums[key, NANS], sums[key, ZEROS] = n, np.isnan(v).sum(), (v == 0).sum()
        sums[key, SUM] = f.sum()
        sums[key, M2] = ((f - f.sum() / max(n, 1)) ** 2).sum()
        sums[key, SQ] = f.sum() ** 2 / max(n, 1)
        if n:
            maxes[key, MAX], maxes[key, NEG_MIN] = f.max(), -f.min()
        index = buckets.bucket_index_numpy(f - centres[key])
        sums[key, HIST:] = np.bincount(index, minlength=buckets.BUCKETS)
    return torch.from_numpy(sums), torch.from_numpy(maxes)


def _accumulated(x, rows, centre, k):
    sums = torch.zeros(k, SUM_WIDTH, dtype=torch.float64)
    maxes = torch.full((k, MAX_WIDTH), -math.inf, dtype=torch.float64)
    acc.accumulate(sums, maxes, x, rows, centre, acc.Workspace())
    return sums, maxes


@pytest.mark.parametrize("keys", [1, 24])
def test_batches_equal_a_float64_reference_key_by_key(keys):
    x = _values(keys * 37, 0)
    rows = torch.arange(keys).repeat_interleave(37)
    centres = torch.linspace(-1.0, 2.0, keys, dtype=torch.float64)
    sums, maxes = _accumulated(x, rows, centres, keys)
    ref_sums, ref_maxes = _reference(x.numpy(), rows.numpy(), centres.numpy(), keys)
    assert torch.equal(sums[:, HIST:], ref_sums[:, HIST:])  # buckets: bit for bit
    assert torch.equal(maxes, ref_maxes)  # max, -min, and the host's columns untouched
    assert torch.allclose(sums, ref_sums, rtol=1e-12, atol=1e-9)  # moments
    assert sums[:, HIST:].sum().item() == torch.isfinite(x).sum().item()
    assert (sums[:, NANS] > 0).any() and (sums[:, ZEROS] > 0).any()


def test_one_large_key_equals_a_float64_reference():
    x = _values(20_000, 1)
    sums, maxes = _accumulated(x, None, 0.7, 1)
    ref_sums, ref_maxes = _reference(x.numpy(), np.zeros(len(x), int), np.array([0.7]), 1)
    assert torch.equal(sums[:, HIST:], ref_sums[:, HIST:])
    assert torch.equal(maxes, ref_maxes)
    assert torch.allclose(sums, ref_sums, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("keys", [1, 24])
def test_host_batches_equal_the_device_path(keys):
    # accumulate_calls (numpy, the CPU's small batches) against accumulate on the same calls:
    # keys repeat (several calls per step), sizes differ, NaN / inf / zeros included
    g = torch.Generator().manual_seed(keys)
    sizes = torch.randint(1, 60, (keys * 3,), generator=g)
    calls = torch.arange(keys).repeat(3)
    x = _values(int(sizes.sum()), keys)
    centres = torch.linspace(-1.0, 2.0, keys, dtype=torch.float64)
    sums = torch.zeros(keys, SUM_WIDTH, dtype=torch.float64)
    maxes = torch.full((keys, MAX_WIDTH), -math.inf, dtype=torch.float64)
    acc.accumulate(sums, maxes, x, torch.repeat_interleave(calls, sizes), centres, acc.Workspace())
    host_sums, host_maxes = np.zeros((keys, SUM_WIDTH)), np.full((keys, MAX_WIDTH), -np.inf)
    acc.accumulate_calls(host_sums, host_maxes, x.numpy(), calls.numpy(), sizes.numpy(),
                         centres.numpy())  # fmt: skip
    host_sums, host_maxes = torch.from_numpy(host_sums), torch.from_numpy(host_maxes)
    assert torch.equal(host_sums[:, HIST:], sums[:, HIST:])  # buckets: bit for bit
    assert torch.equal(host_maxes, maxes)
    assert torch.allclose(host_sums, sums, rtol=1e-12, atol=1e-9)
    assert host_sums[:, HIST:].sum().item() == torch.isfinite(x).sum().item()
    if keys == 1:
        return
    with pytest.raises(AttributeError):  # a bucket numpy cannot flatten would add into a copy
        acc.accumulate_calls(np.zeros((SUM_WIDTH, keys)).T, host_maxes.numpy(),
                             x.numpy(), calls.numpy(), sizes.numpy(), centres.numpy())  # fmt: skip


def test_display_edges_find_their_bucket_as_a_binary_search_does():
    rng = np.random.default_rng(0)
    spread = rng.normal(size=2000) * 10.0 ** rng.integers(-30, 15, 2000)
    near = [np.nextafter(buckets.EDGES, np.inf), np.nextafter(buckets.EDGES, -np.inf)]
    edges = np.concatenate([buckets.EDGES, *near, spread])
    search = np.searchsorted(buckets.EDGES, edges, side="right") - 1
    assert np.array_equal(buckets._bucket_of(edges), np.clip(search, 0, buckets.BUCKETS - 1))
