"""Every text colour of the widget reads at >= 4.5:1 (WCAG AA) in light and dark themes.

The page loads JupyterLab's own theme stylesheets (from the installed JupyterLab) into the
bundle harness, fills every view (tree, histograms, curves, attention, cut report with each
kind of code token, hooks, errors), and computes the contrast of each text-bearing element's
computed colour against the background it is painted on (alpha composited up the tree).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_explorer_frontend import COUNTS, ROWS, item

THEMES = Path(sys.prefix) / "share/jupyter/lab/themes/@jupyterlab"
CODE = (
    "from surgeon_widgets import Extract\n\n# the cut\n"
    "cut_model = Extract(model, node_in=['layer1'], node_out={'fc': 'logits'}, n=3)\n"
)

CONTRASTS = """() => {
  const parse = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const [r, g, b, a = 1] = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [r, g, b, a];
  };
  const over = (top, bottom) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + bottom[i] * (1 - a)).concat(1);
  };
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let bg = [255, 255, 255, 1];
    for (const c of layers.reverse()) bg = over(c, bg);
    return bg;
  };
  const lum = (c) => {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const out = [];
  const root = document.querySelector('.sw-explorer');
  for (const el of [root, ...root.querySelectorAll('*')]) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const field = el.matches('input[type=text], input[type=number], select, button');
    if (!own && !field) continue;
    const r = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    if (r.width === 0 || r.height === 0 || style.visibility === 'hidden') continue;
    let opacity = 1;
    for (let e = el; e; e = e.parentElement) opacity *= Number(getComputedStyle(e).opacity);
    const bg = background(el);
    const fg = parse(style.color);
    const shown = over([fg[0], fg[1], fg[2], fg[3] * opacity], bg);
    const [a, b] = [lum(shown), lum(bg)].sort((x, y) => y - x);
    const text = (el.value || el.textContent || '').trim().slice(0, 30);
    out.push({ cls: el.className || el.tagName, text, ratio: (a + 0.05) / (b + 0.05),
               color: style.color, bg: `rgb(${bg.slice(0, 3).map(Math.round)})` });
  }
  return out;
}"""


def fill(page):
    mlp = "encoder.layers.0.mlp"
    page.evaluate("(s) => window.harness.mount(s)", {
        "rows": ROWS, "selected": [mlp], "gradients": True, "show_nodes": True,
        "node_in": {"encoder.layers.0.attn": "h"}, "node_out": {"head": "head"},
        "hooks": [{"name": mlp, "kind": "forward"}],
        "errors": ["encoder.layers.0.mlp (activation): RuntimeError: boom"],
    })  # fmt: skip
    for step in range(3):
        items = [
            item(step=step, layer=mlp) | {"l2": 2.0, "training": step != 1, "nans": step == 2},
            item(step=step, layer=mlp, leaf="grad_output[0]", kind="gradient"),
        ]
        page.evaluate(
            "([c, a]) => window.harness.inject(c, a)",
            [{"type": "stats", "items": items}, [{"dtype": "float32", "values": COUNTS}]],
        )
    attention = [
        {"layer": mlp, "head": head, "batch": 0, "batches": 1, "heads": 1, "step": 1,
         "shape": [4, 4], "full_shape": [4, 4], "lo": 0.0, "hi": 0.5, "dtype": "uint8",
         "buffer": 0, "tokens_q": ["a", "b", "c", "d"], "tokens_k": ["a", "b", "c", "d"]}
        for head in ("mean", 0)
    ]  # fmt: skip
    page.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [{"type": "attention", "items": attention}, [{"dtype": "uint8", "values": [9] * 16}]],
    )
    assert page.locator(".sw-att-legend-hi").inner_text() == "0.0176"  # the range: 9 / 255 * 0.5
    report = {
        "node_in": ["encoder.layers.0.attn"], "node_out": ["head"], "inputs": ["x", "h"],
        "outputs": ["head"], "leaks": {"x": ["encoder.layers.0.mlp"]}, "fix": ["mlp"],
        "params_kept": 10, "params_total": 20, "nodes_kept": 3, "nodes_total": 5,
        "method": "fx", "problems": ["a problem"], "valid": False,
        "note": "traced with static shapes: the cut runs only on inputs of the example's shapes",
    }  # fmt: skip
    page.evaluate(
        "([r, c]) => { const m = window.harness.model(); m.set('cut_report', r); "
        "m.set('code', c); }",
        [report, CODE],
    )
    tokens = page.evaluate(
        "() => [...new Set([...document.querySelectorAll('.sw-code [class^=sw-tok]')]"
        ".map((e) => e.className))].sort()"
    )
    assert tokens == ["sw-tok-comment", "sw-tok-keyword", "sw-tok-number", "sw-tok-string"]


@pytest.mark.parametrize("jupyterlab", [True, False], ids=["jupyterlab", "own-fallbacks"])
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_colour_has_at_least_4_5_to_1_contrast(harness, theme, jupyterlab):
    page = harness
    if jupyterlab:
        page.add_style_tag(content=(THEMES / f"theme-{theme}-extension/index.css").read_text())
    light = str(theme == "light").lower()
    page.evaluate("(l) => document.body.setAttribute('data-jp-theme-light', l)", light)
    fill(page)
    found = page.evaluate(CONTRASTS)
    assert len(found) > 40  # the views really rendered
    for mode in ("lines", "model"):  # the attention view's other modes
        page.get_by_role("radio", name=mode).check()
        found += page.evaluate(CONTRASTS)
    bad = [f"{f['cls']} {f['text']!r}: {f['ratio']:.2f} ({f['color']} on {f['bg']})"
           for f in found if f["ratio"] < 4.5]  # fmt: skip
    assert bad == [], "\n".join(bad)


SWATCHES = """() => {
  const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
  const lum = (c) => {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const ratio = (x, y) => {
    const [a, b] = [lum(x), lum(y)].sort((p, q) => q - p);
    return (a + 0.05) / (b + 0.05);
  };
  const bg = rgb(getComputedStyle(document.querySelector('.sw-explorer')).backgroundColor);
  const out = {};
  for (const mode of ['train', 'eval']) {
    const swatch = document.querySelector(`.sw-mode-${mode}`);
    const c = rgb(getComputedStyle(swatch, '::before').backgroundColor);
    out[mode] = { color: c, ratio: ratio(c, bg) };
  }
  out.between = ratio(out.train.color, out.eval.color);
  return out;
}"""


@pytest.mark.parametrize("jupyterlab", [True, False], ids=["jupyterlab", "own-fallbacks"])
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_train_and_eval_swatches_stand_out_from_the_background(harness, theme, jupyterlab):
    """Non-text contrast (WCAG 1.4.11, 3:1): the legend's swatches, opaque, and apart."""
    page = harness
    if jupyterlab:
        page.add_style_tag(content=(THEMES / f"theme-{theme}-extension/index.css").read_text())
    light = str(theme == "light").lower()
    page.evaluate("(l) => document.body.setAttribute('data-jp-theme-light', l)", light)
    fill(page)
    found = page.evaluate(SWATCHES)
    for mode in ("train", "eval"):
        color = found[mode]["color"]
        assert len(color) == 3 or color[3] == 1, f"{mode} swatch not opaque: {color}"
        assert found[mode]["ratio"] >= 3, f"{mode} swatch {color}: {found[mode]['ratio']:.2f}"
    assert found["between"] >= 1.3, found  # train and eval do not read as one colour
