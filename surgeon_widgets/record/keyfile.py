"""One key's file of fixed-size records, read into numpy columns: ``KeyFile(path).refresh()``.

Every record is checked (magic and crc32). A bad record is dropped and counted, and reading
resynchronises on the next valid one (records are fixed-size: a flipped bit costs one record,
inserted or missing bytes only the records they touch). Bytes after the last valid record are
a tail the writer may still be completing: they are left for the next :meth:`KeyFile.refresh`.

In memory a record is its step, its offset in the file and its fields (counts in the narrowest
integer type that holds them): about 100 bytes. Histograms stay on disk and are read back,
checked again, when a :class:`RunStats` is built (``values[i]``, one block for a slice).

>>> import tempfile, numpy as np
>>> from surgeon_widgets.record.layout import FIELDS, BINS, Key
>>> from surgeon_widgets.record.runfolder import RunWriter
>>> folder = tempfile.mkdtemp()
>>> w = RunWriter(folder, {"keys": []}, [Key(0, "fc/output", "fc", "output", "activation")])
>>> for step in range(3):
...     _ = w.append(step, np.ones((1, len(FIELDS))), np.ones((1, BINS)))
>>> keys = KeyFile(f"{folder}/keys/0000.bin")
>>> keys.refresh(), keys.steps.tolist(), keys.bad
(3, [0, 1, 2], 0)
>>> values = keys.values()
>>> values[-1].numel, int(values[-1].hist.sum()), values.columns()["mean"].tolist()
(1, 64, [1.0, 1.0, 1.0])
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..engine.series import StatsTable
from ..engine.stats import TensorStats
from .layout import BINS, DTYPES, FIELDS, MAGIC, RECORD

__all__ = ["RECORD_DTYPE", "KeyFile", "RecordedStats", "RunStats", "scan"]

# the on-disk record as numpy sees it, built from layout.FIELDS so added fields come along
RECORD_DTYPE = np.dtype(
    [("magic", "S4"), ("step", "<i8"), *((name, "<f8") for name in FIELDS),
     ("hist", "<f4", (BINS,)), ("crc", "<u4")]
)  # fmt: skip
if RECORD_DTYPE.itemsize != RECORD.size:
    raise ImportError(
        f"record/keyfile.py: RECORD_DTYPE is {RECORD_DTYPE.itemsize} bytes but layout.RECORD is "
        f"{RECORD.size}: build RECORD_DTYPE from the same fields as layout.RECORD"
    )
SIZE = RECORD.size
# fields holding whole numbers, kept in the narrowest integer type (the rest stay float64)
COUNTS = frozenset(
    ["ranks", "calls", "numel", "finite", "nans", "infs", "zeros", "under", "over", "ndim",
     "dtype", "eval_calls", "mode", *(name for name in FIELDS if name.startswith("dim"))]
) & set(FIELDS)  # fmt: skip
NARROW = (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32)


@dataclass(frozen=True)
class RunStats(TensorStats):
    """:class:`TensorStats` of a recorded step, merged over ranks, plus what only a run knows.

    ``ranks``: how many ranks had data; ``calls``: forward/backward calls summed over ranks;
    ``under`` / ``over``: finite values outside the histogram's edges ``[lo, hi]``. ``shape``
    is the largest local shape seen on any rank; ``numel`` counts every value on every rank.
    """

    ranks: int = 0
    calls: int = 0
    under: int = 0
    over: int = 0


def valid(buf: memoryview, offsets: np.ndarray) -> np.ndarray:
    """Which of the records starting at ``offsets`` have the magic and a matching crc32."""
    raw = np.frombuffer(buf, np.uint8)
    ok = (raw[offsets[:, None] + np.arange(4)] == np.frombuffer(MAGIC, np.uint8)).all(axis=1)
    stored = raw[offsets[:, None] + np.arange(SIZE - 4, SIZE)].copy().view("<u4")[:, 0]
    crc, body = zlib.crc32, SIZE - 4
    ok[ok] = [crc(buf[o : o + body]) == want
              for o, want in zip(offsets[ok].tolist(), stored[ok].tolist())]  # fmt: skip
    return ok


def scan(data: bytes) -> tuple[np.ndarray, int, int]:
    """``(offsets of the valid records, bad records skipped, bytes up to the last valid one)``.

    After a bad record the next valid record is searched from the byte after its start, so a
    misaligned stretch (a torn record the writer went past) costs only the records it covers.
    """
    buf = memoryview(data)
    found, bad, pos, end = [], 0, 0, 0
    while pos + SIZE <= len(buf):
        slots = np.arange(pos, len(buf) - SIZE + 1, SIZE)
        ok = valid(buf, slots)
        first_bad = int(np.argmin(ok)) if not ok.all() else len(slots)
        found.append(slots[:first_bad])
        if first_bad:
            end = int(slots[first_bad - 1]) + SIZE
        if first_bad == len(slots):
            break
        broken = int(slots[first_bad])
        pos = _next_valid(data, broken + 1)
        if pos < 0:  # nothing valid after it: a tail, maybe still being written
            break
        bad += max(1, round((pos - broken) / SIZE))
    return (np.concatenate(found) if found else np.zeros(0, np.int64)), bad, end


def _next_valid(data: bytes, start: int) -> int:
    """Offset of the first valid record at or after ``start``; ``-1`` if there is none."""
    buf = memoryview(data)
    at = data.find(MAGIC, start)
    while 0 <= at <= len(buf) - SIZE:
        if valid(buf, np.array([at]))[0]:
            return at
        at = data.find(MAGIC, at + 1)
    return -1


def gather(data: bytes | memoryview, offsets: np.ndarray) -> np.ndarray:
    """The records at ``offsets`` of ``data`` as a :data:`RECORD_DTYPE` array (a copy)."""
    buf = memoryview(data)
    if len(offsets) and np.all(np.diff(offsets) == SIZE):  # one run: a single slice
        first = int(offsets[0])
        chunk = bytes(buf[first : first + SIZE * len(offsets)])
    else:
        chunk = b"".join(buf[int(o) : int(o) + SIZE] for o in offsets)
    return np.frombuffer(chunk, RECORD_DTYPE).copy()


def narrow(values: np.ndarray) -> np.ndarray:
    """Whole numbers in the narrowest integer type that holds them (concatenation widens)."""
    if values.size == 0:
        return values.astype(np.uint8)
    if not np.all(np.floor(values) == values):  # not whole numbers (NaN too): kept as they are
        return values.copy()
    lo, hi = values.min(), values.max()
    for kind in NARROW:
        info = np.iinfo(kind)
        if info.min <= lo and hi <= info.max:
            return values.astype(kind)
    return values.astype(np.int64)


def to_stats(v: dict, hist: np.ndarray) -> RunStats:
    """A :class:`RunStats` from one record's fields (``{name: number}``) and histogram."""
    n, numel = v["finite"], v["numel"]
    has = n > 0
    shape = tuple(int(v[f"dim{i}"]) for i in range(max(int(v["ndim"]), 0)))
    code = int(v["dtype"])
    binned = math.isfinite(v["lo"]) and math.isfinite(v["hi"])
    lo, hi = (v["lo"], v["hi"]) if binned else (v["min"], v["max"]) if has else (0.0, 0.0)
    notes = [f"{int(v['ranks'])} rank(s) had data"]
    if not binned and has:
        notes.append("no histogram at a key's first record (edges come from the previous one)")
    if v["under"] or v["over"]:
        notes.append(f"{int(v['under'])} below, {int(v['over'])} above the histogram")
    return RunStats(
        shape=shape, dtype=DTYPES[code] if 0 <= code < len(DTYPES) else "unknown",
        numel=int(numel), mean=float(v["mean"]) if has else None,
        std=math.sqrt(v["m2"] / max(n - 1, 1)) if has else None,
        min=float(v["min"]) if has else None, max=float(v["max"]) if has else None,
        zeros=v["zeros"] / numel if numel else 0.0, nans=int(v["nans"]), infs=int(v["infs"]),
        lo=float(lo), hi=float(hi), hist=hist.astype(np.float32), note="; ".join(notes),
        l2=_l2(v) if has else None,
        ranks=int(v["ranks"]), calls=int(v["calls"]), under=int(v["under"]), over=int(v["over"]),
    )  # fmt: skip


