"""Export a run folder as TensorBoard event files, without the tensorboard package.

Each record becomes a histogram (tag = the key, with the underflow/overflow counts as outer
buckets) and scalars ``key/mean``, ``key/std``, ``key/nans``. The file is TFRecord framing
(length, masked crc32c, data, masked crc32c) around hand-encoded ``Event`` protobufs.

>>> import struct
>>> crc32c(b"123456789") == 0xE3069283
True
>>> len(_varint(300)), _varint(300)
(2, b'\\xac\\x02')
"""

from __future__ import annotations

import math
import socket
import struct
import time
from pathlib import Path

from .layout import BINS
from .reader import RunStats, read_run

__all__ = ["crc32c", "export_tensorboard"]


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


_TABLE = _table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord uses."""
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF).to_bytes(4, "little")


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire) + payload


def _bytes(number: int, data: bytes) -> bytes:
    return _field(number, 2, _varint(len(data)) + data)


def _double(number: int, value: float) -> bytes:
    return _field(number, 1, struct.pack("<d", value))


def _event(
    step: int, wall: float, summary: bytes | None = None, version: str | None = None
) -> bytes:
    out = _double(1, wall) + _field(2, 0, _varint(step))
    if version is not None:
        out += _bytes(3, version.encode())
    if summary is not None:
        out += _bytes(5, summary)
    return out


def _scalar(tag: str, value: float) -> bytes:
    return _bytes(1, _bytes(1, tag.encode()) + _field(2, 5, struct.pack("<f", value)))


def _histogram(tag: str, s: RunStats) -> bytes:
    n = s.numel - s.nans - s.infs
    mean = s.mean or 0.0
    var = (s.std or 0.0) ** 2 * max(n - 1, 1)
    if s.under or s.over or s.hist.any():
        width = (s.hi - s.lo) / BINS
        limits = [s.lo, *(s.lo + width * (i + 1) for i in range(BINS)), 1.7976931348623157e308]
        counts = [float(s.under), *map(float, s.hist), float(s.over)]
    else:  # a first record has no bins yet: one bucket holding every value
        limits, counts = [s.max if s.max is not None else 0.0], [float(n)]
    histo = (
        _double(1, s.min if s.min is not None else 0.0)
        + _double(2, s.max if s.max is not None else 0.0)
        + _double(3, float(n)) + _double(4, mean * n) + _double(5, var + n * mean * mean)
        + _bytes(6, struct.pack(f"<{len(limits)}d", *limits))
        + _bytes(7, struct.pack(f"<{len(counts)}d", *counts))
    )  # fmt: skip
    return _bytes(1, _bytes(1, tag.encode()) + _bytes(5, histo))


def _frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + _masked(length) + data + _masked(data)


def export_tensorboard(run_path: str | Path, out: str | Path) -> Path:
    """Write the records of the run at ``run_path`` as one TensorBoard event file in ``out``.

    Returns the event file's path (``tensorboard --logdir OUT`` shows it).
    """
    run = read_run(run_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    wall = float(run.manifest.get("created", time.time()))
    path = out / f"events.out.tfevents.{int(wall)}.{socket.gethostname()}.surgeon_widgets"
    by_step: dict[int, list[bytes]] = {}
    for layer in run.layers:
        for key, series in run.stats(layer).items():
            for step, s in zip(series.steps, series.values):
                values = [_histogram(key, s)]
                for name, v in (("mean", s.mean), ("std", s.std), ("nans", float(s.nans))):
                    if v is not None and math.isfinite(v):
                        values.append(_scalar(f"{key}/{name}", v))
                by_step.setdefault(step, []).extend(values)
    with open(path, "wb") as f:
        f.write(_frame(_event(0, wall, version="brain.Event:2")))
        for step in sorted(by_step):
            f.write(_frame(_event(step, wall + step * 1e-3, summary=b"".join(by_step[step]))))
    return path
