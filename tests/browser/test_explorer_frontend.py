"""The Explorer front end (built bundle) in headless Chromium, against a fake anywidget model.

The harness page (harness.html / harness.js) loads surgeon_widgets/static/explorer.js and exposes
`window.harness` (mount, unmount, inject a custom message with DataView buffers, listener counts).
"""

from __future__ import annotations

import math
import os
import time


def row(name, parent, depth, cls, kind="module", params=1, children=0):
    """One row dict of PROTOCOL.md."""
    return {"name": name, "parent": parent, "depth": depth, "cls": cls, "kind": kind,
            "params": params, "children": children}  # fmt: skip


ROWS = [
    row("encoder", None, 0, "Encoder", params=1200, children=1),
    row("encoder.layers", "encoder", 1, "ModuleList", params=1200, children=1),
    row("encoder.layers.0", "encoder.layers", 2, "Block", params=1200, children=2),
    row("encoder.layers.0.attn", "encoder.layers.0", 3, "MultiheadAttention", params=1000),
    row("encoder.layers.0.mlp", "encoder.layers.0", 3, "Linear", params=200),
    row("head", None, 0, "Linear", params=11),
    row("relu", None, 0, "relu", kind="node", params=0),
]
COUNTS = [0.0] * 32 + [float(i + 1) for i in range(32)]  # left half empty, right half rising


def item(step=1, leaf="output", kind="activation", buffer=0, dtype="float32", layer="layer2"):
    return {
        "key": f"{layer}/{leaf}",
        "layer": layer,
        "leaf": leaf,
        "kind": kind,
        "step": step,
        "shape": [1, 2],
        "dtype": "float32",
        "numel": 2,
        "mean": 0.5,
        "std": 1.0,
        "min": -1.0,
        "max": 2.0,
        "zeros": 0.0,
        "nans": 0,
        "infs": 0,
        "hist": {"buffer": buffer, "dtype": dtype, "shape": [64]},
        "lo": -1.0,
        "hi": 2.0,
    }


def mount(page, **state):
    page.evaluate("(s) => window.harness.mount(s)", state)


def model(page, key):
    return page.evaluate("(k) => window.harness.model().get(k)", key)


def sent(page):
    return page.evaluate("() => window.harness.model().sent")


def active(page):
    return page.evaluate("""() => {
        const id = document.querySelector('[role="tree"]').getAttribute('aria-activedescendant');
        return id ? document.getElementById(id).dataset.name : null;
    }""")


def rows(page, attr="data-name"):
    """Rendered rows in display order: (name, aria-selected, aria-expanded)."""
    return page.evaluate("""() => [...document.querySelectorAll('[role="treeitem"]')]
        .sort((a, b) => a.dataset.index - b.dataset.index)
        .map((r) => [r.dataset.name, r.getAttribute('aria-selected'),
                     r.getAttribute('aria-expanded')])""")


def names(page):
    return [r[0] for r in rows(page)]


def selected_rows(page):
    return [name for name, sel, _ in rows(page) if sel == "true"]


PAINTED_BINS = """(label) => {
    const c = document.querySelector(`canvas[aria-label="${label}"]`);
    const { width: w, height: h } = c;
    const data = c.getContext('2d').getImageData(0, 0, w, h).data;
    const bins = [];
    for (let b = 0; b < 64; b++) {
        const x = Math.floor((b * w) / 64) + 1;  // inside the bar, clear of the 1px gap
        // bars stand on the bottom row; the dashed zero line leaves it clear
        bins.push(data[((h - 1) * w + x) * 4 + 3] > 0);
    }
    return bins;
}"""

BAR_COLOR = """(label) => {
    const c = document.querySelector(`canvas[aria-label="${label}"]`);
    const d = c.getContext('2d').getImageData(c.width - 2, c.height - 1, 1, 1).data;
    return [d[0], d[1], d[2], d[3]];
}"""


