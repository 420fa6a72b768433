"""Matplotlib heatmap of one attention map, in the colormap the Explorer's heatmap uses.

The browser colours uint8 value ``v`` with entry ``v`` of ``js/src/colormap.js``, generated
from ``matplotlib.colormaps[COLORMAP]`` by ``scripts/make_colormap.py``; the figure uses that
colormap itself, with the same range ``[0, max weight]``.

>>> import torch
>>> pattern = torch.softmax(torch.randn(1, 2, 3, 3), -1)
>>> fig = attention_figure(pattern, "attn", tokens=["a", "b", "c"])
>>> ax = fig.axes[0]
>>> ax.images[0].get_cmap().name, [t.get_text() for t in ax.get_xticklabels()]
('viridis', ['a', 'b', 'c'])
"""

from __future__ import annotations

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure

from .figures import NotebookFigure

__all__ = ["COLORMAP", "MAX_TICK_LABELS", "attention_figure"]

COLORMAP = "viridis"
MAX_TICK_LABELS = 64


def attention_figure(
    pattern: torch.Tensor,
    layer: str,
    head: int | None = None,
    batch: int = 0,
    tokens: list[str] | None = None,
    tokens_k: list[str] | None = None,
) -> Figure:
    """Heatmap of ``pattern[batch, head]`` (``head=None``: the mean over heads), full resolution.

    Args:
        pattern: ``[batch, heads, queries, keys]``.
        layer: shown in the title.
        tokens: query labels (and key labels unless ``tokens_k``), shown when at most
            ``MAX_TICK_LABELS`` long and matching the axis.

    Raises:
        ValueError: ``head`` or ``batch`` out of range (the valid range is named).
    """
    n_batch, n_heads = pattern.shape[:2]
    if not 0 <= batch < n_batch:
        raise ValueError(f"batch must be in 0..{n_batch - 1} for {layer!r}, got {batch}")
    if head is not None and not 0 <= head < n_heads:
        raise ValueError(
            f"head must be in 0..{n_heads - 1} (or None for the mean) for {layer!r}, got {head}"
        )
    maps = pattern[batch].detach().float()
    data = (maps.mean(0) if head is None else maps[head]).cpu().numpy()
    fig = NotebookFigure(figsize=(6, 5.2), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(
        data,
        cmap=matplotlib.colormaps[COLORMAP],
        vmin=0.0,
        vmax=max(float(data.max()), np.finfo(np.float32).tiny),
        interpolation="nearest",
        aspect="auto",
    )
    fig.colorbar(image, ax=ax, label="attention weight")
    which = "mean of heads" if head is None else f"head {head}"
    ax.set_title(f"{layer} · {which} · batch {batch}", fontsize=10)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    _ticks(ax.set_yticks, tokens, data.shape[0])
    _ticks(ax.set_xticks, tokens_k if tokens_k is not None else tokens, data.shape[1])
    if tokens is not None or tokens_k is not None:
        ax.tick_params(axis="x", labelrotation=90)
    return fig


def _ticks(set_ticks, labels: list[str] | None, length: int) -> None:
    if labels is not None and len(labels) == length <= MAX_TICK_LABELS:
        set_ticks(range(length), labels, fontsize=7)
