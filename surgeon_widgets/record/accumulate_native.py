""":func:`.accumulate.accumulate`'s numbers for CPU float64 / float32 values in one C loop.

The recorder's cost per key is mostly fixed overhead: a batch of small values took fifteen
numpy calls (0.2-0.4 ms for 24 keys), a 16k-value output one compiled kernel call and a count
(0.4 ms). ``accumulate.c`` does a call's counts, sums, centred squares, extremes and buckets
in two passes over its values, with no temporary, for a few microseconds of fixed cost.

It is compiled when the package is built (``setup.py``: the extension ``_accumulate`` beside
this file) and loaded here with ctypes, from this folder only, when this module is imported;
nothing is compiled at run time. Where it is missing (installed without a C compiler) or was
built for other sizes than Python's (:func:`load` checks those ``accumulate.c`` exports, and
in a checkout that it was built from this ``accumulate.c``), one ``RuntimeWarning`` says so,
:data:`LIBRARY` is ``None`` and :func:`calls` and :func:`one` answer ``False``: the caller takes
the numpy / torch path, which gives the same counts, extremes and buckets (sums agree to
rounding).

>>> import numpy as np, torch
>>> from surgeon_widgets.record.layout import MAX_WIDTH, SUM_WIDTH, FINITE, SUM, MAX
>>> LIBRARY is not None  # built with the package
True
>>> sums, maxes = np.zeros((2, SUM_WIDTH)), np.full((2, MAX_WIDTH), -np.inf)
>>> x = np.array([1.0, 2.0, 3.0, 4.0, np.nan])
>>> calls(sums, maxes, x, [0, 1], [3, 2], np.zeros(2))
True
>>> sums[:, FINITE].tolist(), sums[:, SUM].tolist(), maxes[:, MAX].tolist()
([3.0, 1.0], [6.0, 4.0], [3.0, 4.0])
>>> s = torch.zeros(2, SUM_WIDTH, dtype=torch.float64)
>>> m = torch.zeros(2, MAX_WIDTH, dtype=torch.float64)
>>> table = Table(s, m, np.zeros(2))
>>> many([torch.tensor([1.0, 5.0]), torch.tensor([1, 2])], [1, 0], table)  # int64: left
[1]
>>> s[:, SUM].tolist(), one(torch.tensor([2.0]), 0, table), s[:, SUM].tolist()
([0.0, 6.0], True, [2.0, 6.0])
"""

from __future__ import annotations

import array
import ctypes
import hashlib
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .buckets import _LOW, _SHIFT, BUCKETS, EDGES, SIDE
from .layout import (
    BINS,
    FINITE,
    HIST,
    M2,
    MAX,
    MAX_WIDTH,
    NANS,
    NEG_MIN,
    SQ,
    SUM,
    SUM_WIDTH,
    ZEROS,
)  # fmt: skip

__all__ = ["C_DTYPES", "LIBRARY", "Table", "calls", "load", "many", "one", "rebin"]

C_DTYPES = (torch.float32, torch.float64)  # what :func:`one` reads as it is

_P, _N, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
_FUNCTIONS = {
    "sw_key_f64": (None, [_P, _N, _N, _P]),
    "sw_key_f32": (None, [_P, _N, _N, _P]),
    "sw_many": (None, [_P, _P, _P, _P, _N, _P]),
    "sw_calls_f64": (None, [_P, _P, _P, _N, _P, _P, _P, _P]),
    "sw_rebin": (None, [_P, _P, _P, _N, _N, _P, _P, _P]),
    "sw_clear": (None, [_P, _N, _P]),
}

# the order of accumulate.c's enum
_LAYOUT = np.array([FINITE, NANS, ZEROS, SUM, M2, SQ, HIST, SUM_WIDTH, MAX, NEG_MIN, MAX_WIDTH,
                    _SHIFT, _LOW, SIDE], dtype=np.int64)  # fmt: skip
_LAYOUT_AT = _LAYOUT.ctypes.data
_MOST_BINS = 256  # accumulate.c's BLOCK
_TABLE_WORDS = 4  # accumulate.c's Table: the centres', sums', maxes' and layout's addresses
_SOURCE = Path(__file__).with_name("accumulate.c")  # in a checkout (not shipped in a wheel)


def _built() -> Path | None:
    """The library built with the package: ``_accumulate`` with this Python's extension suffix,
    in this module's folder (never anywhere else)."""
    for suffix in EXTENSION_SUFFIXES:
        path = Path(__file__).with_name(f"_accumulate{suffix}")
        if path.is_file():
            return path
    return None


