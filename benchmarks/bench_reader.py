"""Reading a run folder: read_run, to_pandas, Explorer.from_run and the TensorBoard export.

A real run of 12 layers (activations + gradients: 24 keys) is recorded for 2 steps, then each
key file is grown to N records (full: 10k, quick: 1k) from its real records, steps and means
varied, crc32 recomputed. Arms are interleaved over rounds; times are medians. Memory is what
tracemalloc (numpy's allocations included) sees retained after the call, per record.

Baselines in the same process: the reader before issue 19 (a RunStats with its histogram per
record, kept in lists), and the pure-Python table CRC-32C the export used.
Issue 19 §7: read_run of 24 keys x 10k steps took 7.7 s and 784 MB (Explorer.from_run 1.27 GB);
targets <= 2 s and <= 200 bytes per record; the export took 57 s.

    python benchmarks/bench_reader.py            # full: 24 keys x 10k steps
    python benchmarks/bench_reader.py --quick    # CI smoke run: 24 keys x 1k steps
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import torch
from torch import nn

from surgeon_widgets import Recorder, read_run
from surgeon_widgets.record.keyfile import RECORD_DTYPE, to_stats
from surgeon_widgets.record.layout import BINS, FIELDS, MAGIC, RECORD
from surgeon_widgets.record.runfolder import read_json
from surgeon_widgets.record.tensorboard import crc32c_many, export_tensorboard


def make_run(folder: Path, steps: int) -> int:
    """Record 12 layers for 2 steps, then grow every key file to ``steps`` records."""
    torch.manual_seed(0)
    model = nn.Sequential(*(m for _ in range(6) for m in (nn.Linear(32, 32), nn.Tanh())))
    with Recorder(model, folder, layers=[str(i) for i in range(12)], every=1) as rec:
        for _ in range(2):
            model(torch.randn(16, 32)).sum().backward()
            rec.step()
    keys = read_json(folder / "manifest.json")["keys"]
    rng = np.random.default_rng(0)
    for key in keys:
        file = folder / key["file"]
        real = np.frombuffer(file.read_bytes(), RECORD_DTYPE)
        records = np.repeat(real[1:2], steps)  # the binned one
        records["step"] = np.arange(steps)
        records["mean"] += rng.normal(0, 1e-3, steps)
        raw = records.view(np.uint8).reshape(steps, RECORD.size)
        crcs = [zlib.crc32(row[:-4].tobytes()) for row in raw]
        records["crc"] = np.array(crcs, np.uint32)
        file.write_bytes(records.tobytes())
    return len(keys)


# -- the reader before issue 19, as the baseline ----------------------------------------------


def legacy_read(folder: Path) -> list[list[tuple[int, object]]]:
    manifest = read_json(folder / "manifest.json")
    out = []
    for key in manifest["keys"]:
        data = (folder / key["file"]).read_bytes()
        records, end = [], 0
        while end + RECORD.size <= len(data):
            chunk = data[end : end + RECORD.size]
            if chunk[:4] != MAGIC or zlib.crc32(chunk[:-4]) != int.from_bytes(chunk[-4:], "little"):
                break
            values = RECORD.unpack(chunk)
            row = np.array(values[2 : 2 + len(FIELDS)], dtype=np.float64)
            hist = np.array(values[2 + len(FIELDS) : 2 + len(FIELDS) + BINS], dtype=np.float32)
            records.append((values[1], to_stats(dict(zip(FIELDS, row.tolist())), hist)))
            end += RECORD.size
        out.append(records)
    return out


def legacy_crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


TABLE = _table()

# -- arms ---------------------------------------------------------------------------------------


def retained(fn) -> tuple[object, int, int]:
    """``(result, bytes still allocated after fn, peak bytes during it)`` per tracemalloc."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    result = fn()
    gc.collect()
    now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, now - base, peak - base


def from_run(folder: Path) -> object:
    from surgeon_widgets.widget.run_view import RunView

    view = RunView(folder)
    view.wait(60)
    sent = []
    view.view.send = lambda content, buffers=None: sent.append(len(buffers or ()))
    view._on_msg(view.view, {"type": "hello"}, [])  # the snapshot a front end asks for
    assert sent, "no snapshot sent"
    return view


