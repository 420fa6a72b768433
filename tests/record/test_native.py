"""record/accumulate_native.py: the C loop built with the package gives the torch path's numbers;
a library that is missing or differs from Python's sizes is refused, with one warning."""

from __future__ import annotations

import ctypes
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from surgeon_widgets import Recorder, read_run
from surgeon_widgets.record import accumulate as acc
from surgeon_widgets.record import accumulate_native as c_loop
from surgeon_widgets.record.buckets import BUCKETS, rebin
from surgeon_widgets.record.layout import (
    BINS,
    FINITE,
    HIST,
    M2,
    MAX,
    MAX_WIDTH,
    NEG_MIN,
    SQ,
    SUM_WIDTH,
    ZEROS,
)


@pytest.fixture(scope="module", autouse=True)
def _built():
    assert c_loop.LIBRARY is not None, "the C loop was not built with the package: see the warning"


def _buckets(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.zeros(k, SUM_WIDTH, dtype=torch.float64),
            torch.full((k, MAX_WIDTH), -math.inf, dtype=torch.float64))  # fmt: skip


def _cases() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    mixed = torch.randn(1000, generator=g) * 3
    mixed[[1, 7, 300]] = torch.tensor([math.nan, math.inf, -math.inf])
    mixed[10:30] = 0.0
    mixed[31] = -0.0
    mixed[32] = 1e-42  # a float32 denormal
    return [
        torch.randn(7, 5, generator=g),  # not a multiple of 4
        torch.randn(3, 300, generator=g) + 40.0,  # several blocks, far from the centre
        mixed,
        torch.full((9,), math.nan),  # no finite value
        torch.tensor([3.5]),
        torch.tensor([1e300, -1e300, 2.0], dtype=torch.float64),  # past float32: outermost
        torch.randn(513, dtype=torch.float64, generator=g) * 1e-30,
    ]


@pytest.mark.parametrize("case", range(len(_cases())))
@pytest.mark.parametrize("centre", [0.0, 0.75])
def test_one_call_equals_the_torch_path(case, centre):
    values = _cases()[case]
    sums, maxes = _buckets(1)
    assert c_loop.one(values, 0, c_loop.Table(sums, maxes, np.array([centre])))
    ref_sums, ref_maxes = _buckets(1)
    acc.accumulate(ref_sums, ref_maxes, values.reshape(-1).double(), None, centre)
    assert torch.equal(sums[:, HIST:], ref_sums[:, HIST:])  # buckets: bit for bit
    assert torch.equal(maxes, ref_maxes)
    with np.errstate(invalid="ignore"):  # 1e300 squared is inf on both sides
        assert torch.allclose(sums[:, :HIST], ref_sums[:, :HIST], rtol=1e-12, atol=1e-300,
                              equal_nan=True)  # fmt: skip


def test_a_batch_of_calls_equals_numpy_up_to_grouping():
    cases = [c.reshape(-1).double() for c in _cases() if c.abs().nan_to_num().max() < 1e30]
    x = torch.cat(cases).numpy()
    keys, sizes = [i % 3 for i in range(len(cases))], [len(c) for c in cases]
    centres = np.array([0.0, -1.0, 0.5])
    sums, maxes = np.zeros((3, SUM_WIDTH)), np.full((3, MAX_WIDTH), -math.inf)
    assert c_loop.calls(sums, maxes, x, keys, sizes, centres)
    ref_sums, ref_maxes = np.zeros((3, SUM_WIDTH)), np.full((3, MAX_WIDTH), -math.inf)
    acc.accumulate_calls(ref_sums, ref_maxes, x, np.array(keys), np.array(sizes), centres)
    assert np.array_equal(sums[:, HIST:], ref_sums[:, HIST:]) and np.array_equal(maxes, ref_maxes)
    # M2 is centred on each call's mean in C, on each key's in numpy: their sum of squares agrees
    others = [c for c in range(HIST) if c not in (M2, SQ)]
    assert np.allclose(sums[:, others], ref_sums[:, others], rtol=1e-12)
    assert np.allclose(sums[:, M2] + sums[:, SQ], ref_sums[:, M2] + ref_sums[:, SQ], rtol=1e-12)
    with pytest.raises(ValueError, match="keys"):  # a key past the table is refused, not written
        c_loop.calls(sums, maxes, x, [0, 5], [1, 1], centres)


def _numpy_bins(sums: np.ndarray, maxes: np.ndarray, centres: np.ndarray) -> np.ndarray:
    n = sums[:, FINITE]
    low = np.where(n > 0, -maxes[:, NEG_MIN], np.nan)
    high = np.where(n > 0, maxes[:, MAX], np.nan)
    return rebin(sums, low, high, centres, BINS, HIST, n, zeros=sums[:, ZEROS])