def _sizes() -> dict[str, int]:
    """What Python's tables need of ``accumulate.c``, in its ``sw_sizes`` order."""
    return {
        "layout entries (accumulate_native._LAYOUT)": len(_LAYOUT),
        "buckets per row (buckets.BUCKETS)": BUCKETS,
        "most display bins (accumulate_native._MOST_BINS)": _MOST_BINS,
        "Table bytes (accumulate_native._TABLE_WORDS int64 words)": _TABLE_WORDS * 8,
    }


def load() -> Any:
    """The C loop built with the package, as a ctypes library, its sizes checked against
    Python's; ``None``, with one ``RuntimeWarning`` saying why, where it is missing, cannot be
    loaded or differs."""
    path = _built()
    try:
        if path is None:
            raise FileNotFoundError(
                f"no _accumulate{EXTENSION_SUFFIXES[0]} beside {Path(__file__).name}: "
                "installed without a C compiler; in a checkout, build it: `pip install -e .`"
            )
        lib = ctypes.CDLL(str(path))
        wrong = _differences(lib)
        if wrong:
            raise ValueError(f"{path.name} differs from Python: {'; '.join(wrong)}")
        for name, (restype, argtypes) in _FUNCTIONS.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        return lib
    except (OSError, AttributeError, ValueError) as error:
        warnings.warn(
            f"the recorder's C loop is not used, its slower numpy / torch path is: {error}",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def _differences(lib: Any) -> list[str]:
    """How the library's sizes (and, in a checkout, its source) differ from Python's."""
    wanted = _sizes()
    lib.sw_sizes.restype, lib.sw_sizes.argtypes = _N, [_P, _N]
    got = (ctypes.c_int64 * len(wanted))()
    count = lib.sw_sizes(got, len(wanted))
    if count != len(wanted):
        return [f"it has {count} sizes, Python checks {len(wanted)}"]
    wrong = [f"{name}: C {c}, Python {py}"
             for (name, py), c in zip(wanted.items(), got) if c != py]  # fmt: skip
    if _SOURCE.is_file():
        lib.sw_source.restype, lib.sw_source.argtypes = ctypes.c_char_p, []
        if lib.sw_source().decode() != hashlib.sha256(_SOURCE.read_bytes()).hexdigest():
            wrong.append(f"built from another {_SOURCE.name} (rebuild: `pip install -e .`)")
    return wrong


LIBRARY: Any = load()
"""The C loops (a ctypes library), or ``None``: the numpy / torch path everywhere. Read at each
call: set it to ``None`` to turn the C loop off (as ``benchmarks/bench_recorder.py`` does)."""


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
    lib = LIBRARY
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


class Table:
    """Where :func:`one` and :func:`many` add a key's values: the rows of contiguous float64 CPU
    tables ``sums[k, SUM_WIDTH]`` / ``maxes[k, MAX_WIDTH]`` (kept alive and in place by the
    caller), each key's bucket centre (``centres``, read as it is at each call: change it in
    place), and their display bins."""

    def __init__(self, sums: torch.Tensor, maxes: torch.Tensor, centres: np.ndarray) -> None:
        s, m = _rows(sums, SUM_WIDTH), _rows(maxes, MAX_WIDTH)
        if s is None or m is None or len(sums) != len(maxes):
            raise ValueError("sums and maxes must be contiguous float64 CPU tables of as many rows")
        self.keys = len(sums)
        # accumulate.c's Table (_TABLE_WORDS): the centres', sums', maxes' and layout's addresses
        self._words = np.array([0, s, m, _LAYOUT_AT], dtype=np.int64)
        self.address = self._words.ctypes.data
        self._bins = np.zeros((self.keys, BINS))
        self._next = np.zeros(self.keys)
        if centres.dtype != np.float64 or not centres.flags.c_contiguous or (
                centres.shape != (self.keys,)):  # fmt: skip
            raise ValueError(f"centres must be {self.keys} contiguous float64 values")
        self.centres = centres
        self._words[0] = c = centres.ctypes.data
        # addresses looked up once: each costs 2 us
        self._at = (s, m, c, self._bins.ctypes.data, self._next.ctypes.data)

    def display_bins(self) -> np.ndarray | None:
        """:func:`rebin` of the tables as they are now (``[k, BINS]``, overwritten by the next
        call); ``None`` when the C loop is not loaded."""
        lib = LIBRARY
        if lib is None:
            return None
        s, m, c, out, _ = self._at
        lib.sw_rebin(s, m, c, self.keys, BINS, _EDGES_AT, out, _LAYOUT_AT)
        return self._bins

    def clear(self) -> np.ndarray | None:
        """Zero the tables for the next step (maxes: -inf), touching only each key's buckets
        between its min and max; first each key's next centre (``.merge.next_centres``: its
        mean, or its centre where it had no finite value), returned. ``None``: the C loop is not
        loaded (nothing done)."""
        lib = LIBRARY
        if lib is None:
            return None
        lib.sw_clear(self.address, self.keys, self._at[4])
        return self._next.copy()


def one(values: torch.Tensor, key: int, table: Table) -> bool:
    """One call of ``values`` (a contiguous CPU float32 / float64 tensor, any shape) into key
    ``key`` of ``table``; ``False`` (nothing added) when it cannot run."""
    lib = LIBRARY
    f32 = None if lib is None else _float32(values)
    if f32 is None:
        return False
    (lib.sw_key_f32 if f32 else lib.sw_key_f64)(values.data_ptr(), values.numel(), key,
                                                table.address)  # fmt: skip
    return True


def many(values: list[torch.Tensor], keys: list[int], table: Table) -> list[int]:
    """:func:`one` for each of ``values`` (call ``i`` of key ``keys[i]``), in one C call; the
    positions of those it could not add (all of them where the C loop is not loaded)."""
    lib = LIBRARY
    if lib is None:
        return list(range(len(values)))
    left, at, sizes, f32s, rows = [], [], [], [], []
    for i, value in enumerate(values):
        f32 = _float32(value)
        if f32 is None:
            left.append(i)
            continue
        n = value.numel()
        if n:
            at.append(value.data_ptr())
            sizes.append(n)
            f32s.append(f32)
            rows.append(keys[i])
    if at:
        a, n, f, k = (array.array("q", column) for column in (at, sizes, f32s, rows))
        lib.sw_many(a.buffer_info()[0], n.buffer_info()[0], f.buffer_info()[0],
                    k.buffer_info()[0], len(at), table.address)  # fmt: skip
    return left


def rebin(sums: np.ndarray, maxes: np.ndarray, centres: np.ndarray, out: np.ndarray) -> bool:
    """:func:`.buckets.rebin` of merged buckets (``sums[k, SUM_WIDTH]``, ``maxes[k, MAX_WIDTH]``,
    each key's bucket ``centres``; ``[min, max]`` and the count from them) into
    ``out[k, bins]``, reading only the buckets between each key's min and max; ``False``
    (nothing written) when it cannot run."""
    lib = LIBRARY
    s, m = _rows(sums, SUM_WIDTH), _rows(maxes, MAX_WIDTH)
    k, bins = out.shape
    if lib is None or s is None or m is None or not 0 < bins <= _MOST_BINS:
        return False
    if len(sums) != k or len(maxes) != k or len(centres) != k or (
            out.dtype != np.float64 or not out.flags.c_contiguous):  # fmt: skip
        raise ValueError(f"rebin: {len(sums)} sums, {len(maxes)} maxes, {len(centres)} "
                         f"centres into {out.dtype} {out.shape}")  # fmt: skip
    centres = np.ascontiguousarray(centres, dtype=np.float64)
    lib.sw_rebin(s, m, centres.ctypes.data, k, bins, _EDGES_AT, out.ctypes.data, _LAYOUT_AT)
    return True


_EDGES = np.ascontiguousarray(EDGES, dtype=np.float64)
_EDGES_AT = _EDGES.ctypes.data


def _float32(values: torch.Tensor) -> bool | None:
    """Is ``values`` float32 (else float64), read in place by the C loop; ``None``: it is not
    (another dtype or device, a view with gaps, a lazily negated view)."""
    dtype = values.dtype
    f32 = dtype is torch.float32
    if (not f32 and dtype is not torch.float64) or type(values) not in _PLAIN or (
            not values.is_cpu or values.layout is not torch.strided
            or not values.is_contiguous()):  # fmt: skip
        return None
    return None if values.is_neg() else f32  # a lazily negated view: its memory holds -values


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _int64(values: Any) -> array.array:
    if isinstance(values, array.array) and values.typecode == "q":
        return values
    return array.array("q", values)
