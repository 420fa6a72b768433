"""The run folder on disk: ``manifest.json`` (once), ``status.json`` (heartbeat), ``keys/NNNN.bin``.

- ``manifest.json`` is written once, by atomic rename: the keys, the record layout, world size,
  the module tree rows (so a notebook needs no model).
- ``status.json``: ``state`` (running / finished / failed / stopped), ``step`` (the last step
  ``rec.step()`` ended), the last recorded step, ``records`` (the recorded steps; a reader
  counts them from the key files where a killed writer's status fell behind, ``Run.status``),
  the writer's pid and host, a wall-clock
  heartbeat every ``interval`` seconds, the error or signal if any; replaced by atomic rename.
  A reader derives one more state, ``lost`` (:func:`run_state`): the heartbeat stopped and the
  writer is gone.
- ``keys/NNNN.bin``: append-only fixed-size records of one key (:data:`~.layout.RECORD`), each
  with a crc32 of its own bytes, so a reader can take whole records and stop at a torn tail.

>>> import tempfile, numpy as np
>>> from surgeon_widgets.record.layout import FIELDS, BINS, Key
>>> folder = tempfile.mkdtemp()
>>> w = RunWriter(folder, {"keys": []}, [Key(0, "fc/output", "fc", "output", "activation")])
>>> w.append(3, np.ones((1, len(FIELDS))), np.zeros((1, BINS)))
480
>>> w.close("finished"); run_state(read_json(f"{folder}/status.json"))
'finished'
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .layout import BINS, FIELDS, FORMAT, MAGIC, RECORD, Key

__all__ = [
    "FORMAT", "HEARTBEAT", "LOST_AFTER", "STATES", "RunWriter", "check_format", "first_step",
    "pack_record", "pack_records", "pid_alive", "read_json", "run_state", "write_json",
]  # fmt: skip

STATES = ("running", "finished", "failed", "stopped", "lost")
HEARTBEAT = 1.0  # seconds between the writer's status rewrites
LOST_AFTER = 5  # heartbeats missed before a run whose writer is gone reads lost

_tmp_serial = itertools.count()


def write_json(path: Path | str, data: dict) -> None:
    """Write ``data`` to ``path`` by atomic rename: readers see the old or the new file, whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_tmp_serial)}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, allow_nan=True))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_json(path: Path | str) -> dict:
    return json.loads(Path(path).read_text())


# RECORD as a numpy dtype, to pack a step's records at once
_PACKED = np.dtype([("magic", "S4"), ("step", "<i8"), ("fields", "<f8", (len(FIELDS),)),
                    ("hist", "<f4", (BINS,)), ("crc", "<u4")])  # fmt: skip
assert _PACKED.itemsize == RECORD.size


def pack_record(step: int, row: np.ndarray, hist: np.ndarray) -> bytes:
    """One record: magic, step, the merged fields, the histogram, and a crc32 of those bytes."""
    return pack_records(step, row[None], hist[None])[0]


def pack_records(step: int | np.ndarray, rows: np.ndarray, hists: np.ndarray) -> list[bytes]:
    """:func:`pack_record` of each row of ``rows`` / ``hists`` (one numpy pass for all);
    ``step``: one for all rows, or each row's."""
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


def check_format(manifest: dict, where: Path | str) -> None:
    """Refuse a manifest of another format or major version; newer minor versions only add."""
    name, major = FORMAT.split("/")[0], FORMAT.split("/")[1].split(".")[0]
    found = str(manifest.get("format"))
    got_name, _, version = found.partition("/")
    if got_name != name or version.split(".")[0] != major:
        raise ValueError(
            f"{where}: format {found!r}; this surgeon_widgets reads {name}/{major}.x "
            f"(it writes {FORMAT}); a run of another major version needs the version that wrote it"
        )


def pid_alive(pid: Any) -> bool:
    """Is process ``pid`` running on this host (a zombie is not)?"""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:  # killed but not yet reaped by its parent (torchrun, multiprocessing)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def run_state(status: dict, now: float | None = None) -> str:
    """One of :data:`STATES`: the written state, or ``lost`` for a ``running`` run whose
    heartbeat is older than :data:`LOST_AFTER` intervals and whose writer is gone (its pid,
    same host) or silent (another host)."""
    state = str(status.get("state") or "running")
    if state != "running":
        return state if state in STATES else "running"
    interval = float(status.get("interval") or HEARTBEAT)
    age = (time.time() if now is None else now) - float(status.get("updated") or 0.0)
    if age <= LOST_AFTER * interval:
        return "running"
    if status.get("host") == socket.gethostname() and pid_alive(status.get("pid")):
        return "running"  # alive, only slow to beat (a long call holding the interpreter)
    return "lost"