def test_display_bins_in_c_equal_numpys_rebin():
    # buckets as the C loop counts them; C reads only the buckets between min and max
    g = torch.Generator().manual_seed(1)
    values = [
        torch.randn(1000, generator=g),
        torch.randn(37, generator=g) * 1e-3 + 5,  # far from the centre
        torch.full((5,), 2.0),  # min == max: all in bin 0
        torch.full((3,), math.nan),  # no finite value: zeros
        torch.rand(4096, generator=g) ** 8,  # most near zero
        torch.randn(100, generator=g) * 1e20,  # past 2^32: the outermost buckets
        torch.tensor([-2.0**-29, 2.0**-29, 3e-9, -1e-9]),  # a min on a bucket edge
        -torch.rand(64, generator=g),
        torch.relu(torch.randn(999, generator=g)),  # half exact zeros: left out of the bins
        torch.zeros(50),  # all exact zeros: no bin holds any
        torch.cat([torch.zeros(30), torch.randn(70, generator=g) * 1e-3 + 2]),  # zeros far off
    ]
    k = len(values)
    sums, maxes = _buckets(k)
    for trial in range(40):
        centres = (torch.randn(k, generator=g) * 10.0 ** (trial % 5 - 2)).double().numpy()
        centres[-2] = 0.0  # the edge stays an edge
        sums.zero_(), maxes.fill_(-math.inf)
        table = c_loop.Table(sums, maxes, centres)
        for i, v in enumerate(values):
            assert c_loop.one(v * (1 + trial / 100), i, table)
        out = np.full((k, BINS), -1.0)
        assert c_loop.rebin(sums.numpy(), maxes.numpy(), centres, out)
        expected = _numpy_bins(sums.numpy(), maxes.numpy(), centres)
        assert np.array_equal(out, expected), trial
        assert (out >= 0).all()
        assert np.array_equal(out.sum(1), (sums[:, FINITE] - sums[:, ZEROS]).numpy())


def test_exact_zeros_leave_the_bins_and_the_rest_keeps_its_shape():
    g = torch.Generator().manual_seed(2)
    relu = torch.relu(torch.randn(20000, generator=g, dtype=torch.float64))
    plain = torch.randn(20000, generator=g, dtype=torch.float64)  # no exact zero
    for centre in [0.0, 0.4, 0.8, 1e-30, -3.0, 7e5]:  # the zeros' bucket near and far from 0
        sums, maxes = _buckets(3)
        centres = np.full(3, centre)
        table = c_loop.Table(sums, maxes, centres)
        for i, v in enumerate([relu, plain, torch.zeros(10, dtype=torch.float64)]):
            assert c_loop.one(v, i, table)
        s, m = sums.numpy(), maxes.numpy()
        out = np.full((3, BINS), -1.0)
        assert c_loop.rebin(s, m, centres, out)
        assert np.array_equal(out, _numpy_bins(s, m, centres))
        assert np.array_equal(table.display_bins(), out)
        # no zero: the bins as without the zeros' argument; all zeros: no bin holds any
        n = s[:, FINITE]
        low, high = -m[:, NEG_MIN], m[:, MAX]
        assert np.array_equal(out[1], rebin(s, low, high, centres, BINS, HIST, n)[1])
        assert out[1].sum() == plain.numel()
        assert not out[2].any() and s[2, ZEROS] == 10
        # the ReLU: the non-zero values' histogram, no spike where the zeros were (where the
        # buckets resolve the bins: a centre near the values, as the recorder's last mean is)
        nonzero = relu[relu != 0].numpy()
        assert out[0].sum() == nonzero.size == s[0, FINITE] - s[0, ZEROS]
        if abs(centre) > 1:
            continue
        expect, _ = np.histogram(nonzero, bins=BINS, range=(0.0, float(relu.max())))
        assert np.abs(out[0] - expect).sum() <= 0.1 * nonzero.size, (centre, out[0], expect)
        assert out[0, 0] <= 1.5 * expect[0] + 0.01 * nonzero.size, (centre, out[0, 0], expect[0])


def test_numpys_rebin_counts_no_value_twice_past_the_outermost_bucket():
    # a min in bucket 0: reduceat's empty first span gave bucket 0's count again (-53 bins)
    sums, maxes = _buckets(1)
    values = torch.cat([torch.full((47,), -1e20), torch.full((53,), 1e20)])
    acc.accumulate(sums, maxes, values.double(), None, 0.0)
    bins = _numpy_bins(sums.numpy(), maxes.numpy(), np.zeros(1))
    assert (bins >= 0).all() and bins.sum() == 100


