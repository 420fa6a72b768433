"""Read a run folder, also while it is being written: ``read_run(path)`` -> :class:`Run`.

The reader takes whole records only and stops at the first record whose magic or crc32 is
wrong (a torn or zero-filled tail is never read as data; it is tried again on the next
:meth:`Run.refresh`, in case the writer was only half way through).

>>> import tempfile, numpy as np, torch
>>> from torch import nn
>>> from surgeon_widgets.record import Recorder
>>> model, folder = nn.Sequential(nn.Linear(4, 3)), tempfile.mkdtemp()
>>> with Recorder(model, folder, layers=["0"], every=1, gradients=False) as rec:
...     for _ in range(3):
...         _ = model(torch.ones(2, 4)); rec.step()
>>> run = read_run(folder)
>>> run.layers, run.steps, run.status["state"]
(['0'], [0, 1, 2], 'finished')
>>> run.stats("0")["0/output"].latest.numel
6
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..engine.naming import UnknownNameError
from ..engine.series import Series
from ..engine.stats import TensorStats
from .layout import BINS, DTYPES, FIELDS, MAGIC, MODES, RECORD
from .runfolder import FORMAT, read_json

__all__ = ["Run", "RunStats", "read_run"]

F = {name: i for i, name in enumerate(FIELDS)}


@dataclass(frozen=True)
class RunStats(TensorStats):
    """:class:`TensorStats` of a recorded step, merged over ranks, plus what only a run knows.

    ``ranks``: how many ranks had data; ``calls``: forward/backward calls summed over ranks;
    ``under`` / ``over``: finite values outside the histogram's edges ``[lo, hi]``; ``mode``:
    the forwards the record holds (train / eval / mixed), ``eval_calls``: eval forwards left
    out of a training record. ``shape``
    is the largest local shape seen on any rank; ``numel`` counts every value on every rank.
    """

    ranks: int = 0
    calls: int = 0
    under: int = 0
    over: int = 0
    mode: str = "train"
    eval_calls: int = 0


def to_stats(row: np.ndarray, hist: np.ndarray) -> RunStats:
    """A :class:`RunStats` from one record's fields and histogram."""
    v = dict(zip(FIELDS, row.tolist()))
    n, numel = v["finite"], v["numel"]
    has = n > 0
    shape = tuple(int(d) for d in row[F["dim0"] : F["dim0"] + max(int(v["ndim"]), 0)])
    code = int(v["dtype"])
    binned = math.isfinite(v["lo"]) and math.isfinite(v["hi"])
    lo, hi = (v["lo"], v["hi"]) if binned else (v["min"], v["max"]) if has else (0.0, 0.0)
    notes = [f"{int(v['ranks'])} rank(s) had data"]
    if v["eval_calls"]:
        notes.append(f"{int(v['eval_calls'])} eval forward(s) left out")
    if v["under"] or v["over"]:
        notes.append(f"{int(v['under'])} below, {int(v['over'])} above the histogram")
    return RunStats(
        shape=shape, dtype=DTYPES[code] if 0 <= code < len(DTYPES) else "unknown",
        numel=int(numel), mean=v["mean"] if has else None,
        std=math.sqrt(v["m2"] / max(n - 1, 1)) if has else None,
        min=v["min"] if has else None, max=v["max"] if has else None,
        zeros=v["zeros"] / numel if numel else 0.0, nans=int(v["nans"]), infs=int(v["infs"]),
        lo=float(lo), hi=float(hi), hist=hist.astype(np.float32), note="; ".join(notes),
        l2=v["l2"] if has else None,
        ranks=int(v["ranks"]), calls=int(v["calls"]), under=int(v["under"]), over=int(v["over"]),
        mode=MODES[int(v["mode"])], eval_calls=int(v["eval_calls"]),
    )  # fmt: skip


def read_records(data: bytes) -> tuple[list[tuple[int, np.ndarray, np.ndarray]], int]:
    """Whole valid records from the start of ``data`` and the bytes they span (up to a bad one)."""
    out = []
    size = RECORD.size
    end = 0
    while end + size <= len(data):
        chunk = data[end : end + size]
        if chunk[:4] != MAGIC or zlib.crc32(chunk[:-4]) != int.from_bytes(chunk[-4:], "little"):
            break
        values = RECORD.unpack(chunk)
        step = values[1]
        row = np.array(values[2 : 2 + len(FIELDS)], dtype=np.float64)
        hist = np.array(values[2 + len(FIELDS) : 2 + len(FIELDS) + BINS], dtype=np.float32)
        out.append((step, row, hist))
        end += size
    return out, end


