"""End to end: attention heatmap in a real JupyterLab (real kernel, real comm, binary buffers).

Displays an Explorer over a tiny SDPA attention model, selects `attn` in the tree, runs a
forward pass and checks the heatmap is painted and the hover read-out shows the weight Python
computed, with the tokens given by `explorer.set_tokens`; the cell's colour is the one
`explorer.attention_figure` paints; the "attention view" control's lines view draws one line
group per head and a hovered token keeps only its lines; the model view opens a head's map.
"""

from __future__ import annotations

import json
import re

from support.notebook_page import HOOKS_LISTED, RUN_CELL, notebook_page

DEFINE = """\
import torch
import torch.nn.functional as F
from torch import nn
from surgeon_widgets.widget.explorer import Explorer

class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, 8)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = SelfAttention()
    def forward(self, x):
        return self.attn(x)

torch.manual_seed(0)
model = Model().eval()
explorer = Explorer(model, max_rate=0)
explorer.set_tokens(["the", "cat", "sat", "on"])
explorer"""

FORWARD = """\
with torch.no_grad():
    model(torch.randn(1, 4, 8) * 3)
image = explorer.attention_figure("attn").axes[0].images[0]
w = image.get_array()
rgb = image.to_rgba(w, bytes=True)[2, 1, :3].tolist()
print(f"forward done W21={float(w[2, 1]):.4f} RGB21={rgb}")"""

MAP = "section[data-attention='attn'] canvas.sw-att-map"
PAINTED = f"""() => {{
    const c = document.querySelector("{MAP}");
    if (!c || c.width !== 4) return false;
    const d = c.getContext('2d').getImageData(0, 0, 4, 4).data;
    return d[3] === 255;
}}"""


SHOWN_KEYS = """(s) => [...new Set([...document.querySelectorAll(s + ' line')]
    .filter((l) => [l, l.parentElement].every((e) => getComputedStyle(e).display !== 'none'))
    .map((l) => Number(l.dataset.k)))]"""


def test_attention_heatmap_live_in_jupyterlab(browser, jupyterlab):
    name = "attention_e2e.ipynb"
    with notebook_page(browser, jupyterlab, "lab", name, [DEFINE, FORWARD]) as (page, errors):
        page.evaluate(RUN_CELL, 0)
        row = page.locator('[role="treeitem"][data-name="attn"]')
        row.wait_for(timeout=90_000)
        row.click()
        page.wait_for_function(HOOKS_LISTED, arg="attention", timeout=20_000)
        page.evaluate(RUN_CELL, 1)
        done = page.locator(".jp-OutputArea-output", has_text="forward done")
        done.wait_for(timeout=30_000)
        expected = re.search(r"W21=([0-9.]+)", done.inner_text()).group(1)
        rgb = json.loads(re.search(r"RGB21=(\[[0-9, ]+\])", done.inner_text()).group(1))
        page.wait_for_function(PAINTED, timeout=20_000)
        heatmap = page.locator(MAP)
        heatmap.scroll_into_view_if_needed()
        box = heatmap.bounding_box()
        heatmap.hover(position={"x": 1.5 * box["width"] / 4, "y": 2.5 * box["height"] / 4})
        readout = page.locator("section[data-attention='attn'] .sw-att-readout")
        assert readout.inner_text() == f'query "sat" #2 · key "cat" #1 · weight {expected}'
        assert page.locator("button[data-layer='attn'][data-head='1']").count() == 1
        pixel = page.evaluate(
            f"""() => Array.from(document.querySelector("{MAP}").getContext('2d')
                .getImageData(1, 2, 1, 1).data).slice(0, 3)"""
        )
        assert pixel == rgb  # the widget and attention_figure: the same colour for the same weight
        view = page.get_by_role("radiogroup", name="attention view")
        view.get_by_role("radio", name="lines").check()
        lines = "section[data-attention='attn'] svg.sw-att-lines-svg"
        assert page.locator(f"{lines} g[data-head]").count() == 2  # a group per head
        page.locator(f"{lines} text[data-side='k'][data-index='1']").hover()  # key "cat"
        shown = page.evaluate(SHOWN_KEYS, lines)
        assert shown == [1], shown
        view.get_by_role("radio", name="model").check()
        page.get_by_role("button", name="Open attn head 1").click()
        assert page.locator(MAP).get_attribute("data-head") == "1"
        assert view.get_by_role("radio", name="map").is_checked()
        assert errors == [], errors