def test_records_with_and_without_the_c_loop_agree(tmp_path, monkeypatch):
    # in-place ReLUs edit the convolutions' outputs after their hooks: each is reduced at once
    def run(folder):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                              nn.Conv2d(8, 8, 3), nn.ReLU(inplace=True), nn.Flatten(),
                              nn.Linear(8 * 12 * 12, 10))  # fmt: skip
        g = torch.Generator().manual_seed(1)
        with Recorder(model, folder, every=1, params=True) as rec:
            for _ in range(3):
                model(torch.randn(2, 3, 16, 16, generator=g)).pow(2).mean().backward()
                rec.step()
        return read_run(folder)

    fast = run(tmp_path / "c")
    monkeypatch.setattr(c_loop, "LIBRARY", None)
    slow = run(tmp_path / "python")
    compared = 0
    for layer in fast.layers:
        for key, series in fast.stats(layer).items():
            other = slow.stats(layer)[key]
            assert series.steps == other.steps == [0, 1, 2]
            for a, b in zip(series.values, other.values, strict=True):
                same = (a.numel, a.min, a.max, a.zeros, a.nans)
                assert same == (b.numel, b.min, b.max, b.zeros, b.nans), key
                assert a.mean == pytest.approx(b.mean, rel=1e-9, abs=1e-12), key
                assert a.std == pytest.approx(b.std, rel=1e-9, abs=1e-12), key
                assert np.array_equal(a.hist, b.hist), key
                compared += 1
    assert compared >= 3 * 14  # outputs, gradients, weights and their gradients of 7 layers


def _loaded() -> tuple[object, list[str]]:
    """:func:`c_loop.load` again, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        lib = c_loop.load()
    return lib, [str(w.message) for w in seen if w.category is RuntimeWarning]


def test_the_library_is_the_one_beside_the_module_and_its_sizes_agree():
    path = c_loop._built()
    assert path is not None and path.parent == Path(c_loop.__file__).parent
    assert path.name.startswith("_accumulate.")
    lib, warned = _loaded()
    assert lib is not None and warned == []
    assert lib.sw_sizes(None, 0) == len(c_loop._sizes())  # asked for none: says how many
    got = (ctypes.c_int64 * 4)()
    lib.sw_sizes(got, 4)
    assert list(got) == [14, BUCKETS, 256, 32]


@pytest.mark.parametrize(
    "name, value, named",
    [
        ("BUCKETS", BUCKETS + 8, f"(buckets.BUCKETS): C {BUCKETS}, Python {BUCKETS + 8}"),
        ("_MOST_BINS", 128, "most display bins"),
        ("_TABLE_WORDS", 5, "Table bytes"),
        ("_LAYOUT", np.zeros(15, dtype=np.int64), "layout entries"),
    ],
)
def test_sizes_that_differ_refuse_the_library_and_the_python_path_runs(
    name, value, named, monkeypatch
):
    monkeypatch.setattr(c_loop, name, value)
    lib, warned = _loaded()
    assert lib is None
    assert len(warned) == 1 and named in warned[0] and "numpy / torch path" in warned[0], warned
    # what the recorder does then: every entry point says "not done", the numpy path takes over
    monkeypatch.setattr(c_loop, "LIBRARY", lib)
    sums, maxes = _buckets(1)
    table = c_loop.Table(sums, maxes, np.zeros(1))
    assert not c_loop.one(torch.ones(3), 0, table)
    assert c_loop.many([torch.ones(3)], [0], table) == [0]
    assert table.clear() is None and table.display_bins() is None
    assert not c_loop.calls(sums.numpy(), maxes.numpy(), np.ones(3), [0], [3], np.zeros(1))
    assert sums.abs().sum() == 0


def test_a_library_built_from_another_source_is_refused(tmp_path, monkeypatch):
    source = tmp_path / "accumulate.c"
    source.write_bytes(c_loop._SOURCE.read_bytes() + b"\n/* edited since the build */\n")
    monkeypatch.setattr(c_loop, "_SOURCE", source)
    lib, warned = _loaded()
    assert lib is None and len(warned) == 1 and "built from another accumulate.c" in warned[0]


def test_without_the_built_library_the_python_path_runs_with_one_warning(monkeypatch):
    monkeypatch.setattr(c_loop, "_built", lambda: None)
    lib, warned = _loaded()
    assert lib is None
    assert len(warned) == 1 and "installed without a C compiler" in warned[0], warned