def _l2(v: dict) -> float:
    if "l2" in v:  # recorded directly
        return float(v["l2"])
    return math.sqrt(max(v["m2"] + v["finite"] * v["mean"] * v["mean"], 0.0))  # sum of squares


class RecordedStats(StatsTable):
    """One key's recorded values: numpy columns in memory, histograms read from its file.

    ``values[i]`` (and a slice, read in one block) builds :class:`RunStats`;
    :meth:`columns` gives the Series columns from memory alone.
    """

    def __init__(self, path: Path, columns: dict[str, np.ndarray]) -> None:
        self.path = path
        self._columns = columns

    def __len__(self) -> int:
        return len(self._columns["step"])

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return RecordedStats(self.path, {k: v[index] for k, v in self._columns.items()})
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"record {index} of {n}")
        return self._stats(np.array([index % n]))[0]

    def __iter__(self):
        for start in range(0, len(self), 4096):  # a block of records per file read
            yield from self._stats(np.arange(start, min(start + 4096, len(self))))

    def records(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The records (all, or ``rows``) as read back from the file: a RECORD_DTYPE array."""
        rows = np.arange(len(self)) if rows is None else rows
        if not len(rows):
            return np.zeros(0, RECORD_DTYPE)
        offsets, steps = self._columns["offset"][rows], self._columns["step"][rows]
        first = int(offsets.min())
        span = int(offsets.max()) - first + SIZE
        with open(self.path, "rb") as f:
            f.seek(first)
            data = f.read(span)
        at = offsets - first
        records = gather(data, at) if len(data) == span and valid(memoryview(data), at).all() \
            else None  # fmt: skip
        if records is None or not np.array_equal(records["step"], steps):
            raise RuntimeError(
                f"{self.path} changed since it was read (steps {steps.min()}..{steps.max()} "
                "are no longer where they were): the run folder was rewritten; read_run(path) "
                "again"
            )
        return records

    def _stats(self, rows: np.ndarray) -> list[RunStats]:
        records = self.records(rows)
        rows = records[list(FIELDS)].tolist()
        return [to_stats(dict(zip(FIELDS, row)), hist) for row, hist in zip(rows, records["hist"])]

    def columns(self) -> dict[str, np.ndarray]:
        c = self._columns
        n = c["finite"].astype(np.float64)
        numel = c["numel"].astype(np.float64)
        has = n > 0
        mean = np.where(has, c["mean"], np.nan)
        sq = c["l2"] ** 2 if "l2" in c else np.maximum(c["m2"] + n * c["mean"] * c["mean"], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "numel": c["numel"].astype(np.int64), "mean": mean,
                "std": np.where(has, np.sqrt(c["m2"] / np.maximum(n - 1, 1)), np.nan),
                "min": np.where(has, c["min"], np.nan), "max": np.where(has, c["max"], np.nan),
                "l2": np.where(has, c["l2"] if "l2" in c else np.sqrt(sq), np.nan),
                "zeros": np.where(numel > 0, c["zeros"] / np.where(numel > 0, numel, 1), 0.0),
                "nans": c["nans"].astype(np.int64), "infs": c["infs"].astype(np.int64),
            }  # fmt: skip


class KeyFile:
    """The records of one ``keys/NNNN.bin`` read so far: ``steps``, ``values()``, ``bad``.

    ``missing``: the file is not there (at the last refresh); ``bad``: records dropped for a
    wrong magic or crc32; ``tail``: bytes after the last valid record, read again next time.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.offset = 0  # bytes read up to the end of the last valid record
        self.bad = 0
        self.tail = 0
        self.missing = False
        self._chunks: list[dict[str, np.ndarray]] = []
        self._columns: dict[str, np.ndarray] = self._empty()

    @staticmethod
    def _empty() -> dict[str, np.ndarray]:
        return {"step": np.zeros(0, np.int64), "offset": np.zeros(0, np.int64),
                **{name: np.zeros(0, np.uint8 if name in COUNTS else np.float64)
                   for name in FIELDS}}  # fmt: skip

    def refresh(self) -> int:
        """Read what was appended since the last call; return how many records were new."""
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self.offset:
                    raise RuntimeError(
                        f"{self.path} is shorter ({size} bytes) than what was read from it "
                        f"({self.offset}): the run folder was rewritten; read_run(path) again"
                    )
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            self.missing = True
            return 0
        self.missing = False
        offsets, bad, used = scan(data)
        records = gather(data, offsets)
        # copies: a view of ``records`` would keep its histograms in memory
        chunk = {"step": records["step"].copy(), "offset": offsets.astype(np.int64) + self.offset}
        for name in FIELDS:
            chunk[name] = narrow(records[name]) if name in COUNTS else records[name].copy()
        if len(offsets):
            self._chunks.append(chunk)
        self.offset += used
        self.bad += bad
        self.tail = len(data) - used
        return len(offsets)

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """``step``, ``offset`` and every field, one entry per valid record read so far."""
        if self._chunks:
            self._columns = {k: np.concatenate([self._columns[k], *(c[k] for c in self._chunks)])
                             for k in self._columns}  # fmt: skip
            self._chunks = []
        return self._columns

    @property
    def steps(self) -> np.ndarray:
        return self.columns["step"]

    def __len__(self) -> int:
        return len(self.steps)

    def values(self) -> RecordedStats:
        """The records read so far as a :class:`RecordedStats` (later refreshes leave it be)."""
        return RecordedStats(self.path, self.columns)

    @property
    def nbytes(self) -> int:
        """Memory held for the records read so far."""
        return sum(v.nbytes for v in self.columns.values())
