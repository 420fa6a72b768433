"""Where every number lives: the two device buckets (columns per key) and the on-disk record.

Each recorded key (``layer/output``, ``layer/grad_output``, ``layer/weight``,
``layer/weight.grad``) owns one row of the sum bucket (summed over calls and ranks) and one row
of the max bucket (maximum over calls and ranks). The sum bucket's histogram is
:data:`~.buckets.BUCKETS` fixed log-spaced buckets (:mod:`.buckets`); a record on disk is one
fixed-size, checksummed struct per key and step holding the :data:`BINS` display bins.

Format ``surgeon_widgets.run/1.2`` added the fields ``l2``, ``eval_calls`` and ``mode`` after
those of ``1.1`` (a minor version only appends fields).

>>> RECORD.size, SUM_WIDTH, MAX_WIDTH, FORMAT
(480, 1547, 12, 'surgeon_widgets.run/1.2')
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch

from .buckets import BUCKETS

__all__ = [
    "BINS", "DTYPES", "FIELDS", "FORMAT", "HEAD", "MAGIC", "MAX_DIMS", "MAX_WIDTH", "MODES",
    "RECORD", "SUM_WIDTH", "Key",
]  # fmt: skip

FORMAT = "surgeon_widgets.run/1.2"
BINS = 64
MAX_DIMS = 6

# sum bucket columns: counts known on the host (written once per step), device sums, buckets
HAS, CALLS, NUMEL, EVALS = range(4)
HOST_SUMS = 4
FINITE, NANS, ZEROS, SUM, M2, SQ = range(HOST_SUMS, HOST_SUMS + 6)
HIST = HOST_SUMS + 6
SUM_WIDTH = HIST + BUCKETS
# max bucket columns: exact extremes (min stored negated), then host-known columns: which
# modes the row holds (train / eval forwards), the largest shape seen, the dtype
MAX, NEG_MIN = 0, 1
TRAINED, EVALED, NDIM = 2, 3, 4
DIMS = NDIM + 1
DTYPE = DIMS + MAX_DIMS
MAX_WIDTH = DTYPE + 1
HEAD = 4  # rows ahead of the max bucket's keys: step, -step, layer-list hash, -hash

DTYPES = [
    "float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8",
    "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
]  # fmt: skip
# a record's ``mode``: the forwards its values come from (gradients and parameters: train)
MODES = ["train", "eval", "mixed"]

# one record on disk: magic, step, the merged numbers, the histogram, crc32 of all before it.
# ``lo``/``hi`` are the display bins' edges (the record's min/max); ``under``/``over`` count
# finite values outside them (0 since 1.2: the buckets cover every finite value).
FIELDS = [
    "ranks", "calls", "numel", "finite", "nans", "infs", "zeros", "mean", "m2", "min", "max",
    "lo", "hi", "under", "over", "ndim", *(f"dim{i}" for i in range(MAX_DIMS)), "dtype",
    "l2", "eval_calls", "mode",
]  # fmt: skip
MAGIC = b"SWR1"
RECORD = struct.Struct(f"<4sq{len(FIELDS)}d{BINS}fI")


def dtype_code(dtype: torch.dtype) -> int:
    """Index of ``dtype`` in :data:`DTYPES` (``-1`` if it is not listed)."""
    name = str(dtype).removeprefix("torch.")
    return DTYPES.index(name) if name in DTYPES else -1


@dataclass(frozen=True)
class Key:
    """One recorded statistic: ``key`` = ``layer/leaf``; ``kind``: activation / gradient /
    parameter / parameter_gradient."""

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


def make_keys(
    layers: list[str], params_of: dict[str, list[str]], gradients: bool, params: bool
) -> list[Key]:
    """A Recorder's keys, in file order: each layer's output, then (``gradients``) their
    gradients, then (``params``) each layer's parameters ``params_of[layer]`` and their
    ``.grad``."""
    specs = [(f"{name}/output", name, "output", "activation") for name in layers]
    if gradients:
        specs += [(f"{n}/grad_output", n, "grad_output", "gradient") for n in layers]
    if params:
        for name in layers:
            for pname in params_of[name]:
                specs.append((f"{name}/{pname}", name, pname, "parameter"))
                if gradients:
                    specs.append((f"{name}/{pname}.grad", name, f"{pname}.grad",
                                  "parameter_gradient"))  # fmt: skip
    return [Key(i, *spec) for i, spec in enumerate(specs)]