def _last_record_step(file: Path) -> int | None:
    """The step of the last whole valid record of a key file (a torn tail is skipped)."""
    size = RECORD.size
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        return None
    for end in range(len(data) - len(data) % size, 0, -size):
        chunk = data[end - size : end]
        if chunk[:4] == MAGIC and zlib.crc32(chunk[:-4]) == int.from_bytes(chunk[-4:], "little"):
            return int(struct.unpack_from("<q", chunk, 4)[0])
    return None


def first_step(path: Path | str, keys: list[str], every: int, resume: bool) -> int:
    """The first step a Recorder writes into ``path``: 0 for a new run, and after the last
    step of the run there with ``resume`` (same keys and ``every``). Raises, changing nothing,
    where the folder holds something it must not append to or replace."""
    path = Path(path)
    if not path.exists() or not any(path.iterdir()):
        return 0
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise FileExistsError(
            f"{path} is not empty and holds no run (no manifest.json); record into a new or "
            "empty folder. Nothing in it was changed."
        )
    try:
        manifest = read_json(manifest_path)
    except ValueError as error:
        raise ValueError(
            f"{manifest_path} is torn or not JSON ({error}); nothing was changed"
        ) from error
    old = [k["key"] for k in manifest.get("keys", [])]
    try:
        status = read_json(path / "status.json")
    except (FileNotFoundError, ValueError):
        status = {}
    steps = [_last_record_step(path / k["file"]) for k in manifest.get("keys", [])]
    last = max([s for s in [*steps, status.get("step")] if isinstance(s, int)], default=-1)
    if not resume:
        raise FileExistsError(
            f"{path} already holds a run ({len(old)} keys, last step {last}, "
            f"{run_state(status) if status else 'no status'}). Pass resume=True to append to it, "
            "or record into a new folder. Nothing in it was changed."
        )
    check_format(manifest, manifest_path)
    if manifest["record"]["size"] != RECORD.size:
        raise ValueError(
            f"{manifest_path}: records of {manifest['record']['size']} bytes, this version "
            f"writes {RECORD.size}; resume into a new folder"
        )
    if old != keys or manifest.get("every") != every:
        missing = [k for k in old if k not in keys]
        added = [k for k in keys if k not in old]
        what = (f"every={manifest.get('every')} there, every={every} here" if old == keys
                else f"not recorded now: {missing}; new: {added}" if missing or added
                else f"the same keys in another order: there {old}, here {keys}")  # fmt: skip
        raise ValueError(
            f"resume=True: the run in {path} recorded other keys ({what}). Resume with the "
            "same layers, gradients, params and every, or record into a new folder."
        )
    return last + 1


