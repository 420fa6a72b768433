"""Read a run folder, also while it is being written: ``read_run(path)`` -> :class:`Run`.

Each key's records are read by :class:`~.keyfile.KeyFile`: whole records only, a damaged one
dropped and counted (``run.bad_records``) while the ones after it are kept, a torn or
zero-filled tail never read as data but tried again on the next :meth:`Run.refresh`, in case
the writer was only half way through. A missing key file is a gap (``run.missing``); every
damage is listed in ``run.problems``. The records are numpy columns; ``run.to_pandas()`` is
one long DataFrame of every key.

>>> import tempfile, numpy as np, torch
>>> from torch import nn
>>> from surgeon_widgets.record import Recorder
>>> model, folder = nn.Sequential(nn.Linear(4, 3)), tempfile.mkdtemp()
>>> with Recorder(model, folder, layers=["0"], every=1, gradients=False) as rec:
...     for _ in range(3):
...         _ = model(torch.ones(2, 4)); rec.step()
>>> run = read_run(folder)
>>> run.layers, run.steps, run.state, run.status["step"]
(['0'], [0, 1, 2], 'finished', 2)
>>> run.wait(timeout=1)
True
>>> run.stats("0")["0/output"].latest.numel
6
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..engine.naming import UnknownNameError
from ..engine.series import COLUMNS, Series, import_pandas
from .keyfile import KeyFile, RunStats
from .layout import RECORD
from .runfolder import STATES, check_format, read_json, run_state

if TYPE_CHECKING:
    import pandas

__all__ = ["STATES", "Run", "RunStats", "read_run"]

KIND_ORDER = {"activation": 0, "gradient": 1, "parameter": 2}


def read_manifest(path: Path) -> dict:
    """``manifest.json`` of the run folder ``path``, checked; a clear error when it is not one."""
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(
            f"{path} is not a run folder (no manifest.json); Recorder(model, path) "
            "writes one when it starts"
        )
    try:
        manifest = read_json(manifest_path)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:  # written by atomic rename
        raise ValueError(
            f"{manifest_path} is damaged ({error}; {manifest_path.stat().st_size} bytes): the "
            "Recorder writes it whole by atomic rename, so the file was cut or changed "
            "afterwards; without it the key files cannot be named"
        ) from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{manifest_path}: a {type(manifest).__name__}, not a run manifest")
    check_format(manifest, manifest_path)
    lacking = [k for k in ("keys", "layers", "record", "rows", "world_size") if k not in manifest]
    if lacking:
        raise ValueError(f"{manifest_path}: no {', '.join(lacking)} (a damaged manifest)")
    if manifest["record"].get("size") != RECORD.size:
        raise ValueError(
            f"{manifest_path}: record size {manifest['record'].get('size')}, "
            f"expected {RECORD.size}"
        )
    return manifest


class Run:
    """A recorded run: ``layers``, ``keys``, ``steps``, ``status``, ``rows`` and ``stats(layer)``.

    :meth:`refresh` reads what was appended since; ``stats`` returns ``{key: Series}`` exactly
    as ``Explorer.stats`` does (``series.latest`` is a :class:`RunStats`).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self.keys: list[dict] = []
        self._files: list[KeyFile] = []
        self._manifest_mtime = (self.path / "manifest.json").stat().st_mtime_ns
        self._take_keys(self.manifest)
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
        """``status.json`` as it is now: ``state`` as written, ``step`` (the last step
        ``rec.step()`` ended), ``last_record``, ``records`` (recorded steps), ``updated``
        (heartbeat), ``error``, ``signal``.

        The file is rewritten once a second: a writer killed (SIGKILL, out of memory) before
        its status caught up left records the file does not count. Then ``step``,
        ``last_record`` and ``records`` come from the key files read so far, and
        ``"from_keys": True`` says so.
        """
        status = self._status_file()
        last = max((int(f.steps[-1]) for f in self._files if len(f.steps)), default=None)
        known = status.get("last_record")
        if last is None or (known is not None and known >= last):
            return status
        step = status.get("step")
        return {**status, "step": last if step is None else max(int(step), last),
                "last_record": last, "records": len(self.steps), "from_keys": True}  # fmt: skip

    def _status_file(self) -> dict:
        try:
            return read_json(self.path / "status.json")
        except (FileNotFoundError, ValueError):  # between renames on some network filesystems
            return {"state": "unknown", "step": None, "last_record": None}

    @property
    def state(self) -> str:
        """One of ``running, finished, failed, stopped, lost`` (see :data:`STATES`).

        ``stopped``: SIGTERM / SIGINT (``status["signal"]`` names it); ``lost``: the status
        says running but its heartbeat stopped and the writer is gone.
        """
        status = self._status_file()
        return "running" if status.get("state") == "unknown" else run_state(status)

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> bool:
        """Block until the run is no longer running (or ``timeout`` seconds passed); then read
        what was appended. True when it ended (``run.state`` says how)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.state == "running":
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            time.sleep(poll if left is None else min(poll, left))
        self.refresh()
        return True

    @property
    def steps(self) -> list[int]:
        """Every step at which some key was recorded, ascending."""
        return np.unique(np.concatenate([f.steps for f in self._files] or [[]])).astype(
            np.int64
        ).tolist()

    @property
    def skipped_bytes(self) -> int:
        """Bytes after the last whole valid record, summed over keys (read again next refresh)."""
        return sum(f.tail for f in self._files)

    @property
    def bad_records(self) -> dict[str, int]:
        """``{key: records dropped}``: bad magic or crc32, the records after them kept."""
        return {key["key"]: f.bad for key, f in zip(self.keys, self._files) if f.bad}

    @property
    def missing(self) -> list[str]:
        """Keys whose file is not in the folder (their records are a gap)."""
        return [key["key"] for key, f in zip(self.keys, self._files) if f.missing]

    @property
    def problems(self) -> list[str]:
        """What was damaged or missing, one line per key; ``[]`` for an intact run."""
        out = []
        for key, f in zip(self.keys, self._files):
            if f.missing:
                out.append(f"{key['key']}: {key['file']} is missing")
            if f.bad:
                out.append(f"{key['key']}: {f.bad} damaged record(s) dropped ({key['file']})")
            if f.tail:
                out.append(f"{key['key']}: {f.tail} bytes after the last valid record "
                           f"({key['file']}; incomplete, or damaged at the end)")  # fmt: skip
        return out

    @property
    def nbytes(self) -> int:
        """Memory held for the records read so far (histograms stay on disk)."""
        return sum(f.nbytes for f in self._files)

    def _take_keys(self, manifest: dict) -> None:
        # a live Explorer's run (Explorer(run_dir=)) lists a key once it first records it
        self.manifest = manifest
        for key in manifest["keys"][len(self.keys) :]:
            self.keys.append(key)
            self._files.append(KeyFile(self.path / key["file"]))

    def _new_keys(self) -> None:
        path = self.path / "manifest.json"
        try:
            mtime = path.stat().st_mtime_ns
            if mtime != self._manifest_mtime:
                self._take_keys(read_json(path))
                self._manifest_mtime = mtime
        except (FileNotFoundError, ValueError):  # between renames: the next refresh sees it
            pass

    def refresh(self) -> int:
        """Read the records appended since the last call; return how many were new."""
        self._new_keys()
        return sum(f.refresh() for f in self._files)

    def _series(self, i: int) -> Series:
        key, f = self.keys[i], self._files[i]
        return Series(key["key"], key["layer"], key["leaf"], key["kind"],
                      f.steps.tolist(), f.values(), f.training())  # fmt: skip

    def stats(self, layer: str) -> dict[str, Series]:
        """``{key: Series}`` of ``layer``: activations, then gradients, then parameters."""
        if layer not in self.layers:
            raise UnknownNameError(
                layer, self.layers, "recorded layer", "Hint: run.layers lists them"
            )
        order = sorted(range(len(self.keys)), key=lambda i: KIND_ORDER.get(self.keys[i]["kind"], 3))
        return {self.keys[i]["key"]: self._series(i) for i in order
                if self.keys[i]["layer"] == layer and len(self._files[i])}  # fmt: skip

    def to_pandas(self) -> pandas.DataFrame:
        """Every record of every key as one long DataFrame: ``layer``, ``key``, ``leaf``,
        ``kind``, ``step``, then the columns of :meth:`Series.to_pandas` (pandas needed)."""
        pd = import_pandas()
        frames = []
        for layer in self.layers:
            for series in self.stats(layer).values():
                frame = series.to_pandas().reset_index()
                for name in ("kind", "leaf", "key", "layer"):
                    frame.insert(0, name, getattr(series, name))
                frames.append(frame)
        if not frames:
            return pd.DataFrame(columns=["layer", "key", "leaf", "kind", "step", "training",
                                         *COLUMNS])  # fmt: skip
        out = pd.concat(frames, ignore_index=True)
        for name in ("layer", "key", "leaf", "kind"):
            out[name] = out[name].astype("category")
        return out

    def __repr__(self) -> str:
        s = self.status
        damage = f", {len(self.problems)} problem(s): run.problems" if self.problems else ""
        return (f"Run({str(self.path)!r}, {len(self.layers)} layers, {len(self.steps)} steps, "
                f"{run_state(s)}, last step {s.get('step')}{damage})")  # fmt: skip


def read_run(path: Path | str) -> Run:
    """Open the run folder ``path`` written by a :class:`~surgeon_widgets.Recorder`."""
    return Run(path)
