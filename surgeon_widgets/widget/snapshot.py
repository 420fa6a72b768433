"""The ``snapshot`` trait: what the panels show, small enough to live in the saved widget state.

A notebook reopened with no kernel (or a kernel holding no Explorer for the saved model) draws
its panels from this value alone (``js/src/snapshot.js``): each selected layer's latest
histogram, its recent history (heat strip and curves), a thumbnail of each attention map (the
mean of heads, then each head at ``HEAD_THUMBNAIL`` a side, with the layer's colour range and
token labels: the map, lines and model views draw from them), the step and the train / eval
mode. Its compact JSON is at most ``SNAPSHOT_BUDGET`` bytes (64 KiB): history steps are
thinned first (evenly, the latest always kept), then the heads' thumbnails go, then the
means', then whole keys (counted in ``left_out``). Histograms and maps travel as base64 in
``buffers``, the items point at them as the ``snapshot`` and ``attention`` messages do
(``js/PROTOCOL.md``).

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
from .views.attention_colors import attention_range, colours
from .views.figures import static_png, with_png
from .wire import AttentionMap, item

__all__ = ["HEAD_THUMBNAIL", "HISTORY_STEPS", "SNAPSHOT_BUDGET", "THUMBNAIL", "Still", "Thumbs",
           "render_still", "snapshot_state", "state_size", "still_bundle", "thumbnail",
           "thumbnails"]  # fmt: skip

SNAPSHOT_BUDGET = 64 * 1024  # bytes of compact JSON per Explorer
HISTORY_STEPS = 64  # at most this many past steps per key, fewer when the budget says so
THUMBNAIL = 32  # side of an attention thumbnail (the mean of heads, uint8)
HEAD_THUMBNAIL = 16  # side of each head's thumbnail (enough for the lines of 16 tokens)


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


class Thumbs(NamedTuple):
    """One layer's maps as the snapshot keeps them: the mean (``[s, s]`` uint8, ``scale``),
    each head (``[heads, s', s']``, ``head_scales``) and the layer's colour range."""

    mean: np.ndarray
    scale: float
    heads: np.ndarray
    head_scales: list[float]
    range: tuple[float, float]


def thumbnails(m: AttentionMap) -> Thumbs:
    """:func:`thumbnail` of the mean, each head at ``HEAD_THUMBNAIL`` and the layer's range."""
    batch = min(m.batch, m.pattern.shape[0] - 1)
    mean, scale = thumbnail(m)
    with torch.no_grad():
        heads = reduce_pattern(m.pattern[batch].float(), HEAD_THUMBNAIL)
    rng = attention_range(m.pattern[batch])
    return Thumbs(mean, scale, heads.values.cpu().numpy(), heads.scale.cpu().tolist(), rng)


def _map_item(m: AttentionMap, head: Any, values: np.ndarray, scale: float, rng, buffer: int):
    n_q, n_k = m.pattern.shape[-2:]
    one = {
        "layer": m.layer, "head": head, "batch": min(m.batch, m.pattern.shape[0] - 1),
        "batches": int(m.pattern.shape[0]), "heads": int(m.pattern.shape[1]), "step": m.step,
        "shape": list(values.shape), "full_shape": [int(n_q), int(n_k)], "dtype": "uint8",
        "lo": 0.0, "hi": scale * 255.0 if values.any() else 0.0, "buffer": buffer,
        "range": list(rng), **({} if m.training is None else {"training": m.training}),
    }  # fmt: skip
    if head == "mean" and m.tokens is not None:
        for axis, length in (("tokens_q", n_q), ("tokens_k", n_k)):
            if len(m.tokens) == length:
                one[axis] = list(m.tokens)
    return one


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
    series: dict[str, list[Record]], maps: Sequence[tuple[AttentionMap, Thumbs]],
    steps: int, left_out: int, heads: bool = True,
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
    for m, t in maps:
        shown = [("mean", t.mean, t.scale)]
        if heads:
            shown += [(h, t.heads[h], t.head_scales[h]) for h in range(len(t.heads))]
        for head, values, scale in shown:
            buffers.append(base64.b64encode(values.tobytes()).decode())
            attention.append(_map_item(m, head, values, scale, t.range, len(buffers) - 1))
        if not heads:
            attention[-1]["heads"] = 0
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
    thumbs = [(m, thumbnails(m)) for m in maps]
    tries: list[Any] = [
        (HISTORY_STEPS >> i, thumbs, True) for i in range(HISTORY_STEPS.bit_length())
    ]
    tries += [(0, thumbs, True), (0, thumbs, False), (0, [], False)]
    for steps, shown, heads in tries:
        state = _build(series, shown, steps, 0, heads)
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
        batch = min(m.batch, m.pattern.shape[0] - 1)
        pictures[m.layer] = colours(values.astype(np.float32) * scale,
                                    *attention_range(m.pattern[batch]))  # fmt: skip
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
