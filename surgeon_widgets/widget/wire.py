"""Wire form of the live stats (see ``js/PROTOCOL.md``): JSON items plus binary histogram buffers.

Each item points at its histogram with ``{buffer, dtype, shape}``; at most ``BUDGET`` bytes per
layer per update (items that do not fit are left out).

>>> import torch
>>> from surgeon_widgets.engine.stats import tensor_stats
>>> from surgeon_widgets.widget.history import Record
>>> rec = Record("fc/output", "fc", "output", "activation", 0, tensor_stats(torch.ones(3)))
>>> content, buffers = stats_message([rec])
>>> content["type"], content["items"][0]["hist"], len(buffers[0])
('stats', {'buffer': 0, 'dtype': 'float32', 'shape': [64]}, 256)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping

from .history import Record

__all__ = ["BUDGET", "fit_budget", "item", "payload_size", "snapshot_message", "stats_message"]

BUDGET = 4096
Message = tuple[dict, list[bytes]]


def _num(value: float | None) -> float | None:
    # JSON has no NaN/Inf: a sum that overflowed is shown as missing, not as a wrong number
    return value if value is not None and math.isfinite(value) else None


def item(record: Record, buffer: int) -> dict:
    """The JSON part of one :class:`Record`; its histogram is ``buffers[buffer]``."""
    s = record.stats
    mode = {} if record.training is None else {"training": record.training}
    return {
        "key": record.key,
        "layer": record.layer,
        "leaf": record.leaf,
        "kind": record.kind,
        "step": record.step,
        **mode,  # absent when not known (a recorded run): the view shows no train / eval
        "shape": list(s.shape),
        "dtype": s.dtype,
        "numel": s.numel,
        "mean": _num(s.mean),
        "std": _num(s.std),
        "min": _num(s.min),
        "max": _num(s.max),
        "zeros": s.zeros,
        "nans": s.nans,
        "infs": s.infs,
        "l2": _num(s.l2),
        "hist": {"buffer": buffer, "dtype": "float32", "shape": [len(s.hist)]},
        "lo": _num(s.lo) or 0.0,
        "hi": _num(s.hi) or 0.0,
    }


def payload_size(record: Record) -> int:
    """Bytes one record costs on the wire (JSON item + histogram buffer)."""
    return len(json.dumps(item(record, 0))) + record.stats.hist.nbytes


def _bound(record: Record) -> int:
    # an upper bound of payload_size without encoding: 15 numbers of <= 24 characters,
    # ~250 characters of field names and punctuation, the names, the shape, the histogram
    names = len(record.key) + len(record.layer) + len(record.leaf) + len(record.stats.dtype)
    return 15 * 24 + 260 + names + 22 * len(record.stats.shape) + record.stats.hist.nbytes


def fit_budget(records: Iterable[Record], budget: int = BUDGET) -> list[Record]:
    """Keep records in order while each layer's total stays within ``budget`` bytes."""
    records = list(records)
    if sum(_bound(r) for r in records) <= budget:  # the usual case: no need to encode
        return records
    used: dict[str, int] = {}
    kept = []
    for record in records:
        size = payload_size(record)
        if used.get(record.layer, 0) + size <= budget:
            used[record.layer] = used.get(record.layer, 0) + size
            kept.append(record)
    return kept


def _encode(records: Iterable[Record], buffers: list[bytes]) -> list[dict]:
    items = []
    for record in records:
        items.append(item(record, len(buffers)))
        buffers.append(record.stats.hist.tobytes())
    return items


def stats_message(records: Iterable[Record]) -> Message:
    """``{type: "stats", items}`` and its buffers, for one update."""
    buffers: list[bytes] = []
    return {"type": "stats", "items": _encode(records, buffers)}, buffers


def snapshot_message(latest: Iterable[Record], history: Mapping[str, Iterable[Record]]) -> Message:
    """``{type: "snapshot", items, history}`` and buffers: the answer to a view's ``hello``."""
    buffers: list[bytes] = []
    items = _encode(latest, buffers)
    past = {key: _encode(recs, buffers) for key, recs in history.items()}
    return {"type": "snapshot", "items": items, "history": past}, buffers