def test_keyboard_navigation_and_selection(harness):
    page = harness
    mount(page, rows=ROWS)
    assert sent(page) == [{"type": "hello"}]
    # depth 0-1 rows start expanded, depth 2 collapsed; graph nodes hidden
    assert names(page) == ["encoder", "encoder.layers", "encoder.layers.0", "head"]
    page.evaluate(
        "() => { window.docKeys = 0; "
        "document.addEventListener('keydown', () => window.docKeys++); }"
    )

    page.focus('[role="tree"]')
    page.keyboard.press("ArrowDown")
    assert active(page) == "encoder"
    page.keyboard.press("End")
    assert active(page) == "head"
    page.keyboard.press("Home")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert active(page) == "encoder.layers.0"
    assert rows(page)[2] == ["encoder.layers.0", "false", "false"]
    page.keyboard.press("ArrowRight")  # expand
    assert rows(page)[2][2] == "true"
    assert "encoder.layers.0.attn" in names(page)
    page.keyboard.press("ArrowRight")  # into first child
    assert active(page) == "encoder.layers.0.attn"
    page.keyboard.press("Enter")
    assert selected_rows(page) == ["encoder.layers.0.attn"]
    assert model(page, "selected") == ["encoder.layers.0.attn"]
    page.keyboard.press("ArrowDown")
    page.keyboard.press(" ")  # Space toggles: multi-select
    assert model(page, "selected") == ["encoder.layers.0.attn", "encoder.layers.0.mlp"]
    page.keyboard.press("ArrowLeft")  # leaf: to parent
    assert active(page) == "encoder.layers.0"
    page.keyboard.press("ArrowLeft")  # collapse
    assert "encoder.layers.0.attn" not in names(page)
    assert page.evaluate("() => window.docKeys") == 0, "key events must not reach the notebook"

    page.click('[data-name="head"]')
    assert model(page, "selected") == ["head"]
    page.click('[data-name="encoder"]', modifiers=["Control"])
    assert model(page, "selected") == ["head", "encoder"]
    page.click('[data-name="encoder.layers"]', modifiers=["Shift"])
    assert model(page, "selected") == ["encoder", "encoder.layers"]
    assert selected_rows(page) == ["encoder", "encoder.layers"]


def test_search_keeps_ancestors_of_matches(harness):
    page = harness
    mount(page, rows=ROWS, shapes={"head": {"shape": [4, 1], "dtype": "float32"}})
    page.fill('[role="searchbox"]', "attn")
    # the match sits below the collapsed depth-2 row: its ancestors are shown, opened
    assert names(page) == ["encoder", "encoder.layers", "encoder.layers.0", "encoder.layers.0.attn"]
    assert model(page, "search") == "attn"
    page.fill('[role="searchbox"]', "linear")  # by class, case-insensitive
    assert names(page) == [
        "encoder",
        "encoder.layers",
        "encoder.layers.0",
        "encoder.layers.0.mlp",
        "head",
    ]
    label = page.get_attribute('[data-name="head"]', "aria-label")
    assert label.startswith("head, Linear, 11 params, [4, 1] float32")
    page.fill('[role="searchbox"]', "")
    assert names(page) == ["encoder", "encoder.layers", "encoder.layers.0", "head"]
    page.evaluate("() => window.harness.model().set('search', 'mlp')")  # Python side sets it
    assert page.input_value('[role="searchbox"]') == "mlp"
    assert names(page)[-1] == "encoder.layers.0.mlp"