def timed(fn) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="24 keys x 1k steps, for CI")
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps, rounds = (1000, 3) if args.quick else (10_000, 3)
    folder = Path(tempfile.mkdtemp()) / "run"
    n_keys = make_run(folder, steps)
    records = n_keys * steps
    on_disk = sum(f.stat().st_size for f in (folder / "keys").iterdir())
    print(f"# {n_keys} keys x {steps} steps = {records} records, {on_disk / 1e6:.1f} MB on disk")

    arms = {
        "legacy read": lambda: legacy_read(folder),
        "read_run": lambda: read_run(folder),
        "read_run + to_pandas": lambda: read_run(folder).to_pandas(),
    }
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for r in range(rounds):
        for arm in (list(arms)[r % len(arms) :] + list(arms)[: r % len(arms)]):  # rotating order
            times[arm].append(timed(arms[arm]))
    median = {arm: statistics.median(t) for arm, t in times.items()}
    for arm, t in median.items():
        print(f"# {arm}: {t:.3f} s median of {rounds} ({t / records * 1e6:.2f} us/record)")
    ratio = median["read_run"] / median["legacy read"]
    print(f"read_run/legacy read [{records} records]: {ratio:.3f}   target <= 0.5   "
          f"{'ok' if ratio <= 0.5 else 'MISSED'}")  # fmt: skip
    scaled = median["read_run"] * 240_000 / records
    print(f"# read_run scaled to 24 keys x 10k steps: {scaled:.2f} s (target <= 2 s)")

    _, legacy_bytes, _ = retained(lambda: legacy_read(folder))
    run, run_bytes, run_peak = retained(lambda: read_run(folder))
    print(f"# retained: legacy {legacy_bytes / records:.0f} B/record, read_run "
          f"{run_bytes / records:.0f} B/record (peak {run_peak / 1e6:.1f} MB), "
          f"run.nbytes {run.nbytes / records:.0f} B/record")  # fmt: skip
    per = run_bytes / records
    print(f"read_run bytes/record [{records} records]: {per:.0f}   target <= 200   "
          f"{'ok' if per <= 200 else 'MISSED'}")  # fmt: skip
    frame, frame_bytes, _ = retained(lambda: read_run(folder).to_pandas())
    print(f"# to_pandas: {len(frame)} rows, {frame_bytes / 1e6:.1f} MB retained")

    view_time = timed(lambda: from_run(folder).close())  # also imports the widget modules
    view, view_bytes, view_peak = retained(lambda: from_run(folder))
    view.close()
    print(f"# Explorer.from_run + snapshot: {view_time:.2f} s, retained {view_bytes / 1e6:.1f} MB "
          f"({view_bytes / records:.0f} B/record), peak {view_peak / 1e6:.1f} MB")  # fmt: skip
    per = view_bytes / records
    print(f"Explorer.from_run bytes/record [{records} records]: {per:.0f}   target <= 200   "
          f"{'ok' if per <= 200 else 'MISSED'}")  # fmt: skip

    out = folder.parent / "tb"
    export = timed(lambda: export_tensorboard(folder, out))
    events = _events(next(out.iterdir()).read_bytes())
    total = sum(map(len, events))
    fast = statistics.median(timed(lambda: crc32c_many(events)) for _ in range(3))
    sample = events[: max(2, len(events) // 100)]  # the pure-Python crc is linear in the bytes
    slow = timed(lambda: [legacy_crc32c(e) for e in sample]) * total / sum(map(len, sample))
    print(f"# export_tensorboard: {export:.2f} s for {total / 1e6:.1f} MB of events "
          f"(scaled to 24 keys x 10k steps: {export * 240_000 / records:.1f} s); crc32c of "
          f"every frame: {fast:.2f} s, pure Python {slow:.1f} s")  # fmt: skip
    crc_ratio = fast / slow
    print(f"crc32c_many/pure-Python crc [{total / 1e6:.1f} MB]: {crc_ratio:.3f}"
          f"   target <= 0.1   {'ok' if crc_ratio <= 0.1 else 'MISSED'}")  # fmt: skip


def _events(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 8], "little")
        out.append(data[pos + 12 : pos + 12 + n])
        pos += 16 + n
    return out


if __name__ == "__main__":
    main()
