"""Matplotlib views of the live stats: histogram history (for papers) and the static picture.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot), so nothing is shown or kept
in global state unless the caller does so.

>>> import torch
>>> from surgeon_widgets.engine.stats import tensor_stats
>>> from surgeon_widgets.widget.history import Series
>>> s = Series("fc/output", "fc", "output", "activation", [0, 1],
...            [tensor_stats(torch.randn(100)), tensor_stats(torch.randn(100) + 1)])
>>> history_figure({"fc/output": s}, "fc").axes[0].get_xlabel()
'step'
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..history import Series

__all__ = [
    "HISTOGRAM_COLOR", "STILL_DPI", "STILL_SIZE", "NotebookFigure", "history_figure", "regrid",
    "static_png", "with_png", "zero_text",
]  # fmt: skip

STILL_SIZE = (4.0, 2.6)  # inches of one plot of the static picture
STILL_DPI = 80
HISTOGRAM_COLOR = "#4c72b0"


class NotebookFigure(Figure):
    """A pyplot-free Figure that still shows as an image when it ends a notebook cell."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png")
        return buffer.getvalue()


def regrid(series: Series, rows: int = 64) -> tuple[np.ndarray, float, float]:
    """Histograms of every step on one common value grid: ``(matrix[rows, steps], lo, hi)``.

    Each step has its own ``[lo, hi]``; counts are moved to the common grid by interpolating
    the cumulative counts, so totals are preserved.
    """
    los = [v.lo for v in series.values if v.hist.sum() > 0]
    his = [v.hi for v in series.values if v.hist.sum() > 0]
    lo, hi = (min(los), max(his)) if los else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    grid = np.linspace(lo, hi, rows + 1)
    out = np.zeros((rows, len(series.values)))
    for j, v in enumerate(series.values):
        total = v.hist.sum()
        if total == 0:
            continue
        edges = np.linspace(v.lo, v.hi, len(v.hist) + 1)
        if v.hi <= v.lo:  # all finite values equal: one spike
            out[np.searchsorted(grid, v.lo, side="right").clip(1, rows) - 1, j] = total
            continue
        cum = np.concatenate([[0.0], np.cumsum(v.hist, dtype=np.float64)])
        out[:, j] = np.diff(np.interp(grid, edges, cum))
    return out, lo, hi


def _draw(fig: Figure, series: Mapping[str, Series], row0: int, nrows: int) -> None:
    for i, (key, s) in enumerate(series.items()):
        strip = fig.add_subplot(nrows, 2, 2 * (row0 + i) + 1)
        matrix, lo, hi = regrid(s)
        steps = s.steps
        x1 = steps[-1] + 1 if steps else 1
        strip.imshow(
            np.log1p(matrix),
            aspect="auto",
            origin="lower",
            cmap="viridis",
            extent=(steps[0] if steps else 0, x1, lo, hi),
            interpolation="nearest",
        )
        strip.set_xlabel("step")
        strip.set_ylabel("value")
        strip.set_title(f"History of {key}", fontsize=9)
        last = s.latest
        hist = fig.add_subplot(nrows, 2, 2 * (row0 + i) + 2)
        width = (last.hi - last.lo) / len(last.hist) or 1.0
        hist.bar(
            np.linspace(last.lo, last.hi, len(last.hist), endpoint=False),
            last.hist,
            width=width,
            align="edge",
            color="#4c72b0",
        )
        hist.set_title(f"{key} @ step {steps[-1]}: {_summary(last)}", fontsize=8)
        hist.set_xlabel("value")
        hist.set_ylabel("count")


def _summary(s: Any) -> str:
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    moments = f"mean {f(s.mean)} std {f(s.std)} min {f(s.min)} max {f(s.max)}"
    return f"{moments} NaN {s.nans} Inf {s.infs}"


def zero_text(share: float) -> str:
    """The zero bar's label, as the widget writes it: ``"0: 35%"`` (``"0: 0.4%"`` below 1%)."""
    p = share * 100
    return f"0: {p:.1f}%" if 0 < p < 1 else f"0: {round(p)}%"


