"""The run folder on disk: ``manifest.json`` (once), ``status.json`` (heartbeat), ``keys/NNNN.bin``.

- ``manifest.json`` is written once, by atomic rename: the keys, the record layout, world size,
  the module tree rows (so a notebook needs no model).
- ``status.json``: ``state`` (running / finished / failed), the last step, the last recorded
  step, a wall-clock heartbeat, the error if any; replaced by atomic rename each time.
- ``keys/NNNN.bin``: append-only fixed-size records of one key (:data:`~.layout.RECORD`), each
  with a crc32 of its own bytes, so a reader can take whole records and stop at a torn tail.

>>> import tempfile, numpy as np
>>> from surgeon_widgets.record.layout import FIELDS, BINS, Key
>>> folder = tempfile.mkdtemp()
>>> w = RunWriter(folder, {"keys": []}, [Key(0, "fc/output", "fc", "output", "activation")])
>>> w.append(3, np.ones((1, len(FIELDS))), np.zeros((1, BINS)))
480
>>> w.close("finished"); read_json(f"{folder}/status.json")["state"]
'finished'
"""

from __future__ import annotations

import json
import os
import socket
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .layout import BINS, FIELDS, FORMAT, MAGIC, RECORD, Key

__all__ = ["FORMAT", "RunWriter", "pack_record", "pack_records", "read_json", "write_json"]


def write_json(path: Path | str, data: dict) -> None:
    """Write ``data`` to ``path`` by atomic rename: readers see the old or the new file, whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=True))
    os.replace(tmp, path)


def read_json(path: Path | str) -> dict:
    return json.loads(Path(path).read_text())


# RECORD as a numpy dtype, to pack a step's records at once
_PACKED = np.dtype([("magic", "S4"), ("step", "<i8"), ("fields", "<f8", (len(FIELDS),)),
                    ("hist", "<f4", (BINS,)), ("crc", "<u4")])  # fmt: skip
assert _PACKED.itemsize == RECORD.size


def pack_record(step: int, row: np.ndarray, hist: np.ndarray) -> bytes:
    """One record: magic, step, the merged fields, the histogram, and a crc32 of those bytes."""
    return pack_records(step, row[None], hist[None])[0]


def pack_records(step: int, rows: np.ndarray, hists: np.ndarray) -> list[bytes]:
    """:func:`pack_record` of each row of ``rows`` / ``hists`` (one numpy pass for all)."""
    packed = np.zeros(len(rows), dtype=_PACKED)
    packed["magic"], packed["step"] = MAGIC, step
    packed["fields"], packed["hist"] = rows, hists
    raw = packed.tobytes()
    size, body = RECORD.size, RECORD.size - 4
    out = []
    for start in range(0, len(raw), size):
        record = raw[start : start + body]
        out.append(record + zlib.crc32(record).to_bytes(4, "little"))
    return out


class RunWriter:
    """Creates the folder, writes the manifest once, appends records, keeps the status fresh."""

    def __init__(
        self, path: Path | str, manifest: dict, keys: list[Key], fsync: bool = False
    ) -> None:
        self.path = Path(path)
        (self.path / "keys").mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.bytes = 0
        self._status: dict[str, Any] = {
            "state": "running", "step": 0, "last_record": None, "records": 0,
            "started": time.time(), "updated": time.time(), "pid": os.getpid(),
            "host": socket.gethostname(), "error": None,
        }  # fmt: skip
        for key in keys:  # a new run in an old folder starts from empty files
            (self.path / key.file).write_bytes(b"")
        write_json(self.path / "manifest.json", {"format": FORMAT, **manifest})
        write_json(self.path / "status.json", self._status)
        self._files = [open(self.path / key.file, "ab") for key in keys]  # noqa: SIM115
        self._last_beat = 0.0

    def append(
        self, step: int, rows: np.ndarray, hists: np.ndarray, which: list[int] | None = None
    ) -> int:
        """Append the records of ``which`` keys (default all) at ``step``; return bytes written."""
        written = 0
        which = list(range(len(rows))) if which is None else which
        for i, data in zip(which, pack_records(step, rows[which], hists[which])):
            self._files[i].write(data)
            self._files[i].flush()
            if self.fsync:
                os.fsync(self._files[i].fileno())
            written += len(data)
        self.bytes += written
        self._status.update(last_record=step, records=self._status["records"] + 1)
        # at most one status.json a second: its rename costs more than all of a step's records
        self.beat(step)
        return written

    def beat(self, step: int, force: bool = False) -> None:
        """Update the heartbeat (at most once a second unless ``force``)."""
        now = time.time()
        self._status["step"] = step
        if force or now - self._last_beat >= 1.0:
            self._status["updated"] = now
            write_json(self.path / "status.json", self._status)
            self._last_beat = now

    def close(self, state: str = "finished", error: str | None = None) -> None:
        for f in self._files:
            f.close()
        self._files = []
        self._status.update(state=state, error=error)
        self.beat(self._status["step"], force=True)