class Run:
    """A recorded run: ``layers``, ``keys``, ``steps``, ``status``, ``rows`` and ``stats(layer)``.

    :meth:`refresh` reads what was appended since; ``stats`` returns ``{key: Series}`` exactly
    as ``Explorer.stats`` does (``series.latest`` is a :class:`RunStats`).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        manifest_path = self.path / "manifest.json"
        if not manifest_path.exists():
            raise FileNotFoundError(
                f"{self.path} is not a run folder (no manifest.json); Recorder(model, path) "
                "writes one when it starts"
            )
        self.manifest = read_json(manifest_path)
        if self.manifest.get("format") != FORMAT:
            raise ValueError(
                f"{manifest_path}: format {self.manifest.get('format')!r}, expected {FORMAT!r}"
            )
        if self.manifest["record"]["size"] != RECORD.size:
            raise ValueError(
                f"{manifest_path}: record size {self.manifest['record']['size']}, "
                f"expected {RECORD.size}"
            )
        self.keys: list[dict] = self.manifest["keys"]
        self._offsets = [0] * len(self.keys)
        self._data: list[list[tuple[int, RunStats]]] = [[] for _ in self.keys]
        self.skipped_bytes = 0  # bytes after the last whole valid record, summed over keys
        self.refresh()

    @property
    def layers(self) -> list[str]:
        """The recorded layers, in the order they were given."""
        return list(self.manifest["layers"])

    @property
    def rows(self) -> list[dict]:
        """The model's module tree rows (as ``Explorer.rows``)."""
        return list(self.manifest["rows"])

    @property
    def world_size(self) -> int:
        return int(self.manifest["world_size"])

    @property
    def status(self) -> dict:
        """``status.json`` as it is now: ``state`` (running / finished / failed), ``step``, ..."""
        try:
            return read_json(self.path / "status.json")
        except (FileNotFoundError, ValueError):  # between renames on some network filesystems
            return {"state": "unknown", "step": None, "last_record": None}

    @property
    def steps(self) -> list[int]:
        """Every step at which some key was recorded, ascending."""
        return sorted({step for data in self._data for step, _ in data})

    def refresh(self) -> int:
        """Read the records appended since the last call; return how many were new."""
        new = 0
        skipped = 0
        for i, key in enumerate(self.keys):
            path = self.path / key["file"]
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets[i])
                    data = f.read()
            except FileNotFoundError:
                continue
            records, used = read_records(data)
            self._offsets[i] += used
            skipped += len(data) - used
            self._data[i].extend((step, to_stats(row, hist)) for step, row, hist in records)
            new += len(records)
        self.skipped_bytes = skipped
        return new

    def stats(self, layer: str) -> dict[str, Series]:
        """``{key: Series}`` of ``layer``: activations, then gradients, then parameters."""
        if layer not in self.layers:
            raise UnknownNameError(
                layer, self.layers, "recorded layer", "Hint: run.layers lists them"
            )
        order = {"activation": 0, "gradient": 1, "parameter": 2}
        out = {}
        for i, key in sorted(enumerate(self.keys), key=lambda ik: order.get(ik[1]["kind"], 3)):
            if key["layer"] != layer or not self._data[i]:
                continue
            out[key["key"]] = Series(
                key["key"], key["layer"], key["leaf"], key["kind"],
                [s for s, _ in self._data[i]], [v for _, v in self._data[i]],
            )  # fmt: skip
        return out

    def __repr__(self) -> str:
        s = self.status
        return (f"Run({str(self.path)!r}, {len(self.layers)} layers, {len(self.steps)} steps, "
                f"{s.get('state')}, last step {s.get('step')})")  # fmt: skip


def read_run(path: Path | str) -> Run:
    """Open the run folder ``path`` written by a :class:`~surgeon_widgets.Recorder`."""
    return Run(path)
