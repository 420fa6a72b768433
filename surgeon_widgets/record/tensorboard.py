"""Export a run folder as TensorBoard event files, without the tensorboard package.

Each record becomes a histogram (tag = the key, with the underflow/overflow counts as outer
buckets) and scalars ``key/mean``, ``key/std``, ``key/nans``. The file is TFRecord framing
(length, masked crc32c, data, masked crc32c) around hand-encoded ``Event`` protobufs; the
crc32c of every frame is computed at once with numpy (:func:`crc32c_many`).

>>> crc32c(b"123456789") == 0xE3069283, crc32c(b"") == 0
(True, True)
>>> [hex(c) for c in crc32c_many([b"a", bytes(32), b"123456789"])]
['0xc1d04330', '0x8a9136aa', '0xe3069283']
>>> len(_varint(300)), _varint(300)
(2, b'\\xac\\x02')
"""

from __future__ import annotations

import math
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .layout import BINS
from .reader import RunStats, read_run

__all__ = ["crc32c", "crc32c_many", "export_tensorboard", "frames"]


POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _zeros(state: np.ndarray, count: int) -> np.ndarray:
    """CRC registers ``state`` after ``count`` more zero bytes (no init, no final xor)."""
    for _ in range(count):
        state = _BYTE[state & 0xFF] ^ (state >> 8)
    return state


def _byte_table() -> np.ndarray:
    c = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        c = np.where(c & 1, (c >> 1) ^ np.uint32(POLY), c >> 1).astype(np.uint32)
    return c


_BYTE = _byte_table()
# four bytes at a time: the register XOR the next 4 bytes, then 4 zero bytes, which is linear
# in the register, so it is the XOR of a lookup of its low and of its high 16 bits
_HALF = np.arange(1 << 16, dtype=np.uint32)
_LOW, _HIGH = _zeros(_HALF, 4), _zeros(_HALF << np.uint32(16), 4)
BATCH = 1 << 24  # bytes of one padded block of messages


def crc32c_many(messages: Sequence[bytes]) -> np.ndarray:
    """CRC-32C of each message, computed side by side with numpy (uint32 array).

    Messages of similar length are stacked right-aligned in a zero-padded block (leading zeros
    leave a zero register unchanged), the block is run 4 bytes a step for all rows at once, and
    the init value's effect, a function of the length alone, is added at the end.
    """
    lengths = np.array([len(m) for m in messages], dtype=np.int64)
    out = np.zeros(len(messages), np.uint32)
    order = np.argsort(lengths, kind="stable")
    start = 0
    while start < len(order):
        first = int(lengths[order[start]])
        stop = start + 1
        while stop < len(order):  # a block of rows with lengths within 2x, at most BATCH bytes
            n = int(lengths[order[stop]])
            if n > 2 * first + 64 or (stop - start + 1) * n > BATCH:
                break
            stop += 1
        rows = order[start:stop]
        width = -(-int(lengths[rows[-1]]) // 4) * 4
        block = np.zeros((len(rows), width), np.uint8)
        for r, i in enumerate(rows):
            if lengths[i]:
                block[r, width - lengths[i] :] = np.frombuffer(messages[i], np.uint8)
        words = np.ascontiguousarray(block.view("<u4").T)
        state = np.zeros(len(rows), np.uint32)
        for word in words:
            state ^= word
            state = _LOW[state & 0xFFFF] ^ _HIGH[state >> 16]
        out[rows] = state
        start = stop
    return out ^ _init_effect(lengths) ^ np.uint32(0xFFFFFFFF)


def _init_effect(lengths: np.ndarray) -> np.ndarray:
    """The register a 0xFFFFFFFF init becomes after each length of zero bytes."""
    if not len(lengths):
        return np.zeros(0, np.uint32)
    low, high = _LOW.tolist(), _HIGH.tolist()
    words, state = [], 0xFFFFFFFF
    for _ in range(int(lengths.max()) // 4 + 1):
        words.append(state)
        state = low[state & 0xFFFF] ^ high[state >> 16]
    state = np.array(words, np.uint32)[lengths // 4]
    for k in range(1, 4):
        tail = lengths % 4 >= k
        state[tail] = _zeros(state[tail], 1)
    return state


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord uses."""
    return int(crc32c_many([data])[0])


def _masked(crcs: np.ndarray) -> np.ndarray:
    """TFRecord's masked crc: rotated right by 15 bits, plus a constant."""
    c = crcs.astype(np.uint64)
    return ((((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF).astype("<u4")


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


def frames(events: Sequence[bytes]) -> bytes:
    """TFRecord framing of ``events``: length, its masked crc, the event, its masked crc."""
    lengths = [struct.pack("<Q", len(e)) for e in events]
    length_crcs, event_crcs = _masked(crc32c_many(lengths)), _masked(crc32c_many(events))
    return b"".join(
        part
        for length, lc, event, ec in zip(lengths, length_crcs, events, event_crcs)
        for part in (length, lc.tobytes(), event, ec.tobytes())
    )


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
    events = [_event(0, wall, version="brain.Event:2")]
    events += [_event(step, wall + step * 1e-3, summary=b"".join(by_step[step]))
               for step in sorted(by_step)]  # fmt: skip
    path.write_bytes(frames(events))
    return path
