"""engine.stats: on-device reductions against torch references, for every dtype and edge case."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from surgeon_widgets.engine.stats import BINS, SAMPLE, SAMPLED_FROM, SMALL_CPU, tensor_stats


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
        "finite": f.numel(), "nonzero": int((f != 0).sum()),
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
    assert got.hist.sum() == ref["nonzero"]  # exact zeros have a bar of their own
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
    assert got.hist[-1] == got.hist.sum() == int(b.sum())  # the Falses are zeros: no bin
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
    assert got.hist.sum() == ref["nonzero"]
    if ref["finite"]:
        exact = ref["finite"] == ref["numel"]  # else min/max are rebuilt from scaled values
        rel = 0 if exact else 1e-6
        assert got.min == pytest.approx(ref["min"], rel=rel)
        assert got.max == pytest.approx(ref["max"], rel=rel)


def _reference64(t: torch.Tensor) -> dict:
    """Every stat from the float64 values, counted one by one."""
    x = t.detach().reshape(-1).double()
    f = x[torch.isfinite(x)]
    return {
        "mean": f.mean().item(), "std": f.std().item(), "min": f.min().item(),
        "max": f.max().item(), "l2": f.norm().item(), "zeros": int((x == 0).sum()),
        "nans": int(torch.isnan(x).sum()), "infs": int(torch.isinf(x).sum()), "finite": f.numel(),
        "nonzero": int((f != 0).sum()),
    }  # fmt: skip


def _conv_activations() -> dict[str, torch.Tensor]:
    """Real activations of a conv block in training (8 x 64 x 32 x 32 = 2^19 values each)."""
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64)).train()
    with torch.no_grad():
        pre = conv(torch.randn(8, 3, 32, 32))
        return {
            "bn": pre,
            "relu": torch.relu(pre),  # about half exact zeros
            "dropout": nn.functional.dropout(pre - 0.3, 0.5),  # -0.0 where negatives dropped
            "shifted": pre * 0.01 + 3.0,  # mean 300 std: the one pass would cancel
        }


@pytest.mark.parametrize("name", ["bn", "relu", "dropout", "shifted"])
def test_large_activation_stats_equal_a_float64_reference(name):
    t = _conv_activations()[name]
    got, ref = tensor_stats(t), _reference64(t)
    assert t.numel() >= SAMPLED_FROM
    for key in ("mean", "std", "l2"):  # float64 accumulation: far below float32's drift
        assert getattr(got, key) == pytest.approx(ref[key], rel=1e-6, abs=1e-7 * ref["std"]), key
    assert (got.min, got.max) == (ref["min"], ref["max"])  # exact
    assert round(got.zeros * got.numel) == ref["zeros"]  # -0.0 counts as a zero
    assert (got.nans, got.infs) == (0, 0)
    if name == "dropout":
        assert int((t == 0).sum()) > int((t.view(torch.int32) == 0).sum())  # has -0.0 too


def test_nan_inf_and_zeros_in_a_large_tensor_are_counted_exactly():
    t = _conv_activations()["relu"].clone()
    flat = t.view(-1)
    flat[::1000] = math.nan
    flat[7::5000] = math.inf
    flat[11::7000] = -math.inf
    got, ref = tensor_stats(t), _reference64(t)
    assert (got.nans, got.infs) == (ref["nans"], ref["infs"]) and got.nans > 500
    assert round(got.zeros * got.numel) == ref["zeros"]
    for key in ("mean", "std", "l2"):
        assert getattr(got, key) == pytest.approx(ref[key], rel=1e-6, abs=1e-7 * ref["std"]), key
    assert (got.min, got.max) == pytest.approx((ref["min"], ref["max"]), rel=1e-6)
    # the exact pass bins every finite value but the zeros
    assert got.sampled == 0 and got.hist.sum() == ref["nonzero"] < ref["finite"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
# the first device-path size; a sampled one, of two chunks and a part
@pytest.mark.parametrize("numel", [SMALL_CPU, (1 << 19) - 4321])
def test_half_precision_equals_its_float32_upcast(dtype, numel):
    t = _conv_activations()["relu"].reshape(-1)[:numel].to(dtype)
    got, up = tensor_stats(t), tensor_stats(t.float())
    assert got.dtype == str(dtype).removeprefix("torch.") and up.dtype == "float32"
    for key in ("min", "max", "zeros", "nans", "infs", "lo", "hi", "sampled"):
        assert getattr(got, key) == getattr(up, key), key
    assert (got.hist == up.hist).all()
    for key in ("mean", "std", "l2"):  # the same float32 chunks, added in the same order
        assert getattr(got, key) == getattr(up, key), key


def test_large_tensors_bin_a_bounded_sample_over_the_exact_range():
    t = _conv_activations()["bn"]
    got = tensor_stats(t)
    assert got.sampled == SAMPLE < t.numel()
    assert got.hist.sum() == SAMPLE
    assert (got.lo, got.hi) == (t.min().item(), t.max().item())
    exact = torch.histc(t.double(), BINS, got.lo, got.hi).numpy() / t.numel()
    assert np.abs(got.hist / SAMPLE - exact).sum() < 0.03  # the sample's shape is the tensor's
    below = t.reshape(-1)[: SAMPLED_FROM - 1]
    small = tensor_stats(below)
    assert small.sampled == 0 and small.hist.sum() == below.numel()
    assert tensor_stats(t.reshape(-1)[:SAMPLED_FROM]).sampled == SAMPLE


def test_std_does_not_drift_on_ten_million_values():
    torch.manual_seed(1)
    t = torch.randn(10**7) * 3 + 1
    got, ref = tensor_stats(t), _reference64(t)
    for key in ("mean", "std", "l2"):
        assert getattr(got, key) == pytest.approx(ref[key], rel=2e-8), key  # pairwise sums: 2e-9


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_either_side_of_the_host_path_equals_a_float64_reference(dtype):
    # below SMALL_CPU values (a CPU tensor) the stats are finished on the host with numpy,
    # from SMALL_CPU on by torch's chunks
    t = _conv_activations()["dropout"].reshape(-1)[: 2 * SMALL_CPU].to(dtype)
    for part in (t[: SMALL_CPU - 1], t[:SMALL_CPU]):
        got, ref = tensor_stats(part), _reference64(part)
        for key in ("mean", "std", "l2"):
            assert getattr(got, key) == pytest.approx(ref[key], rel=1e-6), key
        assert (got.min, got.max, got.sampled) == (ref["min"], ref["max"], 0)
        assert round(got.zeros * got.numel) == ref["zeros"]  # -0.0 counts as a zero
        exact = torch.histc(part[part != 0].double(), BINS, ref["min"], ref["max"]).numpy()
        assert got.hist.sum() == ref["nonzero"] and np.abs(got.hist - exact).sum() <= 4


# the host path, the one pass on device, a sampled histogram, the exact pass (NaN in it)
@pytest.mark.parametrize(
    ("numel", "nan"), [(SMALL_CPU - 1, 0), (SMALL_CPU, 0), (1 << 19, 0), (SMALL_CPU, 1)]
)
def test_exact_zeros_of_a_relu_are_left_out_of_the_bins(numel, nan):
    t = _conv_activations()["relu"].reshape(-1)[:numel].clone()
    if nan:
        t[::1000] = math.nan
    got, ref = tensor_stats(t), _reference64(t)
    assert got.min == 0.0 and 0.3 < got.zeros < 0.7  # 0 lies in the first bin
    assert round(got.zeros * got.numel) == ref["zeros"]
    rest = t[(t != 0) & torch.isfinite(t)].double()
    exact = torch.histc(rest, BINS, ref["min"], ref["max"]).numpy()
    if got.sampled:  # the sample's shape is the non-zero values' shape: no spike at 0
        assert np.abs(got.hist / got.hist.sum() - exact / exact.sum()).sum() < 0.03
        assert got.hist.sum() < SAMPLE * 0.7
    else:
        assert got.hist.sum() == ref["nonzero"] and np.abs(got.hist - exact).sum() <= 4
    assert got.hist[0] < 2 * got.hist[1]  # the first bin holds small values, not the zeros


def test_strided_and_expanded_views_are_reduced_as_they_are():
    base = torch.relu(torch.randn(200_000, generator=torch.Generator().manual_seed(3)))
    for view in (base[::2], base[:1].expand(100_000), base[: 400 * 300].view(400, 300).t()):
        got, ref = tensor_stats(view), _reference64(view)
        for key in ("mean", "std", "l2"):
            assert getattr(got, key) == pytest.approx(ref[key], rel=1e-6, abs=1e-12), key
        assert (got.min, got.max, round(got.zeros * got.numel)) == (
            ref["min"], ref["max"], ref["zeros"])  # fmt: skip


def test_a_cpu_tensor_below_small_cpu_runs_no_torch_reduction():
    """The demo's activations (64 x 10 x 64 values) are reduced with numpy on the calling
    thread: no torch op that would wait on torch's thread pool (starved on a busy machine)."""

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    t = torch.relu(torch.randn(64, 10, 64))
    assert t.numel() < SMALL_CPU
    with Ops() as ops:
        got = tensor_stats(t)
    work = ("sum", "amax", "amin", "dot", "bincount", "mul")
    reductions = [op for op in ops.ops if any(w in op for w in work)]
    assert reductions == [], ops.ops
    ref = _reference64(t)
    assert got.mean == pytest.approx(ref["mean"]) and got.hist.sum() == ref["nonzero"]
    big = torch.relu(torch.randn(SMALL_CPU))
    with Ops() as ops:
        tensor_stats(big)
    assert any("sum" in op for op in ops.ops)  # from SMALL_CPU on: torch's chunked pass


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("numel", [SMALL_CPU, 1 << 19])
def test_non_finite_values_on_the_scatter_path_are_counted_not_raised(bad, numel):
    """The accelerators' binning (scatter_add_, taken on a CPU when bins > 256) once cast a NaN
    bin index to INT64_MIN: an error here, a device-side assert on CUDA."""
    t = _conv_activations()["relu"].reshape(-1)[:numel].clone()
    t[7] = bad
    got, ref = tensor_stats(t, bins=300), _reference64(t[torch.isfinite(t)])
    assert (got.nans, got.infs) == ((1, 0) if bad != bad else (0, 1))
    assert got.hist.sum() + round(got.zeros * got.numel) == numel - 1
    assert (got.min, got.max) == (ref["min"], ref["max"])
