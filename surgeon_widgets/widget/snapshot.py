"""The ``snapshot`` trait: what the panels show, small enough to live in the saved widget state.

A notebook reopened with no kernel (or a kernel holding no Explorer for the saved model) draws
its panels from this value alone (``js/src/snapshot.js``): each selected layer's latest
histogram, its recent history (heat strip and curves), a thumbnail of each attention map, the
step and the train / eval mode. Its compact JSON is at most ``SNAPSHOT_BUDGET`` bytes (64 KiB):
history steps are thinned first (evenly, the latest always kept), then the thumbnails go, then
whole keys (counted in ``left_out``). Histograms and maps travel as base64 in ``buffers``, the
items point at them as the ``snapshot`` and ``attention`` messages do (``js/PROTOCOL.md``).

>>> import torch
>>> from surgeon_widgets.engine.stats import tensor_stats
>>> from surgeon_widgets.widget.history import History, Record
>>> history = History()
>>> for step in range(300):
...     history.add(Record("fc/output", "fc", "output", "activation", step,
...                        tensor_stats(torch.randn(50))))
>>> state = snapshot_state(history, ["fc"], [])
>>> state["step"], state["training"], len(state["stats"]["history"]["fc/output"])
(299, True, 64)
>>> state_size(state) <= SNAPSHOT_BUDGET
True
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from ..engine.attention.capture import reduce_pattern
from .history import History, Record
from .views.figures import static_png, with_png
from .wire import AttentionMap, item

__all__ = ["HISTORY_STEPS", "SNAPSHOT_BUDGET", "THUMBNAIL", "Still", "render_still",
           "snapshot_state", "state_size", "still_bundle", "thumbnail"]  # fmt: skip

SNAPSHOT_BUDGET = 64 * 1024  # bytes of compact JSON per Explorer
HISTORY_STEPS = 64  # at most this many past steps per key, fewer when the budget says so
THUMBNAIL = 32  # side of an attention thumbnail (the mean of heads, uint8)


def state_size(state: dict) -> int:
    """Bytes of ``state`` as compact JSON: what :data:`SNAPSHOT_BUDGET` bounds."""
    return len(json.dumps(state, separators=(",", ":")))


def thumbnail(m: AttentionMap, side: int = THUMBNAIL) -> tuple[np.ndarray, float]:
    """The mean over heads of ``m``'s batch item, pooled to ``side``: ``(uint8 map, scale)``,
    weight ~ ``value * scale``."""
    batch = min(m.batch, m.pattern.shape[0] - 1)
    with torch.no_grad():
        reduced = reduce_pattern(m.pattern[batch].float().mean(0), side)
    return reduced.values.cpu().numpy(), float(reduced.scale)


def _thin(records: list[Record], steps: int) -> list[Record]:
    """At most ``steps`` records before the latest, evenly spread, oldest first."""
    past = records[:-1]
    if len(past) <= steps:
        return past
    if steps == 0:
        return []
    picks = np.linspace(0, len(past) - 1, steps).round().astype(int)
    return [past[i] for i in dict.fromkeys(picks.tolist())]


def _build(
    series: dict[str, list[Record]], maps: Sequence[tuple[AttentionMap, np.ndarray, float]],
    steps: int, left_out: int,
) -> dict:  # fmt: skip
    buffers: list[str] = []

    def encode(record: Record) -> dict:
        buffers.append(base64.b64encode(record.stats.hist.astype("<f4").tobytes()).decode())
        return item(record, len(buffers) - 1)

    latest = [recs[-1] for recs in series.values()]
    newest = max(latest, key=lambda r: r.step)
    stats = {
        "items": [encode(r) for r in latest],
        "history": {k: [encode(r) for r in _thin(recs, steps)] for k, recs in series.items()},
    }
    attention = []
    for m, values, scale in maps:
        buffers.append(base64.b64encode(values.tobytes()).decode())
        n_q, n_k = m.pattern.shape[-2:]
        attention.append({
            "layer": m.layer, "head": "mean", "batch": min(m.batch, m.pattern.shape[0] - 1),
            "batches": int(m.pattern.shape[0]), "heads": 0, "step": m.step,
            "shape": list(values.shape), "full_shape": [int(n_q), int(n_k)], "dtype": "uint8",
            "lo": 0.0, "hi": scale * 255.0 if values.any() else 0.0, "buffer": len(buffers) - 1,
            **({} if m.training is None else {"training": m.training}),
        })  # fmt: skip
    return {
        "step": newest.step, "training": newest.training, "stats": stats,
        "attention": {"items": attention}, "buffers": buffers, "left_out": left_out,
    }  # fmt: skip


def snapshot_state(
    history: History, layers: Sequence[str], maps: Sequence[AttentionMap],
    budget: int = SNAPSHOT_BUDGET,
) -> dict:  # fmt: skip
    """The ``snapshot`` value of ``layers`` (in the order given) and their attention ``maps``:
    ``{}`` while none of them recorded anything; its :func:`state_size` is <= ``budget``."""
    series = {k: history.records(k) for layer in layers for k in history.keys(layer)}
    series = {k: recs for k, recs in series.items() if recs}
    if not series:
        return {}
    thumbs = [(m, *thumbnail(m)) for m in maps]
    tries: list[Any] = [(HISTORY_STEPS >> i, thumbs) for i in range(HISTORY_STEPS.bit_length())]
    tries += [(0, thumbs), (0, [])]
    for steps, shown in tries:
        state = _build(series, shown, steps, 0)
        if state_size(state) <= budget:
            return state
    keys = list(series)  # many layers: the first ones, in the panels' order
    count = len(keys) * budget // state_size(state)  # the last try: every key, latest only
    while count > 0:
        state = _build({k: series[k] for k in keys[:count]}, [], 0, len(keys) - count)
        if state_size(state) <= budget:
            return state
        count -= 1
    newest = max((recs[-1] for recs in series.values()), key=lambda r: r.step)
    return {"step": newest.step, "training": newest.training, "left_out": len(series)}


class Still(NamedTuple):
    """What a notebook keeps of an Explorer: its picture, its text and its ``snapshot``."""

    png: bytes
    text: str
    state: dict


def render_still(
    history: History, layers: Sequence[str], maps: Sequence[AttentionMap], head: str
) -> Still:
    """The picture of ``layers``' latest histograms and the attention ``maps``, the text
    ``{head}, selected=[...], last step N)`` and the snapshot of the same layers."""
    state = snapshot_state(history, layers, maps)
    pictures = {}
    for m in maps:
        values, scale = thumbnail(m, 64)
        pictures[m.layer] = values.astype(np.float32) * scale
    step = state.get("step")
    last = "nothing recorded yet" if step is None else f"last step {step}"
    title = f"{head}) · {last}"
    png = static_png({n: history.layer(n) for n in layers}, pictures, title=title)
    return Still(png, f"{head}, selected={list(layers)!r}, {last})", state)


def still_bundle(bundle: dict | tuple | None, still: Still) -> dict | tuple:
    """The widget's mime ``bundle`` (``data`` or ``(data, metadata)``) with ``still``'s
    picture and text: what a notebook shows without the widget."""
    data, metadata = bundle if isinstance(bundle, tuple) else (bundle or {}, None)
    data = with_png({**data, "text/plain": still.text}, still.png)
    return data if metadata is None else (data, metadata)
