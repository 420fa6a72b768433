"""The Explorer front end (built bundle) in headless Chromium, against a fake anywidget model.

The harness page (harness.html / harness.js) loads surgeon_widgets/static/explorer.js and exposes
`window.harness` (mount, unmount, inject a custom message with DataView buffers, listener counts).
"""

from __future__ import annotations

import math
import os
import time

from surgeon_widgets.widget.runtime.ownership import REPLACED


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


def test_update_interval_and_sampled_histogram_are_shown(harness):
    page = harness
    mount(page, rows=ROWS, selected=["layer2"])
    inject = "([c, a]) => window.harness.inject(c, a)"
    counts = [{"dtype": "float32", "values": COUNTS}]
    page.evaluate(inject, [{"type": "stats", "items": [item(step=1)]}, counts])
    title, sampled = '[data-layer="layer2"] .sw-leaf-title', '[data-layer="layer2"] .sw-sampled'
    assert page.inner_text(title) == "output · activation · step 1"  # no interval known yet
    assert not page.is_visible(sampled)  # an exact histogram says nothing
    later = item(step=9) | {"every": 2.6, "sampled": 65536}
    page.evaluate(inject, [{"type": "stats", "items": [later]}, counts])
    assert page.inner_text(title) == "output · activation · step 9 · every 2.6 s"
    assert page.inner_text(sampled) == "histogram of 65,536 samples"


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


def test_error_list_clear_button_and_mode(harness, tmp_path):
    page = harness
    entry = {"text": "layer2: the activation statistics failed (RuntimeError: boom); the model "
             "ran on unharmed. Deselect layer2 to stop retrying, or report it with the detail.",
             "layer": "layer2", "count": 7, "detail": "RuntimeError: boom\n  torch detail",
             "key": "k"}  # fmt: skip
    mount(page, rows=ROWS, selected=["layer2"], errors=[entry], notes=[])
    page.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [{"type": "stats", "items": [{**item(step=4), "training": False}]},
         [{"dtype": "float32", "values": COUNTS}]],
    )  # fmt: skip
    errors = page.locator(".sw-errors li")
    assert errors.count() == 1 and "×7" in errors.inner_text()
    assert "Deselect layer2" in errors.inner_text()
    assert page.locator(".sw-replaced").is_hidden()
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
    assert page.inner_text(f"{panel} .sw-step-first") == "1"
    assert page.inner_text(f"{panel} .sw-step-title") == "step"
    assert page.inner_text(f"{panel} .sw-step-last") == "5"
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
    assert [" ".join(c.split()) for c in captions] == ["mean 0.5", "std 1", "L2 norm 5"]
    assert (
        " ".join(page.inner_text(f'{curves} [data-stat="l2"] .sw-curve-range').split()) == "1 … 5"
    )
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
    mount(page, rows=ROWS, selected=["head"], run={"layers": ["head"]})  # RunView.close()
    page.evaluate("() => window.harness.model().set('closed', true)")
    assert page.inner_text(".sw-closed") == "Run view closed"


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


def inject(page, items):
    page.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [{"type": "stats", "items": items}, [{"dtype": "float32", "values": [0.0] * 64}]],
    )


