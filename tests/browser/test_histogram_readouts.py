"""What a histogram block reads out, in headless Chromium on the built bundle: the exact zeros'
own bar, a pinned step's numbers, readable ranges, the update cadence (issue #32's small items).

Stats come from real tensors (``tensor_stats`` of a ReLU's output) through the real wire
(``wire.stats_message``), injected into the harness page's fake anywidget model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_explorer_frontend import PIXEL, ROWS, mount
from torch import nn

from surgeon_widgets.engine.stats import tensor_stats
from surgeon_widgets.widget.history import Record
from surgeon_widgets.widget.wire import stats_message

INJECT = "([c, a]) => window.harness.inject(c, a)"


def relu_output(seed: int = 0, shift: float = 0.0) -> torch.Tensor:
    """A real ReLU layer's output: about a third to a half exact zeros."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
    with torch.no_grad():
        return net(torch.randn(128, 16) + shift)


def inject(page, layer: str, step: int, tensor: torch.Tensor, **extra) -> dict:
    """Send the stats of ``tensor`` as ``layer``'s output at ``step``; returns the item sent."""
    rec = Record(f"{layer}/output", layer, "output", "activation", step, tensor_stats(tensor))
    content, buffers = stats_message([rec])
    content["items"][0].update(extra)
    arrays = [{"dtype": "float32", "values": np.frombuffer(b, "<f4").tolist()} for b in buffers]
    page.evaluate(INJECT, [content, arrays])
    return content["items"][0]


def test_exact_zeros_get_their_own_labelled_bar(harness):
    page = harness
    mount(page, rows=ROWS, selected=["head"])
    out = relu_output()
    share = float((out == 0).float().mean())
    assert 0.2 < share < 0.8
    sent = inject(page, "head", 1, out)
    assert sent["zeros"] == share
    bar = '[data-layer="head"] .sw-zero'
    assert page.is_visible(bar)
    assert page.inner_text(f"{bar} .sw-zero-label") == f"0: {round(share * 100)}%"
    fill = page.locator(f"{bar} .sw-zero-fill").bounding_box()
    track = page.locator(f"{bar} .sw-zero-track").bounding_box()
    assert abs(fill["height"] - share * track["height"]) <= 1  # its own 0-100% scale
    # the bars hold the non-zero values only: the first bin is no spike of zeros
    counts = tensor_stats(out).hist
    assert counts.sum() == int((out != 0).sum()) and counts[0] < 2 * counts[1]
    assert page.inner_text('[data-layer="head"] .sw-count-max') == str(int(counts.max()))
    label = "Histogram of head output"
    first = page.evaluate(PIXEL, [label, 1, 71])  # bin 0 (holds the small positive values)
    assert first[3] > 0
    # a tensor with no exact zero has no zero bar
    inject(page, "head", 2, torch.randn(64, 64))
    assert not page.is_visible(bar)


def test_cadence_reads_true_for_fast_steps_and_max_rate_0(harness):
    page = harness
    title = '[data-layer="head"] .sw-leaf-title'
    mount(page, rows=ROWS, selected=["head"], max_rate=0)  # no throttle: every forward
    inject(page, "head", 1, relu_output(), every=0.004)  # 4 ms between forwards
    assert page.inner_text(title).endswith("step 1 · train · every step, 4 ms apart")
    assert page.evaluate("() => window.harness.unmount()")
    mount(page, rows=ROWS, selected=["head"], max_rate=10)
    inject(page, "head", 2, relu_output(), every=0.04)
    assert page.inner_text(title).endswith("step 2 · train · every 40 ms")  # not "0.0 s"


