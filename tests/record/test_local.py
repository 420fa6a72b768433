"""One process: the run folder format, torn tails, checkpointing, errors, TensorBoard export."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from surgeon_widgets import Recorder, UnknownNameError, read_run
from surgeon_widgets.cli import main as cli
from surgeon_widgets.record.layout import RECORD


def train(model, rec, steps=4, shape=(8, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    outs = []
    for _ in range(steps):
        x = torch.randn(*shape, generator=g)
        x[0, 0] = float("nan") if len(outs) == 1 else x[0, 0]
        out = model(x)
        outs.append(out.detach().double().reshape(-1))
        out.nan_to_num().sum().backward()
        rec.step()
    return outs


def test_single_process_record_equals_the_values(tmp_path):
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh())
    with Recorder(model, tmp_path, layers=["1"], every=1, gradients=True) as rec:
        outs = train(model, rec)
    run = read_run(tmp_path)
    series = run.stats("1")["1/output"]
    assert series.steps == [0, 1, 2, 3] and run.status["state"] == "finished"
    for stats, ref in zip(series.values, outs):
        finite = ref[torch.isfinite(ref)].numpy()
        assert stats.numel == ref.numel() and stats.nans == int(torch.isnan(ref).sum())
        assert stats.min == finite.min() and stats.max == finite.max()
        assert stats.mean == pytest.approx(finite.mean(), rel=1e-12)
        assert stats.std == pytest.approx(finite.std(ddof=1), rel=1e-12)
    # every record, the first included, bins every finite value between its min and max
    for s in series.values:
        assert s.hist.sum() == pytest.approx((1 - s.zeros) * s.numel - s.nans - s.infs, rel=1e-6)
        assert (s.lo, s.hi, s.under, s.over) == (s.min, s.max, 0, 0)
    assert rec.cost.recorded == 4 and rec.cost.bytes_written == 8 * RECORD.size
    assert "4 of 4 steps recorded" in str(rec.cost)


def test_records_are_readable_within_half_a_second_and_the_status_follows(tmp_path):
    # the first record is written at once, the next ones in a batch once the last write is
    # MAX_AGE old: at a rec.step() or, with the loop paused, at the heartbeat
    model = nn.Sequential(nn.Linear(4, 4))
    rec = Recorder(model, tmp_path, layers=["0"], every=1, gradients=False)
    try:
        for step in range(3):
            model(torch.randn(2, 4)).sum().backward()
            rec.step()
            if step == 0:
                assert read_run(tmp_path).steps == [0]
        deadline = time.monotonic() + 10
        while len(read_run(tmp_path).steps) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_run(tmp_path).steps == [0, 1, 2]  # the heartbeat wrote the batch
        deadline = time.monotonic() + 10
        while read_run(tmp_path).status["records"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        status = read_run(tmp_path).status
        assert (status["state"], status["records"], status["last_record"]) == ("running", 3, 2)
    finally:
        rec.close()
    assert read_run(tmp_path).status["state"] == "finished"


def test_torn_and_zero_filled_tails_are_skipped(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4))
    with Recorder(model, tmp_path, every=1, gradients=False) as rec:
        train(model, rec, steps=3)
    file = tmp_path / "keys" / "0000.bin"
    whole = file.read_bytes()
    assert len(whole) == 3 * RECORD.size
    file.write_bytes(whole + whole[: RECORD.size // 2])  # a record torn half way
    assert read_run(tmp_path).steps == [0, 1, 2]
    file.write_bytes(whole + bytes(RECORD.size * 2))  # a zero-filled tail (network fs, crash)
    run = read_run(tmp_path)
    assert run.steps == [0, 1, 2] and run.skipped_bytes == 2 * RECORD.size
    broken = bytearray(whole)
    broken[RECORD.size + 40] ^= 1  # one flipped bit in the second record: only it is lost
    file.write_bytes(bytes(broken))
    run = read_run(tmp_path)
    assert run.steps == [0, 2] and run.bad_records == {"0/output": 1}
    # a torn tail completed later is read on the next refresh
    file.write_bytes(whole[: RECORD.size + 10])
    run = read_run(tmp_path)
    assert run.steps == [0]
    file.write_bytes(whole)
    assert run.refresh() == 2 and run.steps == [0, 1, 2]


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_recompute_is_not_counted_twice(tmp_path, reentrant):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            return self.head(checkpoint(self.inner, x, use_reentrant=reentrant))

    model = Net()
    with Recorder(model, tmp_path, layers=["inner.0", "head"], every=1) as rec:
        model(torch.randn(3, 4, requires_grad=True)).sum().backward()
        rec.step()
    stats = read_run(tmp_path).stats("inner.0")
    assert stats["inner.0/output"].latest.calls == 1 and stats["inner.0/output"].latest.numel == 12
    assert stats["inner.0/grad_output"].latest.calls == 1
    assert stats["inner.0/grad_output"].latest.numel == 12


def test_only_counted_steps_record_and_hooks_are_removed(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4))
    rec = Recorder(model, tmp_path, layers=["0"], every=3)
    train(model, rec, steps=7)
    assert len(model[0]._forward_hooks) == 1
    rec.close()
    assert len(model[0]._forward_hooks) == 0
    assert read_run(tmp_path).steps == [0, 3, 6]
    with pytest.raises(RuntimeError, match="closed"):
        rec.step()


def test_bad_input_errors(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(UnknownNameError, match="'0'"):
        Recorder(model, tmp_path, layers=["1"])
    with pytest.raises(ValueError, match="no layers"):
        Recorder(nn.Linear(2, 2), tmp_path)
    with pytest.raises(ValueError, match="every"):
        Recorder(model, tmp_path, every=0)
    with pytest.raises(FileNotFoundError, match=r"manifest\.json"):
        read_run(tmp_path / "nothing")
    with Recorder(model, tmp_path, layers=["0"], every=1) as rec, pytest.raises(UnknownNameError):
        read_run(tmp_path).stats("nope")
    assert not rec.recording or rec.step_count == 0


def test_failed_run_says_so(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(ZeroDivisionError), Recorder(model, tmp_path, every=1) as rec:
        model(torch.ones(1, 4))
        rec.step()
        1 / 0  # noqa: B018
    status = read_run(tmp_path).status
    assert status["state"] == "failed" and "ZeroDivisionError" in status["error"]


def test_tensorboard_export_reads_back(tmp_path, capsys):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator", reason="pip install tensorboard"
    )
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU())
    with Recorder(model, tmp_path / "run", layers=["0", "1"], every=1) as rec:
        train(model, rec, steps=3)
    assert cli(["export-tensorboard", str(tmp_path / "run"), str(tmp_path / "tb")]) == 0
    assert "wrote" in capsys.readouterr().out
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0})
    acc.Reload()
    run = read_run(tmp_path / "run")
    series = run.stats("0")["0/output"]
    assert "0/output" in acc.Tags()["histograms"] and "0/output/mean" in acc.Tags()["scalars"]
    histos = acc.Histograms("0/output")
    assert [h.step for h in histos] == series.steps
    for h, s in zip(histos, series.values):
        v = h.histogram_value
        assert (v.min, v.max, v.num) == (s.min, s.max, s.numel - s.nans)
        assert v.sum == pytest.approx(s.mean * v.num)
    last = histos[-1].histogram_value
    assert sum(last.bucket) == series.latest.numel - series.latest.nans
    assert list(last.bucket[1:-1]) == series.latest.hist.tolist()
    means = [e.value for e in acc.Scalars("0/output/mean")]
    assert means == pytest.approx([s.mean for s in series.values], rel=1e-6)
    assert np.isfinite(means).all()
    # the run's bins leave a ReLU's exact zeros out; TensorBoard's get them back in the bin of 0
    relu = run.stats("1")["1/output"].latest
    zeros = round(relu.zeros * relu.numel)
    bucket = acc.Histograms("1/output")[-1].histogram_value.bucket
    assert zeros > 0 and sum(bucket) == relu.numel - relu.nans and relu.min == 0.0
    assert bucket[1] == relu.hist[0] + zeros and list(bucket[2:-1]) == relu.hist[1:].tolist()


def test_torch_compile_records_the_modules_own_names(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    compiled = torch.compile(model)
    seen = []
    with Recorder(compiled, tmp_path, layers=["0", "2"], every=1) as rec:
        for _ in range(2):
            x = torch.randn(3, 4)
            compiled(x).sum().backward()
            seen.append(nn.functional.linear(x, model[0].weight, model[0].bias).detach().double())
            rec.step()
    run = read_run(tmp_path)
    assert run.layers == ["0", "2"] and run.manifest["wrapper"] == "OptimizedModule"
    series = run.stats("0")["0/output"]
    assert series.steps == [0, 1] and [s.calls for s in series.values] == [1, 1]
    assert series.latest.mean == pytest.approx(seen[-1].mean().item(), rel=1e-6)
    assert run.stats("0")["0/grad_output"].latest.numel == 12