class RunWriter:
    """Creates the folder (or reopens it to resume), writes the manifest once, appends records,
    keeps the status fresh (every :meth:`beat` and every ``interval`` seconds from a thread).

    Status writes may come from the training thread, the heartbeat thread and a signal handler
    that interrupts either: one lock, and a write that was overtaken by a newer status is
    written again, so the file always ends as the newest status.
    """

    def __init__(
        self,
        path: Path | str,
        manifest: dict,
        keys: list[Key],
        fsync: bool = False,
        resume_at: int | None = None,
        interval: float = HEARTBEAT,
        watch: Callable[[], str | None] | None = None,
    ) -> None:
        self.path = Path(path)
        (self.path / "keys").mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.bytes = 0
        self._lock = threading.RLock()
        self._version = 0
        now = time.time()
        fresh = {
            "state": "running", "step": None, "last_record": None, "records": 0,
            "started": now, "updated": now, "interval": interval, "pid": os.getpid(),
            "host": socket.gethostname(), "error": None, "signal": None, "resumed": [],
        }  # fmt: skip
        if resume_at is None:
            for key in keys:  # the folder was checked empty (first_step)
                (self.path / key.file).write_bytes(b"")
            write_json(self.path / "manifest.json", {"format": FORMAT, **manifest})
            self._status: dict[str, Any] = fresh
        else:
            try:
                old = read_json(self.path / "status.json")
            except (FileNotFoundError, ValueError):
                old = {}
            resumed = [*old.get("resumed", []), {"step": resume_at, "time": now,
                                                 "previous_state": run_state(old)}]  # fmt: skip
            self._status = {**fresh, "records": old.get("records", 0),
                            "last_record": old.get("last_record"),
                            "started": old.get("started", now), "resumed": resumed}  # fmt: skip
            for key in keys:  # a torn tail (a killed writer) would misalign what follows
                file = self.path / key.file
                with open(file, "ab") as f:
                    f.truncate(f.tell() - f.tell() % RECORD.size)
        self._save()
        # unbuffered: one write call per record, seen by readers at once (no flush)
        self._files = [open(self.path / key.file, "ab", buffering=0)  # noqa: SIM115
                       for key in keys]  # fmt: skip
        self._stop = threading.Event()
        self._every_beat: weakref.WeakMethod | None = None
        # the thread holds the writer weakly: a writer nobody closed still goes, and its thread
        self._thread = threading.Thread(target=_beat_forever,
                                        args=(weakref.ref(self), self._stop, interval, watch),
                                        daemon=True, name="surgeon-recorder-heartbeat")  # fmt: skip
        self._thread.start()

    def every_beat(self, fn: Callable[[], Any]) -> None:
        """Also call the method ``fn`` on every heartbeat, before the status is written (held
        weakly: its object's lifetime is its owner's)."""
        self._every_beat = weakref.WeakMethod(fn)

    @property
    def state(self) -> str:
        return str(self._status["state"])

    def append(
        self, step: int, rows: np.ndarray, hists: np.ndarray, which: list[int] | None = None,
        beat: bool = True,
    ) -> int:  # fmt: skip
        """Append the records of ``which`` keys (default all) at ``step``; return bytes written.

        ``beat=False``: the status follows at most once a second (a live view's many records).
        """
        has = np.zeros((1, len(rows)), dtype=bool)
        has[0, list(range(len(rows))) if which is None else which] = True
        return self.append_steps(np.array([step]), rows[None], hists[None], has, beat)

    def append_steps(
        self, steps: np.ndarray, rows: np.ndarray, hists: np.ndarray,
        has: np.ndarray | None = None, beat: bool = False,
    ) -> int:  # fmt: skip
        """Append ``len(steps)`` steps' records: ``rows[s, key]``, ``hists[s, key]`` where
        ``has[s, key]`` (default: where the row's ``ranks`` field is > 0); one write per key.
        """
        if has is None:
            has = rows[:, :, 0] > 0
        by_key = has.T  # [key, step]: each key's records, in step order
        records = pack_records(np.broadcast_to(steps[None], by_key.shape)[by_key],
                               rows.transpose(1, 0, 2)[by_key],
                               hists.transpose(1, 0, 2)[by_key])  # fmt: skip
        counts = by_key.sum(1).tolist()
        written, at = 0, 0
        for i, count in enumerate(counts):
            if not count:
                continue
            data = b"".join(records[at : at + count])
            at += count
            self._files[i].write(data)
            if self.fsync:
                os.fsync(self._files[i].fileno())
            written += len(data)
        self.bytes += written
        last = int(steps[-1])
        ended = self._status["step"]  # rec.step() may be ahead of the records (Pending)
        before = self._status["last_record"]
        # recorded steps: a live Explorer appends one key at a time, several at one step
        new = len(steps) if before is None else int((steps > before).sum())
        changes = {"step": last if ended is None else max(ended, last), "last_record": last,
                   "records": self._status["records"] + new}  # fmt: skip
        if beat:
            self._update(**changes)
        else:  # the heartbeat thread writes it within a second
            self._status.update(changes)
        return written

    def add_key(self, key: Key, manifest: dict) -> None:
        """Start the (empty) file of a new ``key`` and replace the manifest that lists it."""
        if key.index != len(self._files):
            raise ValueError(f"key {key.key!r} has index {key.index}, expected {len(self._files)}")
        (self.path / key.file).write_bytes(b"")
        self._files.append(open(self.path / key.file, "ab", buffering=0))  # noqa: SIM115
        write_json(self.path / "manifest.json", {"format": FORMAT, **manifest})

    def beat(self, step: int) -> None:
        """``rec.step()`` ended ``step`` (written by the next heartbeat)."""
        self._status["step"] = step

    def stopped(self, signal_name: str) -> None:
        """A stop signal came: say so now (the process may end right after)."""
        if self.state == "running":
            self._update(state="stopped", signal=signal_name)

    def fail(self, error: str) -> None:
        """Mark the run failed now (another rank's error; the files stay open)."""
        if self.state == "running":
            self._update(state="failed", error=error)

    def close(self, state: str = "finished", error: str | None = None) -> None:
        """Close the files and write the final state (a stopped or failed run stays so)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        for f in self._files:
            f.close()
        self._files = []
        if self.state == "running":
            self._update(state=state, error=error)
        elif error is not None and self._status.get("error") is None:
            self._update(error=error)
        else:
            self._update()

    def _update(self, **changes: Any) -> None:
        with self._lock:
            self._status.update(changes, updated=time.time())
            self._version += 1
            self._save()

    def _save(self) -> None:
        with self._lock:
            while True:
                version = self._version
                write_json(self.path / "status.json", dict(self._status))
                if version == self._version:
                    return


def _beat_forever(
    me: weakref.ref[RunWriter],
    stop: threading.Event,
    interval: float,
    watch: Callable[[], str | None] | None,
) -> None:
    """Rewrite the status every ``interval``; ``watch()``: another rank's error, if any."""
    while not stop.wait(interval):
        writer = me()
        if writer is None:
            return
        try:
            failure = watch() if watch is not None else None
            if failure is not None:
                writer.fail(failure)
            also = writer._every_beat() if writer._every_beat is not None else None
            if also is not None:
                also()
            writer._update()
        except OSError:  # the folder went away; the training must not notice
            pass
        del writer
