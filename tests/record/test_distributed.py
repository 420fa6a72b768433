"""Two ranks (spawn + gloo): DDP and FSDP2, merged statistics, one-rank modules, skipped steps,
and a run followed live from this process while the job writes it."""

from __future__ import annotations

import json
import time

import pytest
import record_workers as workers
from spawning import finish, start

from surgeon_widgets import read_run
from surgeon_widgets.record.layout import RECORD

pytestmark = pytest.mark.timeout(120)


def test_ddp_fsdp2_cnn_transformer_merged_and_moe(spawn, tmp_path):
    # every recorded step of every watched layer is checked inside the worker against the
    # stats of the concatenated values of both ranks (outputs and gradients)
    spawn(workers.main_worker, str(tmp_path), timeout=90)
    result = json.loads((tmp_path / "result0.json").read_text())
    for name in ["ddp-cnn", "fsdp-transformer", "ddp-transformer", "fsdp-cnn"]:
        assert result[name]["steps"] == [0, 2, 4]
        assert result[name]["checked"] == 3 * 3 * 2  # 3 layers x 3 steps x (output, gradient)
    # names are the module's own: no `module.` (DDP) prefix; FSDP2 keeps its names
    assert result["ddp-cnn"]["layers"] == ["0", "2", "6"]
    assert "blocks.0.linear1/output" in result["fsdp-transformer"]["keys"]
    assert "head/weight" in result["fsdp-transformer"]["keys"]
    # parameters: FSDP2 shards and DDP replicas each counted once
    assert result["fsdp-transformer"]["weight_numel"] == 50 * 32
    assert result["ddp-cnn"]["weight_numel"] == 4 * 8
    assert result["fsdp-transformer"]["grad_numel"] == 50 * 32
    assert result["ddp-cnn"]["grad_numel"] == 4 * 8
    # the expert ran on rank 0 only; rank 1 (writer=1) wrote the run and checked it
    assert set(result["moe"]) == {"pid"}
    assert json.loads((tmp_path / "result1.json").read_text())["moe"] == {
        "expert_ranks": 1,
        "shared_ranks": 2,
    }


def test_a_rank_that_skips_a_step_gets_an_error(spawn, tmp_path):
    started = time.monotonic()
    spawn(workers.skip_worker, str(tmp_path), timeout=40)
    assert time.monotonic() - started < 40
    for explicit in (True, False):
        got = [json.loads((tmp_path / f"skip{explicit}{r}.json").read_text()) for r in (0, 1)]
        if explicit:  # both ranks see the disagreement in their next step()
            assert "ranks disagree on the step number" in got[0]["message"], got
            assert "ranks disagree on the step number" in got[1]["message"], got
            assert got[0]["seconds"] < 3
        else:  # rank 0's last collective has no partner: an error naming the cause
            assert "did not join" in got[0]["message"] and "rec.step(step)" in got[0]["message"]
        run = read_run(tmp_path / f"skip{explicit}")
        assert run.status["state"] == "failed" and "step" in run.status["error"]


def test_an_extra_or_missing_step_on_one_rank_fails_every_rank_at_close(spawn, tmp_path):
    # every=10: only step 0 merges, so no collective ever sees the miscount; close() does
    spawn(workers.miscount_worker, str(tmp_path), timeout=60)
    # (the counts as both ranks closed, or, when rank 1 was already past rank 0's last step as
    # rank 0 closed, where it was)
    expect = {"extra": ("rank 1 after 7 rec.step() calls", "rank 1 is at step 6"),
              "missing": ("rank 1 after 5 rec.step() calls", "rank 0 is at step 5")}  # fmt: skip
    for name, says in expect.items():
        got = [json.loads((tmp_path / f"{name}{r}.json").read_text()) for r in (0, 1)]
        for g in got:
            assert g["kind"] == "RankMismatchError", (name, got)
            assert "disagree on the number of steps" in g["message"], got
            assert any(s in g["message"] for s in says), got
            assert g["seconds"] < 30, got  # Recorder made, 6 steps, close: never a hang
        assert got[0]["state"] == "failed", got
        assert "disagree on the number of steps" in read_run(tmp_path / name).status["error"]
    got = [json.loads((tmp_path / f"same{r}.json").read_text()) for r in (0, 1)]
    assert [g["kind"] for g in got] == ["", ""] and got[0]["state"] == "finished", got


def test_folder_followed_live_while_the_job_runs(tmp_path):
    context = start(workers.live_worker, str(tmp_path))
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "live" / "status.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        run = read_run(tmp_path / "live")
        seen = []
        while time.monotonic() < deadline:
            run.refresh()
            seen.append((run.status["state"], len(run.steps)))
            if len(run.steps) >= 3:
                break
            time.sleep(0.05)
        assert run.status["state"] == "running" and len(run.steps) >= 3, seen
        first = run.stats("0")["0/output"]
        assert first.steps[:3] == [0, 1, 2] and first.latest.ranks == 2
        (tmp_path / "go").touch()
        finish(context, 60)
    finally:
        (tmp_path / "go").touch()
    assert run.refresh() > 0
    assert run.status["state"] == "finished" and run.steps == list(range(40))
    size = (tmp_path / "live" / "keys" / "0000.bin").stat().st_size
    assert size == 40 * RECORD.size
