"""record/batch.py: a step's small values copied at the hook and reduced at once, exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from surgeon_widgets import Recorder, read_run
from surgeon_widgets.record import accumulate as acc
from surgeon_widgets.record import accumulate_native
from surgeon_widgets.record import batch as batch_module
from surgeon_widgets.record.batch import HOST_BATCH, Batch
from surgeon_widgets.record.layout import HIST, M2, MAX_WIDTH, SQ, SUM_WIDTH


def _calls(scale: int) -> list[tuple[int, torch.Tensor]]:
    """Calls of 3 keys in every dtype and layout a hook sees (float64 copies are the truth)."""
    g = torch.Generator().manual_seed(scale)
    x = torch.randn(4 * scale, 8, generator=g)
    x[0, :3] = torch.tensor([math.nan, math.inf, 0.0])
    return [
        (0, x),
        (1, x.T),  # not contiguous
        (2, x.half()),
        (0, x[:, :5].bfloat16()),  # numpy has no bfloat16: copied by torch
        (1, torch.randint(-3, 3, (7 * scale,), generator=g)),
        (2, x > 0),
        (0, torch.complex(x, x.flip(0))),  # its magnitude
        (1, torch.tensor(2.5)),  # 0-d
    ]


def _flat64(t: torch.Tensor) -> torch.Tensor:
    return (t.abs() if t.is_complex() else t).reshape(-1).to(torch.float64)


def _buckets(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.zeros(k, SUM_WIDTH, dtype=torch.float64),
            torch.full((k, MAX_WIDTH), -math.inf, dtype=torch.float64))  # fmt: skip


def assert_same_sums(sums: torch.Tensor, ref: torch.Tensor) -> None:
    """Equal sum buckets, up to how calls are grouped: M2 is centred on each group's own mean
    and SQ holds each group's total² / n, so only their sum (the sum of squares) must agree."""
    assert torch.equal(sums[:, HIST:], ref[:, HIST:])  # buckets: bit for bit
    others = [c for c in range(HIST) if c not in (M2, SQ)]
    assert torch.allclose(sums[:, others], ref[:, others], rtol=1e-12, atol=1e-9)
    squares, ref_squares = sums[:, M2] + sums[:, SQ], ref[:, M2] + ref[:, SQ]
    assert torch.allclose(squares, ref_squares, rtol=1e-12, atol=1e-9)


# reduced in C, else in numpy (scale 1) or by the kernel path (scale 60)
@pytest.mark.parametrize("scale", [1, 60])
def test_a_batch_equals_accumulating_the_float64_copies(scale, native):
    calls = _calls(scale)
    centres = np.array([0.5, -1.0, 0.0])
    batch = Batch(torch.device("cpu"))
    for key, value in calls:
        assert batch.add(key, value)
    assert (len(batch) <= HOST_BATCH) == (scale == 1)
    for _, value in calls:  # copies: later in-place edits of the outputs do not reach them
        value.zero_()
    calls = _calls(scale)
    sums, maxes = _buckets(3)
    batch.reduce(sums, maxes, centres)
    assert len(batch) == 0 and batch.keys == []
    ref_sums, ref_maxes = _buckets(3)
    x = torch.cat([_flat64(v) for _, v in calls])
    rows = torch.cat([torch.full((v.numel(),), k) for k, v in calls])
    acc.accumulate(ref_sums, ref_maxes, x, rows, torch.from_numpy(centres), acc.Workspace())
    assert torch.equal(maxes, ref_maxes)
    assert_same_sums(sums, ref_sums)


def test_a_full_batch_refuses_a_value_and_drop_keeps_the_other_keys(monkeypatch):
    monkeypatch.setattr(batch_module, "CAPACITY", 40)
    batch = Batch(torch.device("cpu"))
    assert batch.add(0, torch.ones(30)) and batch.add(1, torch.full((6,), 2.0))
    assert not batch.add(0, torch.ones(5)) and len(batch) == 36  # nothing copied
    assert batch.add(0, torch.ones(4)) and len(batch) == 40
    batch.drop(0)
    assert batch.keys == [1] and batch.sizes == [6] and len(batch) == 6
    sums, maxes = _buckets(2)
    batch.reduce(sums, maxes, np.zeros(2))
    assert sums[:, HIST:].sum(1).tolist() == [0.0, 6.0] and maxes[1, 0].item() == 2.0


def test_records_of_a_batch_that_overflows_equal_those_with_room(tmp_path, monkeypatch):
    # 6 layers of 4 x 16 outputs and their gradients: 768 values a step, in a buffer of 100 the
    # recorder reduces at the hook whenever the next value does not fit (batched: no C loop)
    monkeypatch.setattr(accumulate_native, "LIBRARY", None)

    def run(folder):
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(6)])
        g = torch.Generator().manual_seed(1)
        with Recorder(model, folder, every=1) as rec:
            for _ in range(3):
                model(torch.randn(4, 16, generator=g)).pow(2).sum().backward()
                rec.step()
        return read_run(folder)

    roomy = run(tmp_path / "roomy")
    monkeypatch.setattr(batch_module, "CAPACITY", 100)
    tight = run(tmp_path / "tight")
    for layer in roomy.layers:
        for key, series in roomy.stats(layer).items():
            other = tight.stats(layer)[key]
            assert series.steps == other.steps == [0, 1, 2]
            for a, b in zip(series.values, other.values, strict=True):
                assert (a.numel, a.min, a.max) == (b.numel, b.min, b.max)
                assert a.mean == pytest.approx(b.mean, rel=1e-12, abs=1e-15)
                assert a.std == pytest.approx(b.std, rel=1e-9)
                assert np.array_equal(a.hist, b.hist)
