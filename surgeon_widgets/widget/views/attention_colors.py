"""The one colour rule of attention maps, mirrored exactly by ``js/src/heatmap/colour.js``.

Every picture of attention (the widget's maps, its thumbnails and lines, the notebook's static
picture, ``attention_figure``) colours a weight ``w`` the same way:

1. **The range.** ``"range"`` (the default): ``[min, max]`` of the layer's maps as shown, the
   mean of heads and every head of one batch item together (so heads of a layer compare), at
   full resolution; near-uniform attention (0.075-0.09, as early in training) then spans the
   whole colormap, and the legend prints that range. ``"fixed"``: ``[0, 1]``.
2. **The position** ``t = clip((w - lo) / (hi - lo), 0, 1)`` (``0.5`` when ``hi - lo`` is
   below ``1e-12``: a flat layer sits mid-scale), in float64.
3. **The colour**: entry ``floor(t * 255 + 0.5)`` of :func:`lut` (matplotlib's ``viridis``
   as 256 uint8 RGB rows, the table ``scripts/make_colormap.py`` writes to
   ``js/src/colormap.js``). The lines view uses ``t`` as a line's opacity.

>>> import numpy as np
>>> weights = np.array([0.075, 0.0825, 0.09])
>>> lo, hi = attention_range(weights)
>>> colour_index(weights, lo, hi).tolist(), colour_index(weights, *FIXED).tolist()
([0, 128, 255], [19, 21, 23])
"""

from __future__ import annotations

from functools import cache
from typing import Literal

import matplotlib
import numpy as np
import torch

__all__ = ["COLORMAP", "FIXED", "FLAT", "Scale", "attention_range", "colour_index", "colours",
           "lut", "position", "range_tensor"]  # fmt: skip

COLORMAP = "viridis"
FIXED = (0.0, 1.0)
FLAT = 1e-12  # a range narrower than this is flat: every weight sits mid-scale
Scale = Literal["range", "fixed"]


@cache
def lut(name: str = COLORMAP) -> np.ndarray:
    """``uint8 [256, 3]``: entry ``i`` is the colour matplotlib gives the ``i``-th of 256 levels."""
    rgba = matplotlib.colormaps[name].resampled(256)(np.arange(256))
    return np.round(rgba[:, :3] * 255).astype(np.uint8)


def attention_range(maps: torch.Tensor | np.ndarray, scale: Scale = "range") -> tuple[float, float]:
    """``(lo, hi)`` the maps are coloured over: their ``[min, max]``, or ``FIXED``.

    ``maps``: every weight shown together (a layer's ``[heads, queries, keys]`` of one batch
    item: the mean of heads lies inside its heads' range). One host sync for a tensor.
    """
    if scale == "fixed":
        return FIXED
    if scale != "range":
        raise ValueError(f"scale must be 'range' or 'fixed', got {scale!r}")
    if isinstance(maps, torch.Tensor):
        if maps.numel() == 0:
            return FIXED
        lo, hi = range_tensor(maps).cpu().tolist()
        return float(lo), float(hi)
    data = np.asarray(maps, dtype=np.float64)
    return (float(data.min()), float(data.max())) if data.size else FIXED


def range_tensor(maps: torch.Tensor) -> torch.Tensor:
    """``float32 [2]`` ``[min, max]`` of ``maps`` on their device: :func:`attention_range`'s
    ``"range"`` without the host sync, for a caller that brings it over with other numbers."""
    with torch.no_grad():
        return torch.stack([maps.detach().amin(), maps.detach().amax()]).float()


def position(weights: np.ndarray | float, lo: float, hi: float) -> np.ndarray:
    """``t`` in ``[0, 1]`` of each weight on the scale ``(lo, hi)`` (float64, as JS numbers)."""
    w = np.asarray(weights, dtype=np.float64)
    if not hi - lo >= FLAT:
        return np.full(w.shape, 0.5)
    return np.clip((w - lo) / (hi - lo), 0.0, 1.0)


def colour_index(weights: np.ndarray | float, lo: float, hi: float) -> np.ndarray:
    """The colormap entry (``uint8``) of each weight: ``floor(t * 255 + 0.5)``."""
    return np.floor(position(weights, lo, hi) * 255 + 0.5).astype(np.uint8)


def colours(weights: np.ndarray | torch.Tensor, lo: float, hi: float) -> np.ndarray:
    """``uint8 [..., 3]`` RGB of each weight: exactly the pixels the browser paints."""
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    return lut()[colour_index(weights, lo, hi)]