def test_histogram_drawn_from_binary_payload(harness):
    page = harness
    mount(page, rows=ROWS, selected=["layer2"])
    assert page.is_visible('[data-layer="layer2"] .sw-waiting')
    grad = item(leaf="grad_output[0]", kind="gradient", buffer=1, dtype="int32")
    page.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [
            {"type": "stats", "items": [item(step=1), grad, item(layer="layer3", buffer=0)]},
            [{"dtype": "float32", "values": COUNTS}, {"dtype": "int32", "values": COUNTS}],
        ],
    )
    expected = [c > 0 for c in COUNTS]
    assert page.evaluate(PAINTED_BINS, "Histogram of layer2 output") == expected
    assert page.evaluate(PAINTED_BINS, "Histogram of layer2 grad_output[0]") == expected
    stats = page.locator('[data-layer="layer2"] .sw-stats').first
    assert stats.is_visible()
    assert (
        stats.inner_text()
        == "mean 0.5 std 1 min -1 max 2 zeros 0% NaN 0 Inf 0 shape [1, 2] float32"
    )
    assert page.locator('[data-layer="layer3"]').count() == 0  # not selected: no panel
    assert not page.is_visible('[data-layer="layer2"] .sw-waiting')

    # a second step and a snapshot (answer to hello) feed the history strip
    page.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [
            {
                "type": "snapshot",
                "items": [item(step=3)],
                "history": {"layer2/output": [item(step=1), item(step=2)]},
            },
            [{"dtype": "float32", "values": COUNTS}],
        ],
    )
    heat = page.evaluate(PAINTED_BINS, "History of layer2 output")
    assert any(heat) and not all(heat)
    assert "step 3" in page.inner_text('[data-layer="layer2"] .sw-leaf-title')


def test_theme_switch_changes_background_and_redraws(harness):
    page = harness
    mount(page, selected=["layer2"])
    page.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [{"type": "stats", "items": [item()]}, [{"dtype": "float32", "values": COUNTS}]],
    )
    bg = "() => getComputedStyle(document.querySelector('.sw-explorer')).backgroundColor"
    light_bar = page.evaluate(BAR_COLOR, "Histogram of layer2 output")
    assert page.evaluate(bg) == "rgb(255, 255, 255)"
    page.evaluate("() => document.body.setAttribute('data-jp-theme-light', 'false')")
    assert page.evaluate(bg) == "rgb(17, 17, 17)"
    redrawn = f"(old) => `${{({BAR_COLOR})('Histogram of layer2 output')}}` !== `${{old}}`"
    page.wait_for_function(redrawn, arg=light_bar, timeout=2000)  # MutationObserver redraw
    # JupyterLab's own variables win over the fallbacks
    page.evaluate("() => document.body.style.setProperty('--jp-layout-color0', 'rgb(1, 2, 3)')")
    assert page.evaluate(bg) == "rgb(1, 2, 3)"
    # VS Code: no --jp-* variables, its editor background is used (the widget paints its own)
    page.evaluate("""() => {
        document.body.style.removeProperty('--jp-layout-color0');
        document.body.removeAttribute('data-jp-theme-light');
        document.body.style.setProperty('--vscode-editor-background', 'rgb(30, 30, 30)');
    }""")
    assert page.evaluate(bg) == "rgb(30, 30, 30)"


def test_ten_thousand_rows_stay_virtual_and_fast(harness):
    page = harness
    t0 = time.perf_counter()
    page.evaluate("() => window.harness.mount({ rows: window.harness.bigRows(100, 99) })")
    assert time.perf_counter() - t0 < 2.0
    count = "() => document.querySelectorAll('[role=\"treeitem\"]').length"
    assert page.evaluate("() => window.harness.model().get('rows').length") == 10_000
    assert 0 < page.evaluate(count) < 200
    page.focus('[role="tree"]')
    page.keyboard.press("End")
    page.wait_for_selector('[data-name="block99.layer98"]')
    assert active(page) == "block99.layer98"
    assert page.evaluate(count) < 200

    t0 = time.perf_counter()
    page.locator('[role="searchbox"]').press_sequentially("layer98")
    typing = time.perf_counter() - t0
    assert names(page)[:2] == ["block0", "block0.layer98"]
    assert page.inner_text(".sw-count") == "100 matches"
    assert page.evaluate(count) < 200
    assert typing < 3.0, f"typing 7 characters took {typing:.2f}s"
    per_update = page.evaluate("""() => {
        const box = document.querySelector('[role="searchbox"]');
        const t0 = performance.now();
        for (let i = 0; i < 20; i++) {
            box.value = i % 2 ? 'layer' : 'block5';
            box.dispatchEvent(new Event('input', { bubbles: true }));
        }
        return (performance.now() - t0) / 20;
    }""")
    assert per_update < 50, f"one search update took {per_update:.1f} ms"