def test_nonfinite_line_tree_mark_and_all_nan_histogram(harness, tmp_path):
    page = harness
    mlp, head = "encoder.layers.0.mlp", "head"
    mount(page, rows=ROWS, selected=[mlp, head])
    page.click('[data-name="encoder.layers.0"] .sw-twisty')  # mlp's row in view
    assert not visible(page, ".sw-nonfinite-line")
    assert page.locator(".sw-nonfinite-mark").count() == 0
    nan = {"mean": None, "std": None, "min": None, "max": None, "nans": 2, "lo": 0.0, "hi": 0.0}
    inject(page, [item(step=7, layer=mlp) | nan, item(step=7, layer=head) | {"infs": 1}])
    # Python's Explorer.nonfinite: the first bad record of each key, oldest first
    page.evaluate("""() => window.harness.model().set('nonfinite', [
        ['encoder.layers.0.mlp', 'encoder.layers.0.mlp/output', 7, 2, 0],
        ['head', 'head/output', 7, 0, 1]])""")
    line = page.inner_text(".sw-nonfinite-line")
    assert line == (
        "Non-finite values first in encoder.layers.0.mlp (output) at step 7: "
        "2 NaN (then 1 more key)"
    )
    mark = page.locator(f'[data-name="{mlp}"] .sw-nonfinite-mark')
    assert mark.inner_text() == "NaN" and "first at step 7" in mark.get_attribute("title")
    assert page.locator('[data-name="head"] .sw-nonfinite-mark').inner_text() == "Inf"
    assert "non-finite from step 7" in page.get_attribute(f'[data-name="{mlp}"]', "aria-label")
    assert page.locator('[data-name="encoder"] .sw-nonfinite-mark').count() == 0
    # the all-NaN record says so; its range is empty, not "0 ... 0"
    panel = f'[data-layer="{mlp}"]'
    assert page.inner_text(f"{panel} .sw-hist-empty") == "all values NaN"
    assert page.inner_text(f"{panel} .sw-lo") == "" and page.inner_text(f"{panel} .sw-hi") == ""
    assert not visible(page, f'[data-layer="{head}"] .sw-hist-empty')  # some values finite
    assert page.inner_text(f'[data-layer="{head}"] .sw-lo') == "-1"
    page.screenshot(path=str(tmp_path / "nonfinite_light.png"), full_page=True)
    page.evaluate("() => document.body.setAttribute('data-jp-theme-light', 'false')")
    page.screenshot(path=str(tmp_path / "nonfinite_dark.png"), full_page=True)
    page.evaluate("() => window.harness.model().set('nonfinite', [])")  # a new Explorer's
    assert not visible(page, ".sw-nonfinite-line")
    assert page.locator(".sw-nonfinite-mark").count() == 0


def test_parameter_boxes_notes_hidden_weights_meta_reason_and_unmeasured_curves(harness, tmp_path):
    page = harness
    mlp, block = "encoder.layers.0.mlp", "encoder.layers.0"
    where = ("no weights of its own or its children's: select 'encoder.layers.0.attn' in the tree, "
             "then tick 'parameters' in its panel")
    mount(page, rows=ROWS, selected=[block, mlp], param_layers=[mlp],
          param_notes={block: where})  # fmt: skip
    box = page.locator(f'[data-layer="{block}"] input.sw-params')
    assert box.is_disabled() and not box.is_checked()
    assert page.inner_text(f'[data-layer="{block}"] .sw-param-note') == where
    assert page.locator(f'[data-layer="{mlp}"] input.sw-params').is_enabled()
    assert not visible(page, f'[data-layer="{mlp}"] .sw-param-note')
    weight = item(leaf="weight", kind="weight", layer=mlp) | {"key": f"{mlp}/weight"}
    inject(page, [item(layer=mlp) | {"l2": 3.0}, weight])  # the weight item has no L2
    blocks = f'[data-layer="{mlp}"] .sw-leaf'
    assert page.locator(blocks).count() == 2 and page.locator(blocks).nth(1).is_visible()
    page.locator(f'[data-layer="{mlp}"] input.sw-params').uncheck()  # Python stops sending
    assert model(page, "param_layers") == []
    assert not page.locator(blocks).nth(1).is_visible()  # the old weights are not shown
    assert page.locator(blocks).nth(0).is_visible()
    page.locator(f'[data-layer="{mlp}"] input.sw-params').check()
    weights = page.locator(blocks).nth(1)
    assert weights.is_visible()
    # a statistic never measured shows no chart; one measured keeps it
    assert not weights.locator('[data-stat="l2"]').is_visible()
    assert weights.locator('[data-stat="mean"]').is_visible()
    assert page.locator(blocks).nth(0).locator('[data-stat="l2"]').is_visible()
    # a meta forward: the panel says why nothing will come instead of waiting
    waiting = f'[data-layer="{block}"] .sw-waiting'
    assert page.inner_text(waiting).startswith("Waiting for a forward pass")
    reason = f"{block} ran on the meta device: meta tensors have no values"
    page.evaluate("(r) => window.harness.model().set('no_values', {'encoder.layers.0': r})", reason)
    assert page.inner_text(waiting) == reason
    page.screenshot(path=str(tmp_path / "parameters_light.png"), full_page=True)


