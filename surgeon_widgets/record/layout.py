"""Where every number lives: the two device buckets (columns per key) and the on-disk record.

Each recorded key (``layer/output``, ``layer/grad_output``, ``layer/weight``) owns one row of
the sum bucket (summed over calls and ranks) and one row of the max bucket (maximum over calls
and ranks). A record on disk is one fixed-size, checksummed struct per key and step.

>>> RECORD.size, SUM_WIDTH, MAX_WIDTH
(456, 76, 10)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch

__all__ = [
    "BINS", "DTYPES", "FIELDS", "HEAD", "MAGIC", "MAX_DIMS", "MAX_WIDTH", "RECORD", "SUM_WIDTH",
    "Key",
]  # fmt: skip

BINS = 64
MAX_DIMS = 6

# sum bucket columns: counts, float64 sums, centred sums, histogram with under/overflow
HAS, CALLS, NUMEL, FINITE, NANS, INFS, ZEROS, SUM, M2, SQ, UNDER, OVER = range(12)
HIST = 12
SUM_WIDTH = HIST + BINS
# max bucket columns: exact extremes (min stored negated), the largest shape seen, the dtype
MAX, NEG_MIN, NDIM = 0, 1, 2
DIMS = 3
DTYPE = DIMS + MAX_DIMS
MAX_WIDTH = DTYPE + 1
HEAD = 4  # rows ahead of the max bucket's keys: step, -step, layer-list hash, -hash

DTYPES = [
    "float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8",
    "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
]  # fmt: skip

# one record on disk: magic, step, the merged numbers, the histogram, crc32 of all before it
FIELDS = [
    "ranks", "calls", "numel", "finite", "nans", "infs", "zeros", "mean", "m2", "min", "max",
    "lo", "hi", "under", "over", "ndim", *(f"dim{i}" for i in range(MAX_DIMS)), "dtype",
]  # fmt: skip
MAGIC = b"SWR1"
RECORD = struct.Struct(f"<4sq{len(FIELDS)}d{BINS}fI")


def dtype_code(dtype: torch.dtype) -> int:
    """Index of ``dtype`` in :data:`DTYPES` (``-1`` if it is not listed)."""
    name = str(dtype).removeprefix("torch.")
    return DTYPES.index(name) if name in DTYPES else -1


@dataclass(frozen=True)
class Key:
    """One recorded statistic: ``key`` = ``layer/leaf``; ``kind``: activation/gradient/parameter."""

    index: int
    key: str
    layer: str
    leaf: str
    kind: str

    @property
    def file(self) -> str:
        return f"keys/{self.index:04d}.bin"

    def to_json(self) -> dict:
        return {"index": self.index, "key": self.key, "layer": self.layer, "leaf": self.leaf,
                "kind": self.kind, "file": self.file}  # fmt: skip
