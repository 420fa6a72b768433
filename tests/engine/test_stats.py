"""engine.stats: on-device reductions against torch references, for every dtype and edge case."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from surgeon_widgets.engine.stats import BINS, tensor_stats


def _reference(t: torch.Tensor) -> dict:
    x = t.detach().reshape(-1)
    x = x.abs() if x.is_complex() else x.double()
    f = x[torch.isfinite(x)].double()
    return {
        "numel": x.numel(), "nans": int(torch.isnan(x).sum()), "infs": int(torch.isinf(x).sum()),
        "zeros": float((x == 0).sum()) / max(x.numel(), 1),
        "mean": f.mean().item() if f.numel() else None,
        "std": f.std().item() if f.numel() > 1 else (0.0 if f.numel() else None),
        "min": f.min().item() if f.numel() else None,
        "max": f.max().item() if f.numel() else None,
        "l2": torch.linalg.vector_norm(f).item() if f.numel() else None,
        "finite": f.numel(),
    }  # fmt: skip


def _check(t: torch.Tensor) -> None:
    got, ref = tensor_stats(t), _reference(t)
    assert got.shape == tuple(t.shape) and got.numel == ref["numel"]
    assert (got.nans, got.infs) == (ref["nans"], ref["infs"])
    assert got.zeros == pytest.approx(ref["zeros"])
    for key in ("mean", "std", "min", "max", "l2"):
        if ref[key] is None:
            assert getattr(got, key) is None, key
        else:
            scale = max(abs(ref["min"]), abs(ref["max"]), 1.0) * (
                ref["finite"] ** 0.5 if key == "l2" else 1
            )
            assert getattr(got, key) == pytest.approx(ref[key], rel=1e-3, abs=1e-5 * scale), key
    assert got.hist.shape == (BINS,) and got.hist.dtype == np.float32
    assert got.hist.sum() == ref["finite"]
    assert (got.hist >= 0).all()


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
     torch.uint8, torch.int8],
)  # fmt: skip
def test_dtypes_match_reference(dtype):
    t = (torch.randn(7, 11) * 20).to(dtype)
    got = tensor_stats(t)
    assert got.dtype == str(dtype).removeprefix("torch.")
    _check(t)


def test_bool_and_complex():
    b = torch.rand(100) > 0.3
    got = tensor_stats(b)
    assert got.mean == pytest.approx(b.float().mean().item())
    assert got.zeros == pytest.approx(1 - b.float().mean().item())
    assert got.hist[0] + got.hist[-1] == 100
    c = torch.randn(50, dtype=torch.complex64)
    got = tensor_stats(c)
    assert got.note == "complex: abs" and got.dtype == "complex64"
    assert got.max == pytest.approx(c.abs().max().item())


@pytest.mark.parametrize(
    "values",
    [[], [math.nan] * 4, [math.inf, -math.inf], [1.0, math.nan, math.inf, -2.0, 0.0],
     [3.0] * 5, [0.0] * 3, [-1e30, 1e30]],
)  # fmt: skip
def test_edge_cases(values):
    _check(torch.tensor(values, dtype=torch.float32))


def test_empty_and_all_nan_have_no_moments():
    assert tensor_stats(torch.empty(0, 3)).mean is None
    s = tensor_stats(torch.full((2, 2), math.nan))
    assert (s.mean, s.min, s.nans, s.lo, s.hi) == (None, None, 4, 0.0, 0.0)
    assert tensor_stats(torch.empty(3, device="meta")).numel == 3


def test_histogram_bins_match_histc():
    t = torch.randn(10_000)
    got = tensor_stats(t)
    ref = torch.histc(t, BINS, t.min().item(), t.max().item())
    # bins agree up to values sitting exactly on an edge
    assert np.abs(got.hist - ref.numpy()).sum() <= 4


def test_no_item_calls_and_detached():
    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    x = torch.randn(10, requires_grad=True)
    y = x * 2
    with Ops() as ops:
        tensor_stats(y)
    assert "aten._local_scalar_dense.default" not in ops.ops  # what .item() dispatches to
    assert x.grad is None and y.grad_fn is not None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=60))
def test_any_float_list(values):
    t = torch.tensor(values, dtype=torch.float32)
    got, ref = tensor_stats(t), _reference(t)
    assert (got.nans, got.infs, got.numel) == (ref["nans"], ref["infs"], ref["numel"])
    assert got.hist.sum() == ref["finite"]
    if ref["finite"]:
        exact = ref["finite"] == ref["numel"]  # else min/max are rebuilt from scaled values
        rel = 0 if exact else 1e-6
        assert got.min == pytest.approx(ref["min"], rel=rel)
        assert got.max == pytest.approx(ref["max"], rel=rel)