COLUMN_INK = """([label, x]) => {
    const c = document.querySelector(`canvas[aria-label="${label}"]`);
    const data = c.getContext('2d').getImageData(x, 0, 1, c.height).data;
    let n = 0;
    for (let y = 0; y < c.height; y++) n += data[y * 4 + 3] > 0;
    return n;
}"""


def test_a_pinned_step_is_outlined_over_the_latest_histogram(harness):
    page = harness
    mount(page, rows=ROWS, selected=["head"])
    left = [float(32 - i) for i in range(32)] + [0.0] * 32  # step 1: mass on the left half
    for step, counts in [(1, left), (2, COUNTS), (3, COUNTS), (4, COUNTS), (5, COUNTS)]:
        page.evaluate(
            "([c, a]) => window.harness.inject(c, a)",
            [{"type": "stats", "items": [item(step=step, layer="head")]},
             [{"dtype": "float32", "values": counts}]],
        )  # fmt: skip
    hist, heat = "Histogram of head output", "History of head output"
    legend = '[data-layer="head"] .sw-pin'
    assert not page.is_visible(legend)
    assert page.evaluate(COLUMN_INK, [hist, 20]) == 0  # the latest step has no value there
    page.locator(f'canvas[aria-label="{heat}"]').click(position={"x": 100, "y": 4})  # step 1
    assert page.is_visible(legend)
    text = page.inner_text(legend)
    assert "step 5: bars" in text and "step 1: outline" in text
    assert page.evaluate(COLUMN_INK, [hist, 20]) > 0  # the outline of step 1 is drawn
    assert page.evaluate(PIXEL, [heat, 255, 3])[3] > 128  # the pinned row is framed
    page.keyboard.press("Escape")
    assert not page.is_visible(legend) and page.evaluate(COLUMN_INK, [hist, 20]) == 0
    assert page.evaluate(PIXEL, [heat, 255, 3])[3] == 0  # step 1 has no value on the right
    page.locator(f'canvas[aria-label="{heat}"]').click(position={"x": 100, "y": 12})  # step 2
    assert "step 2: outline" in page.inner_text(legend)
    page.locator(f'canvas[aria-label="{heat}"]').click(position={"x": 100, "y": 12})
    assert not page.is_visible(legend)  # a second click unpins


def test_a_replaced_view_is_read_only_and_says_so(harness):
    page = harness
    mount(page, rows=ROWS, selected=["head"], show_nodes=True, node_in={}, node_out={},
          param_layers=[])  # fmt: skip
    assert page.locator(".sw-read-only-note").is_hidden()
    assert page.locator(".sw-gradients").is_enabled()
    page.evaluate("(r) => window.harness.model().set('replaced', r)", REPLACED)  # Python's claim
    note = page.locator(".sw-read-only-note")
    assert note.is_visible() and note.inner_text() == f"Read-only. {REPLACED}"
    waiting = page.inner_text('[data-layer="head"] .sw-waiting')
    assert waiting == "Nothing recorded for head: this Explorer is read-only."
    saved = page.evaluate("() => window.harness.model().saved")
    page.click('[data-name="encoder"]')  # a real click on a row: no selection
    page.click('[data-name="relu"] .sw-name')
    page.keyboard.press("o")  # nor a cut mark from the keyboard
    page.keyboard.press("Enter")
    for control in (".sw-gradients", '[data-layer="head"] input.sw-params', ".sw-rate",
                    '[data-name="relu"] .sw-mark-in', ".sw-remove-hooks"):  # fmt: skip
        assert page.locator(control).is_disabled(), control
    page.locator(".sw-gradients").click(force=True)
    page.locator('[data-name="relu"] .sw-mark-in').click(force=True)
    assert model(page, "selected") == ["head"] and model(page, "gradients") is False
    assert model(page, "node_in") == {} and model(page, "node_out") == {}
    assert model(page, "param_layers") == []
    assert sent(page) == [{"type": "hello"}]  # no button message either
    assert page.evaluate("() => window.harness.model().saved") == saved


