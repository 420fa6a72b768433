"""Every message the Python side sends, in its wire form (``js/PROTOCOL.md``, ``js/src/codec.js``).

A message is JSON content plus binary buffers; an item points at its buffer with
``{buffer, dtype, shape}``. Stats (``stats``, ``snapshot``): at most ``BUDGET`` bytes per layer
per update (items that do not fit are left out). Attention maps (``attention``): at most
``ATTENTION_BUDGET`` bytes per layer and update, pooled on the model's device, whatever the
sequence length (a 4,096-token layer never costs an S×S transfer).

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
from typing import Any, NamedTuple

import torch

from ..engine.attention.capture import reduce_pattern
from .history import History, Record
from .views.attention_colors import range_tensor
from .views.attention_tokens import Tokens, tokens_for

__all__ = [
    "ATTENTION_BUDGET", "BUDGET", "MIN_HEAD_SIZE", "AttentionMap", "Message", "attention_message",
    "attention_update", "code_message", "fit_budget", "history_snapshot", "insert_result", "item",
    "payload_size", "snapshot_message", "stats_message",
]  # fmt: skip

BUDGET = 4096
ATTENTION_BUDGET = 512 * 1024  # bytes of maps per layer and update (the mean alone: 256 x 256)
MIN_HEAD_SIZE = 32  # many heads are pooled further to share the budget, never below this a side
Message = tuple[dict, list[bytes]]


def _num(value: float | None) -> float | None:
    # JSON has no NaN/Inf: a sum that overflowed is shown as missing, not as a wrong number
    return value if value is not None and math.isfinite(value) else None


def item(record: Record, buffer: int, every: float | None = None) -> dict:
    """The JSON part of one :class:`Record`; its histogram is ``buffers[buffer]``.

    ``every``: the key's update interval in seconds (:meth:`History.every`), when known;
    ``sampled``: how many values the histogram binned, when it sampled the tensor.
    """
    s = record.stats
    mode = {} if record.training is None else {"training": record.training}
    extra = {"sampled": s.sampled} if s.sampled else {}
    if every is not None:
        extra["every"] = every
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
        **extra,  # absent when exact / not known
    }


def payload_size(record: Record) -> int:
    """Bytes one record costs on the wire (JSON item + histogram buffer), ``every`` included."""
    return len(json.dumps(item(record, 0, 1e300))) + record.stats.hist.nbytes


def _bound(record: Record) -> int:
    # an upper bound of payload_size without encoding: 17 numbers of <= 24 characters,
    # ~290 characters of field names and punctuation, the names, the shape, the histogram
    names = len(record.key) + len(record.layer) + len(record.leaf) + len(record.stats.dtype)
    return 17 * 24 + 290 + names + 22 * len(record.stats.shape) + record.stats.hist.nbytes


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


def _encode(
    records: Iterable[Record], buffers: list[bytes], timed: History | None = None
) -> list[dict]:
    items = []
    for record in records:
        every = timed.every(record.key) if timed is not None else None
        items.append(item(record, len(buffers), every))
        buffers.append(record.stats.hist.tobytes())
    return items


def stats_message(records: Iterable[Record], timed: History | None = None) -> Message:
    """``{type: "stats", items}`` and its buffers, for one update; with ``timed`` (the history
    the records were added to) each item says how often its key updates (``every``)."""
    buffers: list[bytes] = []
    return {"type": "stats", "items": _encode(records, buffers, timed)}, buffers


def snapshot_message(
    latest: Iterable[Record],
    history: Mapping[str, Iterable[Record]],
    timed: History | None = None,
) -> Message:
    """``{type: "snapshot", items, history}`` and buffers: the answer to a view's ``hello``."""
    buffers: list[bytes] = []
    items = _encode(latest, buffers, timed)
    past = {key: _encode(recs, buffers) for key, recs in history.items()}
    return {"type": "snapshot", "items": items, "history": past}, buffers


def insert_result(ok: bool, message: str) -> Message:
    """``{type: "insert_result", ok, message}``: the answer to the cut panel's ``insert_cell``."""
    return {"type": "insert_result", "ok": ok, "message": message}, []


def code_message(selected: list[str], code: str) -> Message:
    """``{type: "code", selected, code}``: the code of a view's selection that waits for the
    model's thread; the code box shows it until ``code`` (the trait) changes."""
    return {"type": "code", "selected": selected, "code": code}, []


def history_snapshot(history: History) -> Message:
    """The ``snapshot`` of everything ``history`` holds (the latest within ``BUDGET``)."""
    past = {key: history.records(key) for key in history.keys()}  # noqa: SIM118 (a method)
    return snapshot_message(fit_budget(history.latest()), past, history)


