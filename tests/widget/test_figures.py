"""views/figures.py: the static picture (PNG) a notebook shows without the widget."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import torch
from matplotlib.colors import to_rgb
from matplotlib.image import imread
from torch import nn

from surgeon_widgets.engine.stats import tensor_stats
from surgeon_widgets.widget.history import Series
from surgeon_widgets.widget.views.figures import HISTOGRAM_COLOR, static_png, zero_text


def _relu_stats():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
    with torch.no_grad():
        return tensor_stats(net(torch.randn(128, 16)))


def _bar_columns(png: bytes) -> np.ndarray:
    """Per pixel column of the picture: whether it holds the histogram colour."""
    rgb = imread(io.BytesIO(png))[..., :3]
    near = np.abs(rgb - np.array(to_rgb(HISTOGRAM_COLOR))).max(axis=2) < 0.02
    return near.any(axis=0)


def test_exact_zeros_are_a_labelled_bar_of_their_own_in_the_png():
    stats = _relu_stats()
    assert 0.3 < stats.zeros < 0.7 and zero_text(stats.zeros) == f"0: {round(stats.zeros * 100)}%"
    assert zero_text(0.004) == "0: 0.4%"
    layers = {"1": {"1/output": Series("1/output", "1", "output", "activation", [3], [stats])}}
    without = dataclasses.replace(stats, zeros=0.0)
    plain = {"1": {"1/output": Series("1/output", "1", "output", "activation", [3], [without])}}
    with_bar, no_bar = _bar_columns(static_png(layers)), _bar_columns(static_png(plain))
    # the zero bar stands apart at the right: a run of the bar colour after a wide gap
    bar_gap, bar = _last_run(with_bar)
    assert bar_gap > 15 and 10 <= len(bar) <= 30
    gap, last = _last_run(no_bar)
    assert gap < 15 or len(last) < 10  # without zeros: the histogram's own tail


def _last_run(columns: np.ndarray) -> tuple[int, np.ndarray]:
    """The last run of coloured columns and the gap before it (in pixels)."""
    where = np.flatnonzero(columns)
    runs = np.split(where, np.flatnonzero(np.diff(where) > 3) + 1)
    return (int(runs[-1][0] - runs[-2][-1]) if len(runs) > 1 else 0), runs[-1]