CUT_OFF = """(panel) => [...document.querySelectorAll(`${panel} :is(.sw-curve-last, .sw-curve-lo,
    .sw-curve-hi, .sw-lo, .sw-hi, .sw-step-first, .sw-step-last, .sw-count-max, .sw-stat)`)]
    .filter((el) => el.textContent).filter((el) => {
        const box = el.parentElement.getBoundingClientRect();
        const rects = [...el.getClientRects()];
        const inside = rects.every((r) => r.left >= box.left - 0.5 && r.right <= box.right + 0.5);
        return rects.length !== 1 || !inside;  // wrapped over two lines, or past its box
    }).map((el) => el.className + ' ' + el.textContent)"""


def test_numbers_show_whole_with_the_full_value_on_hover(harness):
    page = harness
    mount(page, rows=ROWS, selected=["head"])
    values = {"mean": -3.1749e-5, "std": 1.23456e-9, "l2": 7.4512e-8, "min": -0.0021937,
              "max": 123456.7, "lo": 0.123401, "hi": 0.123449}  # fmt: skip
    for step, scale in ((2157, 1.0), (2429, 1.01)):
        it = item(step=step, layer="head") | {k: v * scale for k, v in values.items()}
        page.evaluate(
            "([c, a]) => window.harness.inject(c, a)",
            [{"type": "stats", "items": [it]}, [{"dtype": "float32", "values": COUNTS}]],
        )
    panel = '[data-layer="head"]'
    assert page.evaluate(CUT_OFF, panel) == []
    captions = page.locator(f"{panel} figcaption").all_inner_texts()
    assert [" ".join(c.split()) for c in captions] == [
        "mean -3.21e-5", "std 1.25e-9", "L2 norm 7.53e-8"]  # fmt: skip
    last_l2 = page.locator(f'{panel} [data-stat="l2"] .sw-curve-last')
    assert float(last_l2.get_attribute("title")) == 7.4512e-8 * 1.01
    assert page.inner_text(f"{panel} .sw-step-first") == "2157"
    assert page.inner_text(f"{panel} .sw-step-last") == "2429"
    # the value range keeps the digits that tell its ends apart, the full values on hover
    lo, hi = page.inner_text(f"{panel} .sw-lo"), page.inner_text(f"{panel} .sw-hi")
    assert (lo, hi) == ("0.1246", "0.1247")  # 3 digits would read 0.125 twice
    assert float(page.get_attribute(f"{panel} .sw-lo", "title")) == 0.123401 * 1.01
    stats = page.locator(f"{panel} .sw-stats .sw-stat")
    assert stats.nth(0).inner_text() == "-3.21e-5"
    assert float(stats.nth(0).get_attribute("title")) == -3.1749e-5 * 1.01
    assert stats.nth(3).inner_text() == "1.25e5"


PANELS_STYLE = """() => { const s = getComputedStyle(document.querySelector('.sw-panels'));
    return [s.maxHeight, s.resize]; }"""


def test_panels_take_the_window_height_and_resize_and_the_tree_shows_the_latest_shape(harness):
    page = harness
    latest = {
        "shape": [8, 11],
        "dtype": "float32",
        "example": {"shape": [1, 11], "dtype": "float32"},
    }
    mount(page, rows=ROWS, selected=["head", "encoder.layers.0.mlp"], shapes={"head": latest})
    assert page.evaluate(PANELS_STYLE) == ["640px", "vertical"]  # an 800 px window
    page.set_viewport_size({"width": 1000, "height": 1400})
    assert page.evaluate(PANELS_STYLE) == ["1240px", "vertical"]
    # the user drags the box's corner down: it grows
    box = page.locator(".sw-panels").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] + 200, steps=5)
    page.mouse.up()
    assert page.locator(".sw-panels").bounding_box()["height"] > box["height"] + 150
    shape = page.locator('[data-name="head"] .sw-shape')
    assert shape.inner_text() == "[8, 11] float32"
    assert shape.get_attribute("title") == (
        "latest output [8, 11] float32; on the example inputs [1, 11] float32"
    )