def test_render_cleanup_removes_every_listener(harness):
    page = harness
    before = page.evaluate("() => window.harness.liveListeners()")
    for _ in range(2):  # a re-render (hot reload) must not accumulate anything
        mount(page, rows=ROWS, selected=["layer2"], hooks=[{"name": "layer2", "kind": "forward"}])
        assert page.evaluate("() => window.harness.liveListeners()") > before
        assert page.evaluate("() => window.harness.model().listenerCount()") > 0
        page.click('[data-name="head"]')
        page.fill('[role="searchbox"]', "enc")
        page.evaluate(
            "([c, a]) => window.harness.inject(c, a)",
            [{"type": "stats", "items": [item()]}, [{"dtype": "float32", "values": COUNTS}]],
        )
        assert page.evaluate("() => window.harness.unmount()") is True  # element emptied
        assert page.evaluate("() => window.harness.liveListeners()") == before
        assert page.evaluate("() => window.harness.model().listenerCount()") == 0


def test_hooks_panel_nodes_switch_and_errors(harness):
    page = harness
    mount(
        page,
        rows=ROWS,
        selected=["head"],
        hooks=[{"name": "head", "kind": "forward"}],
        errors=[{"text": "head: RuntimeError in hook", "layer": "head", "count": 1, "key": "k"}],
        nodes_error="",
    )
    panel = page.locator(".sw-hooks")
    assert "head" in panel.inner_text()
    assert "RuntimeError in hook" in panel.inner_text()
    page.get_by_role("button", name="Remove all hooks").click()
    assert sent(page)[-1] == {"type": "remove_all_hooks"}

    switch = page.get_by_role("switch", name="graph nodes")
    assert switch.get_attribute("aria-checked") == "false"
    assert "relu" not in names(page)
    switch.click()
    assert model(page, "show_nodes") is True
    assert switch.get_attribute("aria-checked") == "true"
    assert "relu" in names(page)
    page.evaluate("() => window.harness.model().set('nodes_error', 'torch.fx: data-dependent if')")
    assert page.is_visible(".sw-nodes-error")
    assert "data-dependent if" in page.inner_text(".sw-nodes-error")


def test_clicks_note_shows_only_where_clicks_wait_for_the_cell(harness):
    page = harness
    mount(page, clicks="subshell")
    note = page.locator(".sw-clicks-note")
    assert not note.is_visible()  # clicks reach a running cell: nothing to say
    page.evaluate("() => window.harness.model().set('clicks', 'note')")
    assert note.is_visible()
    assert note.inner_text() == "clicks made while a cell runs apply when the cell finishes"
    shots = os.environ.get("SURGEON_SCREENSHOT_DIR")
    for theme in ("true", "false"):
        page.evaluate(f"() => document.body.setAttribute('data-jp-theme-light', '{theme}')")
        color = page.evaluate(
            "() => getComputedStyle(document.querySelector('.sw-clicks-note')).color"
        )
        background = page.evaluate(
            "() => getComputedStyle(document.querySelector('.sw-explorer')).backgroundColor"
        )
        assert color != background
        if shots:
            page.screenshot(path=os.path.join(shots, f"clicks_note_light_{theme}.png"))
    page.evaluate("() => window.harness.model().set('clicks', 'drain')")
    assert not note.is_visible()


