"""The tree shows rows in the order Python derives (issue 10 §5): a tiny GPT-2's real rows with
graph nodes (torch.export), in the built bundle (harness page, headless Chromium).

``SURGEON_SCREENSHOT_DIR`` set: also saves light and dark screenshots of the tree.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from surgeon_widgets.widget.views import tree

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs /usr/bin/chromium"),
]

# every visible row in display order: the tree is virtualized, so scroll through it
VISIBLE = """async () => {
    const tree = document.querySelector('[role="tree"]');
    const seen = new Map();
    for (let top = 0; ; top += tree.clientHeight / 2) {
        tree.scrollTop = top;
        await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
        for (const r of tree.querySelectorAll('[role="treeitem"]')) {
            seen.set(Number(r.dataset.index), r.dataset.name);
        }
        if (top >= tree.scrollHeight) break;
    }
    tree.scrollTop = 0;
    return [...seen.entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
}"""

SCROLL_TO = """(f) => {
    const tree = document.querySelector('[role="tree"]');
    tree.scrollTop = f * tree.scrollHeight;
}"""


def test_block_children_render_in_execution_order(harness):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100)
    model = transformers.GPT2Model(config).eval()
    inputs = {"input_ids": torch.randint(0, 99, (1, 8)), "use_cache": False}
    modules = tree.module_rows(model)
    nodes = tree.node_rows(model, inputs, frozenset(r["name"] for r in modules))
    rows = tree.merge_rows(modules, nodes, tree.execution_order(model, example_inputs=inputs))
    page = harness
    page.evaluate("(s) => window.harness.mount(s)", {"rows": rows, "show_nodes": True})
    page.locator('[role="treeitem"][data-name="input_ids"]').wait_for()
    shown = page.evaluate(VISIBLE)
    block = [n for n in shown if n.startswith("h.0.") and n.count(".") == 2]
    assert block == [f"h.0.{n}" for n in ("ln_1", "attn", "add", "ln_2", "mlp", "add_1")]
    assert shown[0] == "input_ids" and shown.index("wte") < shown.index("h") < shown.index("ln_f")
    shots = os.environ.get("SURGEON_SCREENSHOT_DIR")
    if shots:
        page.evaluate(SCROLL_TO, shown.index("h") / len(shown))
        page.locator('[role="treeitem"][data-name="h.0.add_1"]').wait_for()
        for theme in ("true", "false"):
            page.evaluate(f"() => document.body.setAttribute('data-jp-theme-light', '{theme}')")
            page.screenshot(path=os.path.join(shots, f"tree_order_light_{theme}.png"))