def test_a_narrow_curve_range_reads_as_low_end_and_span(harness):
    page = harness
    mount(page, rows=ROWS, selected=["head"])
    out = relu_output() + 0.5
    for step in range(1, 6):  # means 3e-5 apart in all: "0.8273 … 0.82733" before
        sent = inject(page, "head", step, out + step * 6e-6)
    curve = '[data-layer="head"] .sw-curves [data-stat="mean"]'
    lo, hi = page.inner_text(f"{curve} .sw-curve-lo"), page.inner_text(f"{curve} .sw-curve-hi")
    first = float(lo)
    assert abs(first - (sent["mean"] - 4 * 6e-6)) < 1e-4 and len(lo) <= 6
    assert hi.startswith("+") and abs(float(hi[1:]) - 2.4e-5) < 2e-6
    box = page.locator(f"{curve} .sw-curve-range").bounding_box()
    assert box["height"] < 20  # both labels on one line of the 88 px chart


OUTLINE_ROWS = """([label, color]) => {
    // rows of the canvas where the pinned outline's colour shows, in a column through bar 20
    const c = document.querySelector(`canvas[aria-label="${label}"]`);
    const x = Math.floor((20.5 * c.width) / 64);
    const d = c.getContext('2d').getImageData(x, 0, 1, c.height).data;
    const rows = [];
    for (let y = 0; y < c.height; y++) {
        const px = [d[y * 4], d[y * 4 + 1], d[y * 4 + 2], d[y * 4 + 3]];
        const near = px.slice(0, 3).every((v, i) => Math.abs(v - color[i]) < 40);
        if (px[3] > 200 && near) rows.push(y);
    }
    return rows;
}"""


def pin_first_row(page, layer: str) -> None:
    box = page.locator(f'canvas[aria-label="History of {layer} output"]').bounding_box()
    page.mouse.click(box["x"] + 20, box["y"] + 2)


COLOR = """(c) => {
    const e = document.createElement('canvas').getContext('2d');
    e.fillStyle = c;
    e.fillRect(0, 0, 1, 1);
    return Array.from(e.getImageData(0, 0, 1, 1).data);
}"""
VAR = """(v) => getComputedStyle(document.querySelector('.sw-layer')).getPropertyValue(v)"""


@pytest.mark.parametrize("light", ["true", "false"], ids=["light", "dark"])
def test_a_pinned_step_shows_its_numbers_and_an_outline_even_when_alike(harness, light):
    page = harness
    page.evaluate("(l) => document.body.setAttribute('data-jp-theme-light', l)", light)
    mount(page, rows=ROWS, selected=["head"])
    out = relu_output()
    first = inject(page, "head", 1, out)
    latest = inject(page, "head", 2, out.clone())  # the same values: the outline lies on the bars
    label = "Histogram of head output"
    rgb = page.evaluate(COLOR, page.evaluate(VAR, "--sw-fg"))
    bg = page.evaluate(COLOR, page.evaluate(VAR, "--sw-bg"))
    assert page.evaluate(OUTLINE_ROWS, [label, rgb]) == []  # nothing pinned: no outline
    table = '[data-layer="head"] .sw-pin-stats'
    assert not page.is_visible(table)
    pin_first_row(page, "head")
    outline = page.evaluate(OUTLINE_ROWS, [label, rgb])
    assert outline, "the pinned outline vanished over bars of the same height"
    # it stands out: a halo of the background's colour parts it from the bar below
    x = int((20.5 * 256) / 64)
    under = [page.evaluate(PIXEL, [label, x, max(outline) + d]) for d in (1, 2)]
    assert any(all(abs(a - b) < 30 for a, b in zip(px, bg)) for px in under), (under, bg)
    # the pinned step's numbers beside the latest's, column by column
    assert page.is_visible(table)
    heads = page.locator(f"{table} th[scope=col]").all_inner_texts()
    assert heads == ["mean", "std", "min", "max", "zeros", "NaN", "Inf"]
    rows = [r.split("\t") for r in page.locator(f"{table} tr").all_inner_texts()[1:]]
    assert [r[0] for r in rows] == ["step 2", "step 1 (pinned)"]
    assert rows[0][1] == rows[1][1] and float(rows[1][1]) == round(first["mean"], 3)
    assert rows[0][5] == f"{round(latest['zeros'] * 100)}%"
    page.keyboard.press("Escape")  # focus is on the strip: Escape unpins
    assert not page.is_visible(table)
