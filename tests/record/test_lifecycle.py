"""A run's life on 2 ranks (spawn + gloo): stopped by SIGTERM, lost when the writer is killed,
resumed, failed on an extra rec.step() under DDP; and in one process: signals, states, formats.

Spawning is the slow part, so the 2-rank tests share jobs: two jobs at once in the first, one
job that resumes and then takes the extra step in the second."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import record_workers as workers
from spawning import start

from surgeon_widgets import Recorder, read_run
from surgeon_widgets.record.runfolder import LOST_AFTER, read_json, run_state, write_json

pytestmark = pytest.mark.timeout(240)


def wait_for(path, seconds=120.0):  # generous: under load, spawning + importing dynamo is slow
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text()


def test_sigterm_stops_a_run_and_a_killed_writer_loses_one(tmp_path):
    # two jobs at once (a spawn is the slow part): torchrun's SIGTERM to every rank of the
    # first, whose writer has its own handler; kill -9 of the second's writer
    term, killed = tmp_path / "term", tmp_path / "killed"
    jobs = [start(workers.steady_worker, str(term), True),
            start(workers.steady_worker, str(killed), False)]  # fmt: skip
    try:
        writer = int(wait_for(killed / "ready0"))
        ranks = [int(wait_for(term / f"ready{r}")) for r in (0, 1)]
        lost = read_run(killed / "run")
        assert lost.state == "running" and not lost.wait(0.3)
        deadline = time.monotonic() + 5  # records reach the disk within MAX_AGE (Pending)
        while len(read_run(killed / "run").steps) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(writer, signal.SIGKILL)  # no handler, no atexit: status.json says running
        started = time.monotonic()
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)  # as torchrun stops a job: every rank at once
        assert lost.wait(timeout=LOST_AFTER + 15), lost.status
        waited = time.monotonic() - started
        deadline = time.monotonic() + 20
        while any(p.is_alive() for p in jobs[0].processes) and time.monotonic() < deadline:
            time.sleep(0.05)
        codes = [p.exitcode for p in jobs[0].processes]
    finally:
        for p in jobs[0].processes + jobs[1].processes:
            p.kill()
    assert lost.status["state"] == "running" and lost.state == "lost"
    assert LOST_AFTER * 0.8 < waited < LOST_AFTER + 10, waited
    assert lost.steps[:4] == [0, 1, 2, 3]
    run = read_run(term / "run")
    assert run.state == "stopped" and run.status["signal"] == "SIGTERM", run.status
    assert run.wait(0) and run.steps[:4] == [0, 1, 2, 3]
    # the user's handler ran after ours (it saw stopped) and chose the exit code; rank 1 had
    # none: the default action, the process ends by SIGTERM as without the Recorder
    assert (term / "user_handler_ran").read_text() == "stopped"
    assert codes == [3, -signal.SIGTERM], codes


def test_resume_appends_and_an_extra_step_under_ddp_fails_on_both_ranks(spawn, tmp_path):
    spawn(workers.resume_then_extra_step_worker, str(tmp_path), timeout=150)
    out = [json.loads((tmp_path / f"resume{r}.json").read_text()) for r in (0, 1)]
    folder = str(tmp_path / "run")
    writer, other = out
    assert writer["refused"].startswith("FileExistsError") and folder in writer["refused"]
    assert "resume=True" in writer["refused"] and "Nothing in it was changed" in writer["refused"]
    assert "rank 0 (the writer) refused" in other["refused"] and "resume=True" in other["refused"]
    assert "'6/output'" in writer["other_layers"] and "'2/output'" in writer["other_layers"]
    assert writer["untouched"] and other["untouched"]
    for o in out:  # layer lists that differ between ranks: named, not hashes
        assert "another order" in o["order"] and "['0/output', '6/output']" in o["order"], o
        assert "['6/output', '0/output']" in o["order"] and "hash" not in o["order"]
        assert "'2/output'" in o["names"] and "'6/output'" in o["names"], o
        assert o["first_step"] == 4 and o["own_group_once"]
    assert writer["steps"] == list(range(7)) and writer["state"] == "finished"
    assert writer["ranks"] == [2] * 7 and writer["status_step"] == 6 and writer["records"] == 7
    assert [r["step"] for r in writer["resumed"]] == [4]
    assert writer["resumed"][0]["previous_state"] == "finished"
    # an extra rec.step() on rank 1 (DDP): no SIGABRT and no hang. A recorded step's merge runs
    # while the next step trains, so the extra call's merge pairs with rank 0's next one (the
    # counters agree): rank 1's last merge (step 6) is the one without a partner, and rank 1
    # raises when it closes; it reports that to the job's store, where rank 0's close() reads it:
    # both ranks raise it and the writer's folder says failed. Only explicit step numbers
    # (rec.step(i)) catch the extra call itself.
    got = [json.loads((tmp_path / f"extra{r}.json").read_text()) for r in (0, 1)]
    assert [g["kind"] for g in got] == ["RankMismatchError"] * 2, got
    assert "rank 1 is at rec.step() of step 6" in got[1]["message"], got
    assert "did not join" in got[1]["message"], got
    # rank 0 reads rank 1's error, or itself sees rank 1 past its last step as it closes
    assert "step 6" in got[0]["message"] and "rank 1" in got[0]["message"], got
    assert all(g["seconds"] < 25 for g in got), got
    assert (tmp_path / "state").read_text() == "failed"


# -- one process --------------------------------------------------------------------------------

JOB = """
import signal, sys, time, torch
from torch import nn
from surgeon_widgets import Recorder
model = nn.Sequential(nn.Linear(4, 4))
with Recorder(model, sys.argv[1], every=1, gradients=False) as rec:
    for step in range(100000):
        model(torch.ones(2, 4)); rec.step()
        if step == 2:
            print("ready", flush=True)
        time.sleep(0.005)