def test_error_list_clear_button_replaced_notice_and_mode(harness, tmp_path):
    page = harness
    entry = {"text": "layer2: the activation statistics failed (RuntimeError: boom); the model "
             "ran on unharmed. Deselect layer2 to stop retrying, or report it with the detail.",
             "layer": "layer2", "count": 7, "detail": "RuntimeError: boom\n  torch detail",
             "key": "k"}  # fmt: skip
    replaced = "Replaced by a newer Explorer on this model: this one removed its hooks."
    mount(page, rows=ROWS, selected=["layer2"], errors=[entry], notes=[], replaced=replaced)
    page.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [{"type": "stats", "items": [{**item(step=4), "training": False}]},
         [{"dtype": "float32", "values": COUNTS}]],
    )  # fmt: skip
    errors = page.locator(".sw-errors li")
    assert errors.count() == 1 and "×7" in errors.inner_text()
    assert "Deselect layer2" in errors.inner_text()
    assert page.locator(".sw-replaced").is_visible()
    assert "Replaced by a newer Explorer" in page.inner_text(".sw-replaced")
    assert page.get_by_role("button", name="Remove all hooks").is_disabled()
    assert "step 4 · eval" in page.inner_text(".sw-leaf-title")
    status = page.locator(".sw-status")
    assert not status.is_visible()
    page.evaluate("() => window.harness.model().set('status', 'recompiling, ~31 s')")
    assert status.is_visible() and status.inner_text() == "recompiling, ~31 s"
    page.evaluate("() => window.harness.model().set('status', '')")  # the first record came
    assert not status.is_visible()
    page.locator(".sw-explorer").screenshot(path=str(tmp_path / "errors-light.png"))
    page.evaluate("() => document.body.setAttribute('data-jp-theme-light', 'false')")
    page.locator(".sw-explorer").screenshot(path=str(tmp_path / "errors-dark.png"))
    page.evaluate("() => document.body.removeAttribute('data-jp-theme-light')")
    page.get_by_role("button", name="Clear errors").click()
    assert sent(page)[-1] == {"type": "clear_errors"}
    page.evaluate("() => window.harness.model().set('errors', [])")
    assert not page.locator(".sw-errors").is_visible()

    page.locator(".sw-rate").fill("-3")
    page.locator(".sw-rate").dispatch_event("change")
    assert page.locator(".sw-rate-refused").is_visible()
    assert "must be ≥ 0" in page.inner_text(".sw-rate-refused")
    assert model(page, "max_rate") == 10


LIVE_ONLY = {
    "gradients checkbox": ".sw-gradients",
    "max rate": ".sw-rate",
    "hooks title": ".sw-hooks-title",
    "remove all hooks": ".sw-remove-hooks",
    "cut panel": "section.sw-cut",
    "graph nodes switch": ".sw-switch",
}


def visible(page, selector):
    return page.locator(selector).first.is_visible()


