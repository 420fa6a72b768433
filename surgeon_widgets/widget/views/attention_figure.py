"""Matplotlib heatmap of one attention map, in the colormap the Explorer's heatmap uses.

Coloured by the one rule of :mod:`.attention_colors` (the browser's, pixel for pixel): by
default over ``[min, max]`` of the batch item's heads (the range the widget's legend shows for
that layer), ``scale="fixed"`` over ``[0, 1]``; the colour bar shows that range.

>>> import torch
>>> pattern = torch.softmax(torch.randn(1, 2, 3, 3), -1)
>>> fig = attention_figure(pattern, "attn", tokens=["a", "b", "c"])
>>> ax = fig.axes[0]
>>> ax.images[0].get_cmap().name, [t.get_text() for t in ax.get_xticklabels()]
('viridis', ['a', 'b', 'c'])
"""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.figure import Figure

from .attention_colors import COLORMAP, Scale, attention_range, colour_index, lut
from .figures import NotebookFigure

__all__ = ["COLORMAP", "MAX_TICK_LABELS", "RuleNorm", "attention_figure", "rule_colormap"]

MAX_TICK_LABELS = 64


class RuleNorm(Normalize):
    """Matplotlib's side of the colour rule: weight -> the middle of its LUT entry's bin, so a
    256-entry colormap picks exactly :func:`~.attention_colors.colour_index`'s entry."""

    def __call__(self, value, clip=None):  # always clipped, as the rule
        data = np.ma.asarray(value)
        index = colour_index(np.ma.filled(data, np.nan), float(self.vmin), float(self.vmax))
        return np.ma.masked_array((index + 0.5) / 256.0, mask=np.ma.getmaskarray(data))


def rule_colormap() -> ListedColormap:
    """The LUT as a matplotlib colormap; ``+ 0.25`` because matplotlib truncates
    ``colour * 255`` to bytes, which would turn ``v / 255`` into ``v - 1`` for some ``v``."""
    return ListedColormap(np.minimum((lut().astype(np.float64) + 0.25) / 255.0, 1.0), COLORMAP)


def attention_figure(
    pattern: torch.Tensor,
    layer: str,
    head: int | None = None,
    batch: int = 0,
    tokens: list[str] | None = None,
    tokens_k: list[str] | None = None,
    scale: Scale = "range",
) -> Figure:
    """Heatmap of ``pattern[batch, head]`` (``head=None``: the mean over heads), full resolution.

    Args:
        pattern: ``[batch, heads, queries, keys]``.
        layer: shown in the title.
        tokens: query labels (and key labels unless ``tokens_k``), shown when at most
            ``MAX_TICK_LABELS`` long and matching the axis.
        scale: ``"range"``: colours over ``[min, max]`` of batch item ``batch``'s heads (as the
            widget); ``"fixed"``: over ``[0, 1]``.

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
    lo, hi = attention_range(maps, scale)
    data = (maps.mean(0) if head is None else maps[head]).cpu().numpy()
    fig = NotebookFigure(figsize=(6, 5.2), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(
        data,
        cmap=rule_colormap(),
        norm=RuleNorm(lo, hi),
        interpolation="nearest",
        interpolation_stage="rgba",  # colour each weight first: no resampling of the data
        aspect="auto",
    )
    bar = ScalarMappable(Normalize(lo, hi if hi > lo else lo + 1e-12), rule_colormap())
    what = "layer's range" if scale == "range" else "fixed scale"
    fig.colorbar(bar, ax=ax, label=f"attention weight ({what} {lo:.3g}–{hi:.3g})")
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