"""


def test_a_signal_in_one_process_stops_the_run_then_its_default_action_runs(tmp_path):
    signals = [signal.SIGTERM, signal.SIGINT]
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(JOB), str(tmp_path / s.name)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in signals]  # fmt: skip
    try:
        for proc, sig in zip(procs, signals):
            assert proc.stdout.readline().strip() == "ready"
            proc.send_signal(sig)
        codes = [proc.wait(timeout=30) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for sig, code in zip(signals, codes):
        status = read_json(tmp_path / sig.name / "status.json")
        assert status["state"] == "stopped" and status["signal"] == sig.name, status
        assert code == -sig  # the default action: the exit status it would have had anyway
        assert read_run(tmp_path / sig.name).steps[:3] == [0, 1, 2]
    # Python's own SIGINT handler ran after ours: KeyboardInterrupt, and the run stays stopped
    assert "KeyboardInterrupt" in procs[1].stderr.read()


def test_handlers_are_put_back_at_close(tmp_path):
    from torch import nn

    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        rec = Recorder(nn.Sequential(nn.Linear(2, 2)), tmp_path, every=1)
        assert signal.getsignal(signal.SIGTERM) is not mine
        rec.close()
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_state_is_derived_from_the_heartbeat_and_the_writer(tmp_path):
    now = time.time()
    me = {"state": "running", "interval": 1.0, "pid": os.getpid(), "updated": now - 60}
    import socket

    host = socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert run_state({**me, "host": host}) == "running"  # alive, only slow to beat
    assert run_state({**me, "host": host, "pid": gone.pid}) == "lost"
    assert run_state({**me, "host": host, "pid": gone.pid, "updated": now}) == "running"
    assert run_state({**me, "host": "elsewhere"}) == "lost"  # another host: silent
    assert run_state({**me, "host": "elsewhere", "updated": now - 2}) == "running"
    for state in ("finished", "failed", "stopped"):
        assert run_state({**me, "state": state}) == state


def test_status_step_is_the_last_step_and_newer_minor_formats_are_read(tmp_path):
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 4))
    with Recorder(model, tmp_path, every=3, gradients=False) as rec:
        for _ in range(5):
            model(torch.ones(1, 4))
            rec.step()
    run = read_run(tmp_path)
    assert run.status["step"] == 4 and run.steps == [0, 3] and rec.step_count == 5
    manifest = read_json(tmp_path / "manifest.json")
    write_json(tmp_path / "manifest.json", {**manifest, "format": "surgeon_widgets.run/1.9",
                                            "a_field_from_the_future": 1})  # fmt: skip
    assert read_run(tmp_path).steps == [0, 3]
    write_json(tmp_path / "manifest.json", {**manifest, "format": "surgeon_widgets.run/2.0"})
    with pytest.raises(ValueError, match=r"run/2\.0.*reads surgeon_widgets\.run/1\.x"):
        read_run(tmp_path)


def test_a_used_folder_is_refused_in_one_process(tmp_path):
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 4))
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"no manifest\.json"):
        Recorder(model, tmp_path, every=1)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert len(model[0]._forward_hooks) == 0
    folder = tmp_path / "run"
    with Recorder(model, folder, every=1, gradients=False) as rec:
        model(torch.ones(1, 4))
        rec.step()
    with pytest.raises(FileExistsError, match=r"resume=True"):
        Recorder(model, folder, every=1, gradients=False)
    with pytest.raises(ValueError, match=r"every=1 there, every=2 here"):
        Recorder(model, folder, every=2, gradients=False, resume=True)
    # a writer killed half way through a record: resume cuts the torn tail, then appends
    key = folder / "keys" / "0000.bin"
    key.write_bytes(key.read_bytes() + b"torn")
    with Recorder(model, folder, every=1, gradients=False, resume=True) as rec:
        model(torch.ones(1, 4))
        rec.step()
    assert read_run(folder).steps == [0, 1] and read_run(folder).skipped_bytes == 0