def _zero_bar(ax: Any, share: float) -> None:
    """Exact zeros, left out of the bins, as a bar of their own right of the values (a framed
    0-100% track past a dashed line, so it is not read as a value), labelled ``"0: 35%"``."""
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]  # no value ticks over the bar
    ax.set_xlim(lo, hi + (hi - lo) * 0.22)
    ax.set_xticks(ticks)
    ax.axvline(hi + (hi - lo) * 0.04, color="#999", linewidth=0.6, linestyle="--")
    bar = ax.inset_axes((0.87, 0.0, 0.08, 0.78))
    bar.bar([0.0], [share], width=1.0, color=HISTOGRAM_COLOR)
    bar.add_patch(Rectangle((-0.5, 0.0), 1.0, 1.0, fill=False, edgecolor="#999", linewidth=0.6))
    bar.set(xlim=(-0.55, 0.55), ylim=(0.0, 1.02))  # the frame inside
    bar.axis("off")
    ax.text(0.91, 0.8, zero_text(share), transform=ax.transAxes, ha="center", va="bottom",
            fontsize=7)  # fmt: skip


def history_figure(series: Mapping[str, Series], title: str = "") -> Figure:
    """One row per key: heat strip of the histogram history (value on y, step on x) + latest."""
    n = max(len(series), 1)
    fig = NotebookFigure(figsize=(10, 2.6 * n), layout="constrained")
    if not series:
        fig.text(
            0.5,
            0.5,
            f"no stats yet for {title!r}: select it and run the model",
            ha="center",
            va="center",
        )
        return fig
    _draw(fig, series, 0, n)
    if title:
        fig.suptitle(title)
    return fig


def with_png(bundle: dict | tuple | None, png: bytes) -> dict | tuple:
    """A display's mime bundle (``data`` or ``(data, metadata)``) with ``png`` added as the
    static image a notebook shows without the widget (a saved file, GitHub, nbconvert)."""
    data = base64.b64encode(png).decode("ascii")
    if isinstance(bundle, tuple):
        return {**bundle[0], "image/png": data}, bundle[1]
    return {**(bundle or {}), "image/png": data}


def static_png(
    layers: Mapping[str, Mapping[str, Series]],
    attention: Mapping[str, np.ndarray] | None = None,
    title: str = "",
) -> bytes:
    """PNG of what the panels show: each selected layer's latest histograms (one plot per
    key, ``layers`` in the panels' order), then each attention map (mean of heads), given
    as ``uint8 [q, k, 3]`` RGB coloured by :mod:`.attention_colors`.

    A notebook without the widget (a saved file, GitHub, ``nbconvert --to html``) shows this.
    Every plot is ``STILL_SIZE`` (inches at ``STILL_DPI``), two a row. Cheap to draw (one
    artist a histogram, fixed margins): it is redrawn while the model trains.
    """
    series = [(k, s) for per in layers.values() for k, s in per.items() if s.values]
    maps = list((attention or {}).items())
    n = len(series) + len(maps)
    cols = 1 if n <= 1 else 2
    rows = max(1, -(-n // cols))
    width, height = STILL_SIZE
    fig = Figure(figsize=(width * cols, height * rows + 0.4))
    top = 1 - 0.4 / (height * rows + 0.4)
    fig.subplots_adjust(left=0.14 / cols, right=1 - 0.04 / cols, bottom=0.2 / rows,
                        top=top - 0.1 / rows, wspace=0.3, hspace=0.75)  # fmt: skip
    if title:
        fig.suptitle(title, fontsize=9, y=1 - 0.12 / (height * rows + 0.4))
    if not n:
        fig.text(0.5, 0.5, "no layer recorded yet: select layers and run the model",
                 ha="center", va="center", fontsize=9)  # fmt: skip
    for i, (key, s) in enumerate(series):
        ax = fig.add_subplot(rows, cols, i + 1)
        last = s.latest
        hi = last.hi if last.hi > last.lo else last.lo + 1.0
        ax.stairs(last.hist, np.linspace(last.lo, hi, len(last.hist) + 1), fill=True,
                  color=HISTOGRAM_COLOR)  # fmt: skip
        if last.zeros > 0:
            _zero_bar(ax, last.zeros)
        training = s.training[-1] if s.training else None  # a recorded run has none
        mode = "" if training is None else (" · train" if training else " · eval")
        ax.set_title(f"{key} · {s.kind} · step {s.steps[-1]}{mode}", fontsize=8)
        ax.set_xlabel(_summary(last), fontsize=7)
        ax.set_ylabel("count", fontsize=7)
        ax.tick_params(labelsize=7)
    for j, (layer, data) in enumerate(maps):
        ax = fig.add_subplot(rows, cols, len(series) + j + 1)
        ax.imshow(data, interpolation="nearest", aspect="auto")  # RGB: the attention colour rule
        ax.set_title(f"attention of {layer} · mean of heads", fontsize=8)
        ax.set_xlabel("key", fontsize=7)
        ax.set_ylabel("query", fontsize=7)
        ax.tick_params(labelsize=7)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=STILL_DPI)
    return buffer.getvalue()
