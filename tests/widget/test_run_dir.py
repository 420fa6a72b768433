"""Explorer(run_dir=): the live history lands in a run folder that outlives the process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
from torch import nn

from surgeon_widgets import Explorer, read_run
from surgeon_widgets.engine.registry import live_hooks

pytestmark = pytest.mark.timeout(120)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def test_run_dir_holds_what_the_explorer_showed(tmp_path):
    net, run_dir = model(), tmp_path / "run"
    ex = Explorer(net, selected=["0", "2"], gradients=True, max_rate=0, run_dir=run_dir)
    for step in range(4):
        net.train(step != 2)  # one eval forward among training ones
        net(torch.randn(5, 8) * (step + 1)).sum().backward()
    live = {name: ex.stats(name) for name in ["0", "2"]}
    ex.close()
    run = read_run(run_dir)
    assert run.status["state"] == "finished"
    assert run.layers == ["0", "2"] and run.steps == [0, 1, 2, 3]
    for name, series in live.items():
        recorded = run.stats(name)
        assert set(recorded) == set(series) == {f"{name}/output", f"{name}/grad_output"}
        for key, s in series.items():
            r = recorded[key]
            assert r.steps == s.steps and r.kind == s.kind
            for a, b in zip(s.values, r.values):
                assert (a.shape, a.dtype, a.numel, a.nans, a.infs) == (
                    b.shape, b.dtype, b.numel, b.nans, b.infs
                )  # fmt: skip
                for field in ("mean", "std", "min", "max", "lo", "hi", "zeros"):
                    assert getattr(b, field) == pytest.approx(getattr(a, field), rel=1e-6)
                np.testing.assert_array_equal(a.hist, b.hist)
    view = Explorer.from_run(run_dir)
    try:
        assert view.wait(10) and view.state == "finished" and view.last_step == 3
        assert view.stats("2")["2/output"].steps == [0, 1, 2, 3]
    finally:
        view.close()


def test_without_run_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    net = model()
    ex = Explorer(net, selected=["0"], max_rate=0)
    net(torch.randn(2, 8))
    ex.close()
    assert list(tmp_path.iterdir()) == []


def test_a_folder_holding_a_run_is_refused_and_left_alone(tmp_path):
    net, run_dir = model(), tmp_path / "run"
    ex = Explorer(net, selected=["0"], max_rate=0, run_dir=run_dir)
    net(torch.randn(2, 8))
    ex.close()
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match=r"run_dir .*run.* is not empty"):
        Explorer(net, selected=["0"], run_dir=run_dir)
    assert not live_hooks() and not net[0]._forward_hooks
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


SCRIPT = """
import sys, torch
from torch import nn
from surgeon_widgets import Explorer
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
ex = Explorer(net, selected=["0", "2"], gradients=True, max_rate=0, run_dir=sys.argv[1])
step = 0
while True:
    net(torch.randn(5, 8)).sum().backward()
    step += 1
"""


def test_a_killed_process_leaves_a_readable_run(tmp_path):
    run_dir = tmp_path / "run"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(script), str(run_dir)]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the job never recorded 20 steps"
            if (run_dir / "manifest.json").exists():
                run = read_run(run_dir)
                if len(run.keys) == 4 and len(run.steps) >= 20:
                    break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    run = read_run(run_dir)  # killed mid-write: every whole record reads, a torn one is skipped
    steps = run.steps
    assert steps == list(range(len(steps))) and len(steps) >= 20
    # status.json is rewritten once a second: the killed writer's fell behind its records (at
    # worst "step: null, records: 0"); the reader counts what the key files hold
    written = json.loads((run_dir / "status.json").read_text())
    status = run.status
    assert (status["step"], status["last_record"], status["records"]) == (
        steps[-1], steps[-1], len(steps)
    ), (written, status)
    assert status.get("from_keys", False) == (written["last_record"] != steps[-1])
    assert written["records"] <= len(steps)  # recorded steps, not one per key
    assert run.wait(timeout=30) and run.state == "lost"  # its writer's pid is gone, heartbeat stale
    for key, series in run.stats("0").items():
        assert series.steps == list(range(len(series.steps))), key
        assert all(v.numel > 0 and v.mean is not None for v in series.values)
    assert run.stats("2")["2/output"].latest.shape == (5, 4)


def test_a_run_written_by_an_explorer_is_described_as_such(tmp_path):
    from surgeon_widgets.widget.run_view import NO_PARAMS, NO_PARAMS_EXPLORER

    net, run_dir = model(), tmp_path / "run"
    ex = Explorer(net, selected=["0", "2"], max_rate=0, run_dir=run_dir)
    ex.param_layers = ["0"]  # the "parameters" box of layer 0 ticked
    for _ in range(3):
        net(torch.randn(5, 8))
    ex.close()
    view = Explorer.from_run(run_dir)
    try:
        assert view.wait(10)
        assert view.view.param_layers == ["0"]
        # layer 2's box is off: the note says how this run's writer, an Explorer, records them
        assert view.view.param_notes == {"2": NO_PARAMS_EXPLORER}
        assert "Recorder" not in NO_PARAMS_EXPLORER and "Recorder" in NO_PARAMS
        status = view.status_line.value
        assert "written by an Explorer (run_dir=)" in status and "Recorder" not in status
    finally:
        view.close()
