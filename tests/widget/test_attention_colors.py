"""The one colour rule of attention (``widget/views/attention_colors.py``) on real patterns: the
browser's table, the wire's range, ``Explorer.attention_figure`` and the notebook's static picture.
(That the browser paints the same pixels: ``tests/browser/test_attention_heatmap_frontend.py``.)"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from support.models import TinyAttention

from surgeon_widgets.widget.snapshot import thumbnail
from surgeon_widgets.widget.views.attention_colors import (
    attention_range,
    colour_index,
    colours,
    lut,
)
from surgeon_widgets.widget.wire import attention_message

COLORMAP_JS = Path(__file__).resolve().parents[2] / "js" / "src" / "colormap.js"


def test_the_browser_table_is_the_rules_table():
    rows = re.findall(r"^\s+(\d+), (\d+), (\d+),$", COLORMAP_JS.read_text(), re.M)
    assert np.array_equal(np.array(rows, np.int64).astype(np.uint8), lut())


def test_near_uniform_weights_span_the_scale_and_fixed_puts_them_low():
    torch.manual_seed(0)
    pattern = torch.softmax(torch.randn(1, 4, 12, 12) * 0.05, -1)  # 0.07-0.1, as early training
    lo, hi = attention_range(pattern[0])
    index = colour_index(pattern[0].numpy(), lo, hi)
    assert index.min() == 0 and index.max() == 255 and len(np.unique(index)) > 100
    fixed = colour_index(pattern[0].numpy(), *attention_range(pattern[0], "fixed"))
    assert fixed.max() <= 26  # on 0-1 every weight is dark: why the range is the default
    with pytest.raises(ValueError, match="'range' or 'fixed'"):
        attention_range(pattern, "contrast")  # type: ignore[arg-type]


def test_the_wire_sends_the_full_resolution_range_even_when_pooled():
    torch.manual_seed(1)
    pattern = torch.softmax(torch.randn(2, 3, 300, 300) * 3, -1)
    content, _ = attention_message("attn", pattern, batch=1, max_size=64)
    items = content["items"]
    assert items[0]["shape"] == [64, 64]  # pooled: its own max is lower than the pattern's
    expected = pytest.approx(list(attention_range(pattern[1])), rel=1e-6)
    assert all(i["range"] == expected for i in items)  # one range for the mean and every head


def test_explorer_attention_figure_and_static_picture_follow_the_rule(make):
    model = TinyAttention().eval()
    ex = make(model, max_rate=0)
    ex.select(["attn"])
    with torch.no_grad():
        model(torch.randn(1, 6, 4))
    pattern = ex._live.attention.latest("attn")
    lo, hi = attention_range(pattern[0])
    for scale, rng in (("range", (lo, hi)), ("fixed", (0.0, 1.0))):
        image = ex.attention_figure("attn", head=1, scale=scale).axes[0].images[0]
        shown = image.to_rgba(image.get_array(), bytes=True)[..., :3]
        assert np.array_equal(shown, colours(pattern[0, 1], *rng))
    png = ex._render_still().png  # the notebook's picture: the mean (uint8), by the rule
    found = {
        tuple(c) for c in np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    }
    (kept,) = ex._live.attention.maps(["attn"])
    values, step = thumbnail(kept, 64)
    mean = colours(values.astype(np.float32) * step, lo, hi).reshape(-1, 3)
    assert all(tuple(c) in found for c in mean)
    old = colours(values.astype(np.float32) * step, 0.0, float(values.max()) * step)  # 0-max
    assert not all(tuple(c) in found for c in old.reshape(-1, 3))
