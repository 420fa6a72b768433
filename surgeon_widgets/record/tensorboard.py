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

import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..engine.series import Series
from .layout import BINS
from .reader import read_run

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


def _rows(n: int, *parts: bytes | np.ndarray) -> np.ndarray:
    """``n`` encoded messages side by side: a ``bytes`` part is the same in every row, an array
    part is one little-endian number (or a row of them) per message."""
    columns = []
    for part in parts:
        if isinstance(part, bytes):
            columns.append(np.broadcast_to(np.frombuffer(part, np.uint8), (n, len(part))))
        else:
            columns.append(np.ascontiguousarray(part.reshape(n, -1)).view(np.uint8))
    return np.concatenate(columns, axis=1)


def _values(key: str, series: Series) -> list[bytes]:
    """Per record of a recorded ``series``: its histogram and finite scalars, Summary values."""
    records, c = series.values.records(), series.columns()  # a RecordedStats: read at once
    n = len(records)
    tag = _bytes(1, key.encode())
    total = (c["numel"] - c["nans"] - c["infs"]).astype(np.float64)
    has = np.isfinite(c["mean"])
    mean, std = np.where(has, c["mean"], 0.0), np.where(has, c["std"], 0.0)
    sums = mean * total
    squares = std * std * np.maximum(total - 1, 1) + total * mean * mean
    low, high = np.where(has, c["min"], 0.0), np.where(has, c["max"], 0.0)
    binned = (records["under"] > 0) | (records["over"] > 0) | records["hist"].any(axis=1)
    lo = np.where(np.isfinite(records["lo"]), records["lo"], low)
    width = (np.where(np.isfinite(records["hi"]), records["hi"], high) - lo) / BINS
    bins = records["hist"].shape[1]
    limits = np.concatenate([lo[:, None], lo[:, None] + width[:, None] * np.arange(1, bins + 1),
                             np.full((n, 1), np.finfo(np.float64).max)], axis=1)  # fmt: skip
    hist = records["hist"].astype(np.float64)
    # the bins leave exact zeros out (a bar of their own in the Explorer): TensorBoard has no
    # such bar, so they go back into the bin holding 0
    zeros = records["zeros"]
    with np.errstate(divide="ignore", invalid="ignore"):
        at = np.floor(np.where(width > 0, (0.0 - lo) / width, 0.0))
    at = np.clip(np.nan_to_num(at), 0, bins - 1).astype(np.int64)
    hist[np.arange(n), at] += zeros
    binned |= zeros > 0
    counts = np.concatenate([records["under"][:, None], hist, records["over"][:, None]],
                            axis=1)  # fmt: skip
    out = [b""] * n
    for rows, lim, cnt in (  # outer buckets around the bins; a first record: one bucket
        (np.flatnonzero(binned), limits, counts),
        (np.flatnonzero(~binned), high[:, None], total[:, None]),
    ):
        if not len(rows):
            continue
        k = len(rows)
        packed = _varint(8 * lim.shape[1])
        histo_len = 5 * 9 + 2 * (1 + len(packed) + 8 * lim.shape[1])
        value_len = len(tag) + 1 + len(_varint(histo_len)) + histo_len
        encoded = _rows(
            k, b"\x0a" + _varint(value_len) + tag + b"\x2a" + _varint(histo_len) + b"\x09",
            low[rows], b"\x11", high[rows], b"\x19", total[rows], b"\x21", sums[rows], b"\x29",
            squares[rows], b"\x32" + packed, lim[rows].astype("<f8"), b"\x3a" + packed,
            cnt[rows].astype("<f8"),
        )  # fmt: skip
        for i, row in zip(rows, encoded):
            out[i] = row.tobytes()
    for name, column in (("mean", c["mean"]), ("std", c["std"]), ("nans", c["nans"])):
        inner = _bytes(1, f"{key}/{name}".encode()) + b"\x15"
        values = column.astype(np.float64)
        rows = np.flatnonzero(np.isfinite(values))
        encoded = _rows(len(rows), b"\x0a" + _varint(len(inner) + 4) + inner,
                        values[rows].astype("<f4"))  # fmt: skip
        for i, row in zip(rows, encoded):
            out[i] += row.tobytes()
    return out


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
            for step, values in zip(series.steps, _values(key, series)):
                by_step.setdefault(step, []).append(values)
    events = [_event(0, wall, version="brain.Event:2")]
    events += [_event(step, wall + step * 1e-3, summary=b"".join(by_step[step]))
               for step in sorted(by_step)]  # fmt: skip
    path.write_bytes(frames(events))
    return path
