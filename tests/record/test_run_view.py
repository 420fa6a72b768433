"""Explorer.from_run: follows a real 2-rank job (the shipped demo script) while it writes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from surgeon_widgets import Explorer, read_run
from surgeon_widgets.demo.record_job import LAYERS
from surgeon_widgets.widget.run_view import NO_PARAMS

pytestmark = pytest.mark.timeout(120)


def job(run, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "surgeon_widgets.demo.record_job", str(run), *args]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for(path, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_from_run_follows_a_running_job_then_replays(tmp_path, from_view):
    run = tmp_path / "run"
    proc = job(run, "--steps", "14", "--every", "1", "--nprocs", "2", "--delay", "0.25")
    try:
        wait_for(run / "status.json", proc)
        view = Explorer.from_run(run, poll=0.1)
        sent = []
        original = view.view.send
        view.view.send = lambda content, buffers=None: (
            sent.append(content),
            original(content, buffers),
        )
        seen = []
        deadline = time.monotonic() + 60
        while not view.wait(0.1) and time.monotonic() < deadline:
            seen.append((view.state, view.last_step))
        assert proc.wait(60) == 0, proc.stdout.read()
    finally:
        proc.kill()
    # it was followed while running, with the last step growing, and then finished
    running = [step for state, step in seen if state == "running" and step is not None]
    assert len(set(running)) >= 2, seen
    assert view.state == "finished" and view.last_step == 13
    assert (
        "finished" in view.status_line.value and "last recorded step 13" in view.status_line.value
    )
    # what the view sent covers every record, newest last, as the live Explorer's messages
    done = read_run(run)
    items = [i for msg in sent if msg["type"] == "stats" for i in msg["items"]]
    assert {i["layer"] for i in items} <= set(LAYERS)
    assert max(i["step"] for i in items) == 13
    assert view.layers == LAYERS and view.view.selected == LAYERS
    assert view.view.rows == done.rows and any(r["name"] == "block2.relu" for r in view.view.rows)
    stats = view.stats("fc")
    assert list(stats) == ["fc/output", "fc/grad_output", "fc/weight", "fc/bias",
                           "fc/weight.grad", "fc/bias.grad"]  # fmt: skip
    # parameter gradients go out as the live Explorer's "weight grad" items; every item has L2
    assert {i["kind"] for i in items if i["layer"] == "fc"} == {
        "activation", "gradient", "weight", "weight grad"}  # fmt: skip
    assert all(i["l2"] is not None for i in items)
    assert stats["fc/output"].steps == list(range(14))
    assert stats["fc/output"].latest.ranks == 2 and stats["fc/weight"].latest.ranks == 1
    assert stats["fc/output"].latest.mean == done.stats("fc")["fc/output"].latest.mean
    assert view.figure("fc").axes
    # a view opened on the finished run replays it: the snapshot holds every step
    replay = Explorer.from_run(run)
    assert replay.wait(10)
    got = []
    replay.view.send = lambda content, buffers=None: got.append(content)
    from_view(replay.view, {"type": "hello"})
    assert got[0]["type"] == "snapshot"
    assert all(i["training"] is True for i in got[0]["items"]), "a training job records train"
    assert [i["step"] for i in got[0]["history"]["block1.conv/output"]] == list(range(14))
    assert "image/png" in replay._repr_mimebundle_()
    view.close()
    replay.close()


def test_from_run_shows_a_failed_run(tmp_path):
    run = tmp_path / "run"
    proc = job(run, "--steps", "10", "--every", "1", "--nprocs", "1", "--fail-at", "3")
    assert proc.wait(60) != 0
    view = Explorer.from_run(run)
    assert view.wait(10)
    assert view.state == "failed" and view.last_step == 3
    assert "failing on purpose" in view.status_line.value
    (failed,) = [e for e in view.view.errors if "failing on purpose" in e["text"]]
    assert failed["count"] == 1  # said once, however often the folder was read after
    view.close()


def test_from_run_selected_must_be_recorded(tmp_path, from_view):
    import torch
    from torch import nn

    from surgeon_widgets import Recorder, UnknownNameError

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with Recorder(model, tmp_path, layers=["0", "2"], every=1) as rec:
        model(torch.ones(3, 4)).sum().backward()
        rec.step()
    with pytest.raises(UnknownNameError, match=r"unknown recorded layer '1'.*recorded: '0', '2'"):
        Explorer.from_run(tmp_path, selected=["1"])
    view = Explorer.from_run(tmp_path, selected=["2"])
    try:
        assert view.view.selected == ["2"] and view.view.run == {"layers": ["0", "2"]}
        for _ in range(2):
            view._errors.add("reading the run: boom")
        assert [(e["text"], e["count"]) for e in view.view.errors] == [("reading the run: boom", 2)]
        from_view(view.view, {"type": "clear_errors"})  # the Clear button
        assert view.view.errors == []
    finally:
        view.close()


def test_recorded_parameters_are_sent_as_weight_items(tmp_path, from_view):
    import torch
    from torch import nn

    from surgeon_widgets import Recorder

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with Recorder(model, tmp_path, layers=["0"], every=1, gradients=False, params=True) as rec:
        for _ in range(2):
            model(torch.ones(3, 4)).sum().backward()
            rec.step()
    view = Explorer.from_run(tmp_path)
    try:
        assert view.wait(10)
        assert {s.kind for s in view.stats("0").values()} == {"activation", "parameter"}
        sent = []
        view.view.send = lambda content, buffers=None: sent.append(content)
        from_view(view.view, {"type": "hello"})
        ((snapshot,),) = [[c for c in sent if c["type"] == "snapshot"]]
        kinds = {i["leaf"]: i["kind"] for i in snapshot["items"]}
        # as the live Explorer's parameter items (kind "weight", leaf the parameter's name)
        assert kinds == {"output": "activation", "weight": "weight", "bias": "weight"}
        history = snapshot["history"]["0/weight"]
        assert [i["kind"] for i in history] == ["weight"] * len(history) and history
    finally:
        view.close()


def test_status_line_agrees_with_read_run_and_close_leaves_a_placeholder(tmp_path):
    import torch
    from torch import nn

    from surgeon_widgets import Recorder

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with Recorder(model, tmp_path, layers=["0", "1", "2"], every=2, params=True) as rec:
        for _ in range(7):
            model(torch.ones(3, 4)).sum().backward()
            rec.step()
    steps = read_run(tmp_path).steps
    view = Explorer.from_run(tmp_path)
    assert view.wait(10)
    status = view.status_line.value
    assert f"last recorded step {steps[-1]} · {len(steps)} recorded steps" in status, status
    assert "· step " not in status  # status.json's counter, one ahead of the last record
    assert "written by a Recorder" in status
    # the "parameters" boxes: ticked where weights were recorded, off for the ReLU
    assert view.view.param_layers == ["0", "2"]
    assert view.view.param_notes == {"1": NO_PARAMS}
    view.close()
    assert view.view.closed and view.view.comm is not None  # the view shows "Run view closed"
    assert view.status_line.value.startswith("<div class='sw-run-status'>closed")
    assert view.view.comm is not None and not view._thread.is_alive()
    view.close()  # the second closes the widgets
    assert view.view.comm is None