def test_run_view_hides_live_controls_and_marks_unrecorded_layers(harness):
    page = harness
    mount(page, rows=ROWS, hooks=[{"name": "head", "kind": "activation"}], selected=["head"])
    assert {k: visible(page, s) for k, s in LIVE_ONLY.items()} == dict.fromkeys(LIVE_ONLY, True)
    assert not visible(page, ".sw-run-note")
    assert page.locator('[aria-disabled="true"]').count() == 0
    assert page.evaluate("() => window.harness.unmount()") is True

    # Explorer.from_run: `run` lists the recorded layers (PROTOCOL.md "Recorded runs")
    recorded = ["encoder.layers.0.mlp", "head"]
    mount(page, rows=ROWS, selected=recorded, run={"layers": recorded})
    assert {k: visible(page, s) for k, s in LIVE_ONLY.items()} == dict.fromkeys(LIVE_ONLY, False)
    assert not visible(page, ".sw-hooks"), "no hooks and no errors: nothing to show"
    assert "select recorded layers" in page.inner_text(".sw-run-note")
    enc = page.locator('[data-name="encoder"]')
    assert enc.get_attribute("aria-disabled") == "true"
    assert enc.get_attribute("aria-label").endswith("not recorded")
    assert "not recorded" in enc.inner_text()
    assert page.locator('[data-name="head"]').get_attribute("aria-disabled") is None
    assert "not recorded" not in page.locator('[data-name="head"]').inner_text()

    page.click('[data-name="head"]')  # the tree filters which recorded layers are shown
    assert model(page, "selected") == ["head"]
    shown = page.locator("[data-layer]").evaluate_all("els => els.map(e => e.dataset.layer)")
    assert shown == ["head"]
    # aria-disabled rows are not "enabled" for playwright either: force the user's click
    page.click('[data-name="encoder"]', force=True)  # not recorded: the selection stays
    assert model(page, "selected") == ["head"]
    page.keyboard.press("Enter")  # the focused unrecorded row
    assert model(page, "selected") == ["head"]
    page.click('[data-name="encoder.layers.0"]', modifiers=["Control"], force=True)
    assert model(page, "selected") == ["head"]
    page.click('[data-name="encoder.layers.0"] .sw-twisty', force=True)  # expand still works
    assert "encoder.layers.0.mlp" in names(page)
    page.click('[data-name="head"]')
    page.click('[data-name="encoder"]', modifiers=["Shift"], force=True)  # range: recorded only
    assert model(page, "selected") == ["encoder.layers.0.mlp", "head"]

    # a failed run's error still shows, without the hooks list or its button
    failed = {"text": "job failed: boom", "layer": "", "count": 1, "key": "job failed: boom"}
    page.evaluate("(e) => window.harness.model().set('errors', [e])", failed)
    assert visible(page, ".sw-hooks") and "job failed: boom" in page.inner_text(".sw-errors")
    assert not visible(page, ".sw-remove-hooks") and not visible(page, ".sw-hooks-title")


PIXEL = """([label, x, y]) => Array.from(document.querySelector(`canvas[aria-label="${label}"]`)
    .getContext('2d').getImageData(x, y, 1, 1).data)"""

BAR_HEIGHT = """([label, bin]) => {
    const c = document.querySelector(`canvas[aria-label="${label}"]`);
    const x = Math.floor((bin * c.width) / 64) + 1;
    const data = c.getContext('2d').getImageData(x, 0, 1, c.height).data;
    let n = 0;
    for (let y = c.height - 1; y >= 0 && data[y * 4 + 3] > 0; y--) n++;
    return n;
}"""


