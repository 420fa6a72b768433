"""record.accumulate: the fused kernels give the eager path's numbers (buckets bit for bit)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from surgeon_widgets.record import accumulate as acc
from surgeon_widgets.record import buckets
from surgeon_widgets.record.layout import HIST, MAX_WIDTH, SUM_WIDTH


@pytest.fixture(scope="module", autouse=True)
def _built():
    assert acc.ROWS.wait(torch.float64) and acc.ONE_ROW.wait(torch.float64)


def _run(x, rows, centre, k, fused, monkeypatch):
    sums = torch.zeros(k, SUM_WIDTH, dtype=torch.float64)
    maxes = torch.full((k, MAX_WIDTH), -math.inf, dtype=torch.float64)
    ran = []
    for kernel in (acc.ROWS, acc.ONE_ROW):
        built = kernel.get(torch.float64)

        def get(dtype, built=built):
            ran.append(fused)
            return built if fused else None

        monkeypatch.setattr(kernel, "get", get)
    acc.accumulate(sums, maxes, x, rows, centre, acc.Workspace())
    monkeypatch.undo()
    assert ran == [fused]
    return sums, maxes


def _values(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.relu(torch.randn(n, generator=g, dtype=torch.float64) * 3 + 0.5)  # zeros too
    x[3], x[11], x[17] = math.nan, math.inf, -math.inf
    return x


@pytest.mark.parametrize("keys", [1, 24])
def test_fused_batches_equal_the_eager_path(keys, monkeypatch):
    x = _values(keys * 37, 0)
    rows = torch.arange(keys).repeat_interleave(37)
    centres = torch.linspace(-1.0, 2.0, keys, dtype=torch.float64)
    fused = _run(x, rows, centres, keys, True, monkeypatch)
    eager = _run(x, rows, centres, keys, False, monkeypatch)
    assert torch.equal(fused[0][:, HIST:], eager[0][:, HIST:])  # buckets: bit for bit
    assert torch.equal(fused[1], eager[1])  # max, -min, and the host's columns
    assert torch.allclose(fused[0], eager[0], rtol=1e-12, atol=1e-9)  # moments
    assert fused[0][:, HIST:].sum().item() == (torch.isfinite(x)).sum().item()


def test_one_large_key_fused_equals_eager(monkeypatch):
    x = _values(20_000, 1)
    fused = _run(x, None, 0.7, 1, True, monkeypatch)
    eager = _run(x, None, 0.7, 1, False, monkeypatch)
    assert torch.equal(fused[0][:, HIST:], eager[0][:, HIST:])
    assert torch.equal(fused[1], eager[1])
    assert torch.allclose(fused[0], eager[0], rtol=1e-12, atol=1e-9)


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
