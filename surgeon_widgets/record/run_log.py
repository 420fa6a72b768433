"""One process's live statistics appended to a run folder as they come (``Explorer(run_dir=)``).

The Recorder merges buckets over ranks and writes every key at fixed steps; a live view measures
whatever is selected, whenever its throttle lets it. :class:`RunLog` writes those
:class:`~surgeon_widgets.engine.stats.TensorStats` in the Recorder's format (same manifest,
same fixed-size records, same :func:`~surgeon_widgets.read_run`), adding a key to the manifest
the first time it is seen. Each record is flushed as it is written, so a process that dies
leaves every record before the one it was writing.

>>> import tempfile, torch
>>> from surgeon_widgets import read_run
>>> from surgeon_widgets.engine.stats import tensor_stats
>>> folder = tempfile.mkdtemp() + "/run"
>>> log = RunLog(folder, rows=[], model="Linear")
>>> for step in range(3):
...     log.add("fc/output", "fc", "output", "activation", step, tensor_stats(torch.ones(4)))
>>> log.close()
>>> run = read_run(folder)
>>> run.layers, run.steps, run.stats("fc")["fc/output"].latest.mean
(['fc'], [0, 1, 2], 1.0)
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from ..engine.stats import TensorStats
from .layout import BINS, DTYPES, FIELDS, RECORD, Key
from .runfolder import RunWriter

__all__ = ["RunLog", "stats_row"]

F = {name: i for i, name in enumerate(FIELDS)}
KIND = {"weight": "parameter"}  # the live view's kind -> the Recorder's, where they are one


def stats_row(stats: TensorStats) -> tuple[np.ndarray, np.ndarray]:
    """The record fields and histogram of one tensor's stats (one rank, one call)."""
    row = np.zeros(len(FIELDS))
    finite = stats.numel - stats.nans - stats.infs
    has = stats.mean is not None
    values = {
        "ranks": 1, "calls": 1, "numel": stats.numel, "finite": finite, "nans": stats.nans,
        "infs": stats.infs, "zeros": round(stats.zeros * stats.numel),
        "mean": stats.mean if has else math.nan,
        "m2": (stats.std or 0.0) ** 2 * max(finite - 1, 0) if has else 0.0,
        "min": stats.min if has else math.nan, "max": stats.max if has else math.nan,
        "lo": stats.lo if has else math.nan, "hi": stats.hi if has else math.nan,
        "under": 0, "over": 0, "ndim": len(stats.shape),
        "dtype": DTYPES.index(stats.dtype) if stats.dtype in DTYPES else -1,
        "l2": stats.l2 if stats.l2 is not None else math.nan,
    }  # fmt: skip
    dims = [i for i, name in enumerate(FIELDS) if name.startswith("dim")]
    for i, size in zip(dims, stats.shape):
        row[i] = size
    for name, value in values.items():
        if name in F:  # a field the format has (fields are only ever added)
            row[F[name]] = value
    hist = np.zeros(BINS, dtype=np.float32)
    if has and len(stats.hist) == BINS:
        hist[:] = stats.hist
    return row, hist


class RunLog:
    """Appends one process's records to the run folder ``path``; keys join as they first come.

    Args:
        path: the run folder; it must not hold a run yet (a record is never overwritten).
        rows: the model's module tree rows (``Explorer.rows``), so the folder needs no model.
        model: the model's class name, kept in the manifest.
    """

    def __init__(self, path: str | Path, rows: list[dict], model: str) -> None:
        self.path = Path(path)
        if (self.path / "manifest.json").exists() or (
            self.path.is_dir() and any(self.path.iterdir())
        ):
            raise FileExistsError(
                f"run_dir {str(self.path)!r} is not empty; a live run needs a new folder "
                f"(e.g. {str(self.path.with_name(self.path.name + '-2'))!r}) so that no "
                "recorded step is overwritten"
            )
        self._keys: dict[str, Key] = {}
        self._layers: list[str] = []
        self._base = {
            "record": {"size": RECORD.size, "struct": RECORD.format, "fields": FIELDS,
                       "bins": BINS, "hist_dtype": "float32", "dtypes": DTYPES},
            "every": 1, "gradients": False, "params": False, "world_size": 1,
            "writer_rank": 0, "model": model, "wrapper": model, "rows": rows,
            "created": time.time(), "source": "Explorer",
        }  # fmt: skip
        self._writer = RunWriter(self.path, self._manifest(), [])
        self.closed = False

    @property
    def keys(self) -> list[str]:
        """The keys written so far, in the order they first came."""
        return list(self._keys)

    def add(
        self, key: str, layer: str, leaf: str, kind: str, step: int, stats: TensorStats,
        training: bool | None = None,
    ) -> None:  # fmt: skip
        """Append one record of ``key`` at ``step`` (a no-op once closed)."""
        if self.closed:
            return
        if key not in self._keys:
            self._add_key(Key(len(self._keys), key, layer, leaf, KIND.get(kind, kind)))
        index = self._keys[key].index
        row, hist = stats_row(stats)
        rows = np.zeros((index + 1, len(FIELDS)))
        hists = np.zeros((index + 1, BINS), dtype=np.float32)
        rows[index], hists[index] = row, hist
        self._writer.append(step, rows, hists, [index], beat=False)

    def close(self, state: str = "finished", error: str | None = None) -> None:
        """Mark the run ``state`` in ``status.json`` and close the files (once)."""
        if not self.closed:
            self.closed = True
            self._writer.close(state, error)

    def _add_key(self, key: Key) -> None:
        self._keys[key.key] = key
        if key.layer not in self._layers:
            self._layers.append(key.layer)
        self._base["gradients"] |= key.kind == "gradient"
        self._base["params"] |= key.kind == "parameter"
        self._writer.add_key(key, self._manifest())

    def _manifest(self) -> dict:
        return {**self._base, "keys": [k.to_json() for k in self._keys.values()],
                "layers": list(self._layers)}  # fmt: skip