def test_histogram_axes_log_counts_history_steps_modes_and_curves(harness):
    page = harness
    mlp, head = "encoder.layers.0.mlp", "head"
    mount(page, rows=ROWS, selected=[head, mlp])  # clicked head first
    order = "() => [...document.querySelectorAll('.sw-layer')].map((p) => p.dataset.layer)"
    assert page.evaluate(order) == [mlp, head]  # model order, not click order
    items = []
    for step in range(1, 6):
        extra = {"mean": 0.1 * step, "l2": float(step), "training": step != 4}
        a = item(step=step, layer=mlp) | extra | {"nans": int(step == 3)}
        b = item(step=step, layer=head) | {"lo": 0.5, "hi": 2.0}  # 0 outside the range
        items += [a, b]
    for it in items:
        page.evaluate(
            "([c, a]) => window.harness.inject(c, a)",
            [{"type": "stats", "items": [it]}, [{"dtype": "float32", "values": COUNTS}]],
        )
    panel = f'[data-layer="{mlp}"]'
    hist = f"Histogram of {mlp} output"
    assert page.inner_text(f"{panel} .sw-count-max") == "32"
    assert page.inner_text(f"{panel} .sw-count-title") == "count"
    assert page.evaluate(BAR_HEIGHT, [hist, 32]) == 2  # count 1 of 32 on 72 px
    page.locator(f"{panel} input.sw-logcount").check()
    assert page.inner_text(f"{panel} .sw-count-title") == "log count"
    assert page.evaluate(BAR_HEIGHT, [hist, 32]) == round(math.log(2) / math.log(33) * 72)
    assert page.evaluate(BAR_HEIGHT, [hist, 63]) == 72
    # the zero line: x = 1/3 of the width for [-1, 2], where the bins are empty
    assert page.evaluate(PIXEL, [hist, 85, 0])[3] > 0
    assert page.evaluate(PIXEL, [f"Histogram of {head} output", 85, 0])[3] == 0
    assert page.inner_text(f"{panel} .sw-step-first") == "step 1"
    assert page.inner_text(f"{panel} .sw-step-last") == "step 5"
    # train/eval mark: shown where records carry `training`, one row per step (40 px / 5)
    assert page.is_visible(f"{panel} .sw-modes")
    assert not page.is_visible(f'[data-layer="{head}"] .sw-modes')
    heat = f"History of {mlp} output"
    train, evaluating = page.evaluate(PIXEL, [heat, 1, 4]), page.evaluate(PIXEL, [heat, 1, 28])
    assert train[3] == 255 and evaluating[3] == 255 and train != evaluating
    assert page.evaluate(PIXEL, [f"History of {head} output", 1, 4])[3] == 0
    # curves of mean / std / L2 norm, step 3 (NaN) marked red across the charts
    curves = f"{panel} .sw-curves"
    assert page.get_attribute(curves, "data-bad-steps") == "3"
    captions = page.locator(f"{curves} figcaption").all_inner_texts()
    assert captions == ["mean 0.5", "std 1", "L2 norm 5"]
    assert page.inner_text(f'{curves} [data-stat="l2"] .sw-curve-range') == "1 … 5"
    red = page.evaluate(PIXEL, [f"mean of {mlp} output over steps", 44, 1])  # step 3
    assert red[0] > 150 and red[1] < 100 and red[3] == 255
    assert page.evaluate(PIXEL, [f"mean of {mlp} output over steps", 21, 1])[3] == 0


def test_closed_explorer_leaves_a_placeholder(harness):
    page = harness
    mount(page, rows=ROWS, selected=["head"])
    assert page.locator(".sw-closed").count() == 0
    page.evaluate("() => window.harness.model().set('closed', true)")  # Python's close()
    assert page.locator("[role='tree']").count() == 0
    assert page.inner_text(".sw-closed") == "Explorer closed"
    assert page.evaluate("() => window.harness.unmount()") is True
    assert page.locator(".sw-closed").count() == 0


def test_parameters_switch_sets_param_layers_and_weights_get_their_panel_blocks(harness):
    page = harness
    mount(page, rows=ROWS, selected=["head"], param_layers=[])
    switch = page.locator('[data-layer="head"] input.sw-params')
    switch.check()
    assert model(page, "param_layers") == ["head"]
    page.evaluate("() => window.harness.model().set('param_layers', [])")  # Python pruned it
    assert not switch.is_checked()
    weight = item(leaf="weight", kind="weight", layer="head") | {"key": "head/weight"}
    grad = item(leaf="weight.grad", kind="weight grad", layer="head") | {"key": "head/weight.grad"}
    page.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [{"type": "stats", "items": [grad, weight, item(layer="head")]},
         [{"dtype": "float32", "values": COUNTS}]],
    )  # fmt: skip
    titles = page.locator('[data-layer="head"] .sw-leaf-title').all_inner_texts()
    assert titles == [
        "output · activation · step 1", "weight · weight · step 1",
        "weight.grad · weight grad · step 1",
    ]  # fmt: skip
    colors = {
        leaf: page.evaluate(BAR_COLOR, f"Histogram of head {leaf}")
        for leaf in ("output", "weight", "weight.grad")
    }
    assert len(set(map(str, colors.values()))) == 3