def attention_message(
    layer: str,
    pattern: torch.Tensor,
    batch: int = 0,
    step: int = 0,
    tokens: Tokens | None = None,
    max_size: int = 256,
    budget: int = ATTENTION_BUDGET,
    training: bool | None = None,
) -> Message:
    """``{type: "attention", items}`` + buffers for one layer's ``[batch, heads, q, k]`` pattern.

    One item for the mean over heads (at most ``max_size`` a side), then one per head, all of
    batch item ``batch``. Heads share what the mean leaves of ``budget`` bytes, so they may be
    pooled further (never below ``MIN_HEAD_SIZE`` a side). Unpooled maps also travel as float32
    (``exact``) when everything still fits ``budget``. Token labels ride on the mean item only
    (``tokens_q`` / ``tokens_k``, when their length fits the axis). ``training``: the model's
    mode in that forward, on every item when known. ``range``: ``[min, max]`` of the batch
    item's heads at full resolution, the colour range of the layer (``views/attention_colors``).
    """
    n_batch, n_heads, n_q, n_k = pattern.shape
    if not 0 <= batch < n_batch:
        raise ValueError(f"batch item {batch} out of range: the pattern has {n_batch}")
    with torch.no_grad():
        maps = pattern[batch]
        mean = reduce_pattern(maps.float().mean(0, keepdim=True), max_size)
        left = max(0, budget - mean.values.numel()) // max(1, n_heads)
        head_size = max(MIN_HEAD_SIZE, min(max_size, math.isqrt(left)))
        heads = reduce_pattern(maps, head_size)
        values = [mean.values[0].cpu(), *heads.values.cpu()]
        # the colour range crosses to the CPU with the scales (one transfer, not two)
        numbers = torch.cat([mean.scale, heads.scale, range_tensor(maps)]).cpu().tolist()
        scales, rng = numbers[:-2], numbers[-2:]
        exact = None
        unpooled = all(tuple(v.shape) == (n_q, n_k) for v in values)
        if unpooled and (n_heads + 1) * n_q * n_k * 5 <= budget:
            exact = torch.cat([maps.float().mean(0, keepdim=True), maps.float()]).cpu()
    buffers: list[bytes] = []
    items = []
    for i, head in enumerate(["mean", *range(n_heads)]):
        item: dict[str, Any] = {
            "layer": layer, "head": head, "batch": batch, "batches": n_batch,
            "heads": n_heads, "step": step, "dtype": "uint8",
            "shape": list(values[i].shape), "full_shape": [n_q, n_k],
            "lo": 0.0, "hi": float(scales[i]) * 255.0 if values[i].any() else 0.0,
            "buffer": len(buffers), "range": rng,
        }  # fmt: skip
        if training is not None:
            item["training"] = training
        buffers.append(values[i].numpy().tobytes())
        if exact is not None:
            item["exact"] = {"buffer": len(buffers), "dtype": "float32", "shape": [n_q, n_k]}
            buffers.append(exact[i].numpy().astype("<f4").tobytes())
        if head == "mean":
            for axis, length in (("tokens_q", n_q), ("tokens_k", n_k)):
                labels = tokens_for(tokens, batch, length)
                if labels is not None:
                    item[axis] = labels
        items.append(item)
    return {"type": "attention", "items": items}, buffers


class AttentionMap(NamedTuple):
    """One layer's kept pattern and how to show it: batch item, step, train/eval mode, and
    the token labels of that batch item (for the snapshot)."""

    layer: str
    pattern: torch.Tensor
    batch: int = 0
    step: int = 0
    training: bool | None = None
    tokens: list[str] | None = None


def attention_update(
    maps: Iterable[AttentionMap], tokens: Tokens | None = None, max_size: int = 256
) -> Message:
    """One ``attention`` message with the maps of several layers (their buffers in order)."""
    items: list[dict] = []
    buffers: list[bytes] = []
    for m in maps:
        batch = min(m.batch, m.pattern.shape[0] - 1)
        content, bufs = attention_message(
            m.layer, m.pattern, batch, m.step, tokens, max_size, training=m.training
        )
        for one in content["items"]:
            one["buffer"] += len(buffers)
            if "exact" in one:
                one["exact"] = {**one["exact"], "buffer": one["exact"]["buffer"] + len(buffers)}
        items.extend(content["items"])
        buffers.extend(bufs)
    return {"type": "attention", "items": items}, buffers
