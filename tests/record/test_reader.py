"""The reader loses only what was damaged; pandas out equals the Series; TFRecord crc32c.

One small recorded run (2 layers, 12 steps) is damaged in every way a disk or a crash does:
flipped bits, a torn or cut file, bytes lost or inserted mid-file, a deleted key file, a torn
manifest; the reader must keep every undamaged record, exactly as written.
"""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from tensorboard.backend.event_processing import event_file_loader as loader
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as reference
from torch import nn

from surgeon_widgets import Recorder, read_run
from surgeon_widgets.engine.series import COLUMNS, Series
from surgeon_widgets.engine.stats import tensor_stats
from surgeon_widgets.record.layout import RECORD
from surgeon_widgets.record.tensorboard import crc32c, crc32c_many, export_tensorboard

STEPS = 12


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run of 12 steps (activations and gradients of 2 layers) and its values, read intact."""
    folder = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    with Recorder(model, folder, layers=["0", "2"], every=1) as rec:
        for step in range(STEPS):
            x = torch.randn(8, 4) * (1 + step)
            model(x).sum().backward()
            rec.step()
    run = read_run(folder)
    assert run.problems == [] and run.steps == list(range(STEPS))
    return folder, snapshot(run)


def snapshot(run) -> dict[str, dict[int, tuple]]:
    """``{key: {step: every number of that record}}`` as the reader gives them."""
    out = {}
    for layer in run.layers:
        for key, series in run.stats(layer).items():
            out[key] = {
                step: (v.numel, v.mean, v.std, v.min, v.max, v.nans, v.lo, v.hi, v.calls,
                       v.shape, v.hist.tobytes())
                for step, v in zip(series.steps, series.values)
            }  # fmt: skip
    return out


def damaged_copy(recorded, tmp_path, damage) -> tuple:
    folder, intact = recorded
    copy = tmp_path / "run"
    shutil.copytree(folder, copy)
    file = copy / "keys" / "0000.bin"  # 0/output
    data = bytearray(file.read_bytes())
    assert len(data) == STEPS * RECORD.size
    damage(data)
    file.write_bytes(bytes(data))
    return read_run(copy), intact


@pytest.mark.parametrize("bit", [0, 35, 8 * 100 + 3, 8 * (RECORD.size - 1)])
def test_a_flipped_bit_loses_only_its_record(recorded, tmp_path, bit):
    record = 4  # record 5 of 12

    def flip(data):
        data[record * RECORD.size + bit // 8] ^= 1 << (bit % 8)

    run, intact = damaged_copy(recorded, tmp_path, flip)
    got = snapshot(run)
    assert got["0/output"] == {s: v for s, v in intact["0/output"].items() if s != record}
    assert {k: v for k, v in got.items() if k != "0/output"} == {
        k: v for k, v in intact.items() if k != "0/output"
    }
    assert run.bad_records == {"0/output": 1} and run.skipped_bytes == 0
    assert "0/output: 1 damaged record(s) dropped" in run.problems[0] and "problem" in repr(run)


def test_random_flips_lose_only_the_flipped_records(recorded, tmp_path):
    rng = np.random.default_rng(1)
    hit = sorted(rng.choice(STEPS - 1, size=4, replace=False).tolist())  # the last one stays

    def flips(data):
        for r in hit:
            data[r * RECORD.size + int(rng.integers(RECORD.size))] ^= 1 << int(rng.integers(8))

    run, intact = damaged_copy(recorded, tmp_path, flips)
    assert snapshot(run)["0/output"] == {
        s: v for s, v in intact["0/output"].items() if s not in hit
    }
    assert run.bad_records == {"0/output": len(hit)}


@pytest.mark.parametrize(
    "where, lost",
    [
        ("cut inside record 7", {6}),  # 100 bytes of record 7 gone: it alone is lost
        ("bytes inserted after record 3", set()),  # a torn write the writer went past
        ("zeros over records 5-6", {4, 5}),
    ],
)
def test_lost_or_inserted_bytes_resynchronise(recorded, tmp_path, where, lost):
    size = RECORD.size

    def damage(data):
        if where.startswith("cut"):
            del data[6 * size + 50 : 6 * size + 150]
        elif where.startswith("bytes inserted"):
            data[3 * size : 3 * size] = data[3 * size : 3 * size + 200]  # half a record again
        else:
            data[4 * size : 6 * size] = bytes(2 * size)

    run, intact = damaged_copy(recorded, tmp_path, damage)
    assert snapshot(run)["0/output"] == {
        s: v for s, v in intact["0/output"].items() if s not in lost
    }
    assert run.bad_records == {"0/output": max(len(lost), 1)}


def test_truncated_file_keeps_the_whole_records_and_reads_the_rest_later(recorded, tmp_path):
    run, intact = damaged_copy(recorded, tmp_path, lambda data: data.__delitem__(slice(-300, None)))
    assert snapshot(run)["0/output"] == {s: v for s, v in intact["0/output"].items() if s < 11}
    assert run.skipped_bytes == RECORD.size - 300 and run.bad_records == {}
    shutil.copy(recorded[0] / "keys" / "0000.bin", run.path / "keys" / "0000.bin")
    assert run.refresh() == 1 and snapshot(run) == intact and run.problems == []


def test_a_deleted_key_file_is_a_reported_gap(recorded, tmp_path):
    folder, intact = recorded
    shutil.copytree(folder, tmp_path / "run")
    (tmp_path / "run" / "keys" / "0001.bin").unlink()
    run = read_run(tmp_path / "run")
    gone = run.keys[1]["key"]
    assert run.missing == [gone] and run.problems == [f"{gone}: keys/0001.bin is missing"]
    assert snapshot(run) == {k: v for k, v in intact.items() if k != gone}
    assert run.to_pandas()["key"].nunique() == len(intact) - 1


@pytest.mark.parametrize("keep", [0, 0.5, 0.99])
def test_a_torn_manifest_is_a_clear_error(recorded, tmp_path, keep):
    folder, _ = recorded
    shutil.copytree(folder, tmp_path / "run")
    manifest = tmp_path / "run" / "manifest.json"
    text = manifest.read_bytes()
    manifest.write_bytes(text[: int(len(text) * keep)])
    with pytest.raises(ValueError, match=r"manifest\.json is damaged .*atomic rename"):
        read_run(tmp_path / "run")


def test_status_torn_reads_unknown(recorded, tmp_path):
    folder, intact = recorded
    shutil.copytree(folder, tmp_path / "run")
    (tmp_path / "run" / "status.json").write_text('{"state": "runn')
    run = read_run(tmp_path / "run")
    assert run.status["state"] == "unknown" and snapshot(run) == intact


def test_a_rewritten_folder_is_named_not_misread(recorded, tmp_path):
    folder, _ = recorded
    shutil.copytree(folder, tmp_path / "run")
    run = read_run(tmp_path / "run")
    values = run.stats("0")["0/output"].values
    (tmp_path / "run" / "keys" / "0000.bin").write_bytes(b"")  # a new run into the same folder
    with pytest.raises(RuntimeError, match="rewritten; read_run"):
        values[3]
    with pytest.raises(RuntimeError, match="rewritten; read_run"):
        run.refresh()


def test_memory_is_numpy_columns_without_histograms(recorded):
    run = read_run(recorded[0])
    records = sum(len(s.steps) for layer in run.layers for s in run.stats(layer).values())
    assert records == 4 * STEPS and run.nbytes / records <= 200


# -- pandas ---------------------------------------------------------------------------------


def test_run_to_pandas_equals_the_series(recorded):
    run = read_run(recorded[0])
    frame = run.to_pandas()
    assert list(frame.columns) == ["layer", "key", "leaf", "kind", "step", "training", *COLUMNS]
    assert len(frame) == 4 * STEPS and set(frame["layer"]) == {"0", "2"}
    for layer in run.layers:
        for key, series in run.stats(layer).items():
            df = series.to_pandas()
            assert df.index.name == "step" and df.index.tolist() == series.steps
            assert list(df.columns) == ["training", *COLUMNS]
            part = frame[frame["key"] == key].set_index("step")[list(df.columns)]
            pd.testing.assert_frame_equal(part, df, check_names=False)
            for step, v in zip(series.steps, series.values):
                row = df.loc[step]
                assert (row["numel"], row["nans"], row["infs"]) == (v.numel, v.nans, v.infs)
                assert (row["mean"], row["std"], row["min"], row["max"], row["zeros"]) == (
                    v.mean, v.std, v.min, v.max, v.zeros
                )  # fmt: skip
                assert row["l2"] == v.l2 and pd.isna(row["training"])
                h = series.histogram(step)
                assert np.array_equal(h.counts, v.hist)
                assert h.edges[[0, -1]].tolist() == [v.lo, v.hi]


def test_recorded_l2_is_the_norm_of_the_values(tmp_path):
    model = nn.Sequential(nn.Linear(4, 3))
    x = torch.randn(5, 4)
    with Recorder(model, tmp_path, layers=["0"], every=1, gradients=False) as rec:
        out = model(x).detach().double()
        rec.step()
    df = read_run(tmp_path).stats("0")["0/output"].to_pandas()
    assert df["l2"].iloc[0] == pytest.approx(out.norm().item(), rel=1e-9)
    assert df["numel"].iloc[0] == 15 and df["mean"].iloc[0] == pytest.approx(out.mean().item())


def test_live_series_to_pandas_and_histogram():
    values = [tensor_stats(torch.tensor([0.0, 1.0, 2.0, float("nan")])),
              tensor_stats(torch.ones(3))]  # fmt: skip
    series = Series("fc/output", "fc", "output", "activation", [4, 7], values, [True, False])
    df = series.to_pandas()
    assert df.index.tolist() == [4, 7] and df["training"].tolist() == [True, False]
    assert df.loc[4, "nans"] == 1 and df.loc[4, "zeros"] == 0.25 and df.loc[7, "std"] == 0.0
    assert df.loc[4, "l2"] == pytest.approx(5**0.5) and df.loc[7, "mean"] == 1.0
    assert series.histogram(7).counts.sum() == 3 and series.histogram(4, training=True)
    with pytest.raises(KeyError, match=r"no record at step 5; closest recorded steps: 4, 7"):
        series.histogram(5)
    with pytest.raises(KeyError, match="eval mode"):
        series.histogram(4, training=False)


def test_live_explorer_series_to_pandas_equals_its_values(make):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    ex = make(model, max_rate=0)
    ex.select(["1"])
    model.eval()
    model(torch.randn(6, 4))
    model.train()
    model(torch.randn(6, 4) - 1)
    series = ex.stats("1")["1/output"]
    df = series.to_pandas()
    assert df.index.tolist() == series.steps and df["training"].tolist() == [False, True]
    for step, v in zip(series.steps, series.values):
        assert df.loc[step, ["numel", "mean", "std", "min", "max", "l2", "zeros"]].tolist() == [
            v.numel, v.mean, v.std, v.min, v.max, v.l2, v.zeros
        ]  # fmt: skip
        assert np.array_equal(series.histogram(step).counts, v.hist)
    assert df["zeros"].iloc[1] > 0  # ReLU of mostly negative inputs


def test_to_pandas_without_pandas_names_the_extra(recorded, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    run = read_run(recorded[0])
    with pytest.raises(ImportError, match=r"pip install 'surgeon-widgets\[pandas\]'"):
        run.to_pandas()
    with pytest.raises(ImportError, match=r"surgeon-widgets\[pandas\]"):
        run.stats("0")["0/output"].to_pandas()


# -- TensorBoard's crc32c -------------------------------------------------------------------


def test_crc32c_equals_the_reference():
    rng = np.random.default_rng(0)
    messages = [rng.integers(0, 256, int(n), np.uint8).tobytes() for n in rng.integers(0, 700, 60)]
    messages += [b"", b"a", bytes(32), bytes(range(256)) * 9, b"123456789"]
    assert crc32c_many(messages).tolist() == [reference.crc32c(m) for m in messages]
    assert crc32c(b"123456789") == 0xE3069283 and crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720


def test_tensorboard_export_passes_its_crc_checks(recorded, tmp_path):
    path = export_tensorboard(recorded[0], tmp_path / "tb")
    # the pure-Python record reader checks both crcs of every frame and raises on a mismatch
    events = list(loader.RawEventFileLoader(str(path)).Load())
    assert len(events) == 1 + STEPS
