""":func:`.accumulate.accumulate`'s numbers for CPU float64 / float32 values in one C loop.

The recorder's cost per key is mostly fixed overhead: a batch of small values took fifteen
numpy calls (0.2-0.4 ms for 24 keys), a 16k-value output one compiled kernel call and a count
(0.4 ms). ``accumulate.c`` does a call's counts, sums, centred squares, extremes and buckets
in two passes over its values, with no temporary, for a few microseconds of fixed cost. It is
built in the background (:class:`~..engine.native.NativeLibrary`); until then, and where no C
compiler is found, :func:`calls` and :func:`one` answer ``False`` and the caller takes the
numpy / torch path, which gives the same counts, extremes and buckets (sums agree to rounding).

>>> import numpy as np, torch
>>> from surgeon_widgets.record.layout import MAX_WIDTH, SUM_WIDTH, FINITE, SUM, MAX
>>> LIBRARY.wait()
True
>>> sums, maxes = np.zeros((2, SUM_WIDTH)), np.full((2, MAX_WIDTH), -np.inf)
>>> x = np.array([1.0, 2.0, 3.0, 4.0, np.nan])
>>> calls(sums, maxes, x, [0, 1], [3, 2], np.zeros(2))
True
>>> sums[:, FINITE].tolist(), sums[:, SUM].tolist(), maxes[:, MAX].tolist()
([3.0, 1.0], [6.0, 4.0], [3.0, 4.0])
"""

from __future__ import annotations

import array
import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..engine.native import NativeLibrary
from .buckets import _LOW, _SHIFT, SIDE
from .layout import FINITE, HIST, M2, MAX, MAX_WIDTH, NANS, NEG_MIN, SQ, SUM, SUM_WIDTH, ZEROS

__all__ = ["C_DTYPES", "LIBRARY", "calls", "one", "row_addresses"]

C_DTYPES = (torch.float32, torch.float64)  # what :func:`one` reads as it is

_P, _N, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
LIBRARY = NativeLibrary(
    Path(__file__).with_name("accumulate.c"),
    {
        "sw_one_f64": (None, [_P, _N, _F, _P, _P, _P]),
        "sw_one_f32": (None, [_P, _N, _F, _P, _P, _P]),
        "sw_calls_f64": (None, [_P, _P, _P, _N, _P, _P, _P, _P]),
    },
)
"""The compiled loops (``LIBRARY.wait()`` builds them now; ``LIBRARY.enabled = False`` before
the first use keeps the Python path)."""

# the order of accumulate.c's enum
_LAYOUT = np.array([FINITE, NANS, ZEROS, SUM, M2, SQ, HIST, SUM_WIDTH, MAX, NEG_MIN, MAX_WIDTH,
                    _SHIFT, _LOW, SIDE], dtype=np.int64)  # fmt: skip
_LAYOUT_AT = _LAYOUT.ctypes.data


def _rows(a: np.ndarray | torch.Tensor, width: int) -> int | None:
    """The address of a C-contiguous float64 table ``[k, width]`` (a CPU tensor or array)."""
    if isinstance(a, torch.Tensor):
        ok = a.device.type == "cpu" and a.dtype == torch.float64 and a.is_contiguous()
        return a.data_ptr() if ok and a.shape[-1] == width else None
    ok = a.dtype == np.float64 and a.flags.c_contiguous and a.shape[-1] == width
    return a.ctypes.data if ok else None


def calls(
    sums: np.ndarray | torch.Tensor,
    maxes: np.ndarray | torch.Tensor,
    x: np.ndarray,
    keys: Any,
    sizes: Any,
    centres: np.ndarray,
) -> bool:
    """:func:`.accumulate.accumulate_calls` in C; ``False`` (nothing added) when it cannot run.

    ``keys`` / ``sizes``: int sequences (an ``array.array("q")`` is passed without a copy).
    """
    lib = LIBRARY.get()
    if lib is None:
        return False
    s, m = _rows(sums, SUM_WIDTH), _rows(maxes, MAX_WIDTH)
    if s is None or m is None or x.dtype != np.float64 or not x.flags.c_contiguous:
        return False
    keys, sizes = _int64(keys), _int64(sizes)
    n = len(keys)
    rows_ok = n == 0 or 0 <= min(keys) <= max(keys) < len(sums)
    if len(sizes) != n or sum(sizes) > len(x) or not rows_ok:
        raise ValueError(f"{n} keys, {len(sizes)} sizes ({sum(sizes)} values) for {len(x)} "
                         f"values and {len(sums)} rows")  # fmt: skip
    centres = np.ascontiguousarray(centres, dtype=np.float64)
    lib.sw_calls_f64(x.ctypes.data, keys.buffer_info()[0], sizes.buffer_info()[0], n,
                     centres.ctypes.data, s, m, _LAYOUT_AT)  # fmt: skip
    return True


def row_addresses(sums: torch.Tensor, maxes: torch.Tensor) -> list[tuple[int, int]]:
    """Each key's ``(sums row, maxes row)`` addresses for :func:`one` (contiguous float64 CPU
    tables ``[k, SUM_WIDTH]`` / ``[k, MAX_WIDTH]``, kept alive and in place by the caller)."""
    s, m = _rows(sums, SUM_WIDTH), _rows(maxes, MAX_WIDTH)
    if s is None or m is None or len(sums) != len(maxes):
        raise ValueError("sums and maxes must be contiguous float64 CPU tables of as many rows")
    return [(s + 8 * SUM_WIDTH * i, m + 8 * MAX_WIDTH * i) for i in range(len(sums))]


def one(values: torch.Tensor, centre: float, rows: tuple[int, int]) -> bool:
    """One call of ``values`` (a contiguous CPU float32 / float64 tensor, any shape) into one
    key's rows (``rows``: from :func:`row_addresses`); ``False`` (nothing added) when it
    cannot run."""
    lib = LIBRARY.get()
    if lib is None or type(values) not in _PLAIN or not values.is_cpu:
        return False
    fn = lib.sw_one_f32 if values.dtype is torch.float32 else (
        lib.sw_one_f64 if values.dtype is torch.float64 else None)  # fmt: skip
    if fn is None or values.layout is not torch.strided or not values.is_contiguous():
        return False
    if values.is_neg():  # a lazily negated view: its memory holds -values
        return False
    fn(values.data_ptr(), values.numel(), centre, rows[0], rows[1], _LAYOUT_AT)
    return True


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _int64(values: Any) -> array.array:
    if isinstance(values, array.array) and values.typecode == "q":
        return values
    return array.array("q", values)
