"""record.accumulate: the fused kernels give the eager path's numbers (buckets bit for bit)."""

from __future__ import annotations

import math

import pytest
import torch

from surgeon_widgets.record import accumulate as acc
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
