"""The attention heatmap in headless Chromium: colours, hover read-out, selectors, 4,096 tokens.

`attention_harness.html` loads js/src/heatmap/ unbundled with a fake model
(`window.attention`); the last tests run the built bundle through `harness.html`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from surgeon_widgets.widget.wire import attention_message

LAYER = "enc.attn"
TOKENS = ["The", "cat", "sat", "down"]
MAP = "section[data-attention='enc.attn'] canvas.sw-att-map"


@pytest.fixture
def att(browser, static_server):
    context = browser.new_context(viewport={"width": 1000, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{static_server}/tests/browser/attention_harness.html")
    page.wait_for_function("() => window.attention !== undefined")
    page.evaluate("(s) => window.attention.mount(s)", [LAYER])
    yield page
    context.close()
    assert errors == [], f"browser errors: {errors}"


def small_items(values_by_head, exact=None, hi=0.8, tokens=True, batches=1, batch=0):
    """4x4 maps: head "mean" then 0.. with the given uint8 values (row-major)."""
    items = []
    for i, (head, values) in enumerate(values_by_head.items()):
        item = {
            "layer": LAYER, "head": head, "batch": batch, "batches": batches,
            "heads": len(values_by_head) - 1, "step": 3, "shape": [4, 4], "full_shape": [4, 4],
            "lo": 0.0, "hi": hi, "dtype": "uint8", "values": values,
        }  # fmt: skip
        if exact is not None:
            item["exactValues"] = exact[i]
        if head == "mean" and tokens:
            item["tokens_q"] = TOKENS
            item["tokens_k"] = TOKENS
        items.append(item)
    return items


def pixel(page, selector, x, y):
    return page.evaluate(
        """([s, x, y]) => Array.from(document.querySelector(s).getContext('2d')
            .getImageData(x, y, 1, 1).data)""",
        [selector, x, y],
    )


def hover_cell(page, row, col, rows=4, cols=4):
    heatmap = page.locator(MAP)
    box = heatmap.bounding_box()
    heatmap.hover(
        position={"x": (col + 0.5) * box["width"] / cols, "y": (row + 0.5) * box["height"] / rows}
    )
    return page.locator(f"section[data-attention='{LAYER}'] .sw-att-readout").inner_text()


def test_heatmap_pixels_follow_the_shared_colormap(att):
    mean = [(17 * i) % 256 for i in range(16)]
    head0 = [255 - v for v in mean]
    items = small_items({"mean": mean, 0: head0})
    att.evaluate(
        "(items) => window.attention.inject(items)", [{**i, "range": [0, 1]} for i in items]
    )
    lut = att.evaluate("() => window.attention.COLORMAP")
    import matplotlib

    viridis = matplotlib.colormaps["viridis"]
    for v in (0, 128, 255):  # the JS table is matplotlib's viridis
        expected = [round(c * 255) for c in viridis(v)[:3]]
        assert lut[3 * v : 3 * v + 3] == expected
    for row, col in [(0, 0), (1, 2), (3, 3)]:
        v = round(mean[row * 4 + col] * 0.8)  # the range sent is 0-1: weight v / 255 * 0.8
        assert pixel(att, MAP, col, row) == [*lut[3 * v : 3 * v + 3], 255]
    box = att.locator(MAP).bounding_box()
    assert round(box["width"]) == 256 and round(box["height"]) == 256
    label = att.locator(MAP).get_attribute("aria-label")
    assert label == "Attention of enc.attn mean of heads batch 0"


def test_hover_shows_query_key_and_exact_weight(att):
    exact_mean = [i / 100 for i in range(16)]
    exact_head = [0.5] * 16
    items = small_items({"mean": [0] * 16, 0: [255] * 16}, exact=[exact_mean, exact_head])
    att.evaluate("(items) => window.attention.inject(items)", items)
    text = hover_cell(att, 2, 1)  # query "sat" (2), key "cat" (1): weight 0.09
    assert text == 'query "sat" #2 · key "cat" #1 · weight 0.0900'
    assert hover_cell(att, 0, 3) == 'query "The" #0 · key "down" #3 · weight 0.0300'


def test_hover_decodes_uint8_weight_without_exact_values(att):
    values = [51] * 16  # 51 / 255 * 0.5 = 0.1
    att.evaluate(
        "(items) => window.attention.inject(items)",
        small_items({"mean": values, 0: values}, hi=0.5, tokens=False),
    )
    assert hover_cell(att, 1, 1) == "query #1 · key #1 · weight ≈ 0.1000"


def test_head_selector_thumbnails_and_batch_selector(att):
    mean, head0, head1 = [10] * 16, [100] * 16, [200] * 16
    items = small_items({"mean": mean, 0: head0, 1: head1}, batches=3)
    att.evaluate("(items) => window.attention.inject(items)", [{**i, "hi": 1.0} for i in items])
    lut = att.evaluate("() => window.attention.COLORMAP")  # the layer's range: 10/255 .. 200/255
    heads = att.locator("select.sw-att-head option").all_inner_texts()
    assert heads == ["mean of heads", "head 0", "head 1"]
    att.select_option("select.sw-att-head", "1")
    assert pixel(att, MAP, 0, 0) == [*lut[765:768], 255]  # head 1 is the layer's top
    thumbs = att.locator(".sw-att-thumb")
    assert thumbs.count() == 3
    att.get_by_role("radio", name="model").check()  # the thumbnails: the model view
    att.get_by_role("button", name="Open enc.attn head 0").click()
    assert att.get_by_role("radio", name="map").is_checked()  # a click opens that map
    assert att.locator("select.sw-att-head").input_value() == "0"
    v = int(np.floor((100 - 10) / (200 - 10) * 255 + 0.5))
    assert pixel(att, MAP, 2, 2) == [*lut[3 * v : 3 * v + 3], 255]
    assert (
        att.locator(f"button[data-layer='{LAYER}'][data-head='0']").get_attribute("aria-pressed")
        == "true"
    )
    att.select_option("select.sw-att-batch", "2")
    assert att.evaluate("() => window.attention.sent()") == [
        {"type": "attention_batch", "layer": LAYER, "batch": 2}
    ]
    assert att.evaluate("() => window.attention.unmount()") == 0


def test_4096_tokens_arrive_pooled_to_256_and_hover_reads_the_pooled_weight(att):
    torch.manual_seed(0)
    n = 4096
    scores = torch.randn(1, 1, n, n)
    pattern = torch.softmax(scores.tril() + torch.triu(torch.full((n, n), -1e9), 1), -1)
    content, buffers = attention_message(LAYER, pattern, tokens=[[f"t{i}" for i in range(n)]])
    assert sum(len(b) for b in buffers) == 2 * 256 * 256  # mean + 1 head, uint8
    items = []
    for item in content["items"]:
        assert item["shape"] == [256, 256] and item["full_shape"] == [n, n]
        values = list(buffers[item["buffer"]])
        items.append({**{k: v for k, v in item.items() if k != "buffer"}, "values": values})
    att.evaluate("(items) => window.attention.inject(items)", items)
    assert att.evaluate(f'() => document.querySelector("{MAP}").width') == 256
    row, col = 200, 100  # queries 3200..3215, keys 1600..1615
    text = hover_cell(att, row, col, 256, 256)
    hi, v = items[0]["hi"], items[0]["values"][row * 256 + col]
    assert text.startswith('query #3200–3215 "t3200"…"t3215" (16 tokens) · key #1600–1615')
    shown = float(text.rsplit("weight mean ≈ ", 1)[1])  # 3 significant digits
    assert shown == pytest.approx(v / 255 * hi, rel=5e-3)
    pooled = pattern[0, 0, 3200:3216, 1600:1616].mean().item()
    assert abs(v / 255 * hi - pooled) <= hi / 255


# --- the built bundle (harness.html, fake anywidget model) ----------------------------------


def test_bundle_mounts_heatmap_for_selected_attention_layer(harness):
    harness.locator("#host").bounding_box()  # Playwright's injected script adds its listeners
    harness.mouse.move(1, 1)
    before = harness.evaluate("() => window.harness.liveListeners()")
    harness.evaluate("(s) => window.harness.mount(s)", {"selected": [LAYER]})
    values = [[(13 * i) % 256 for i in range(16)], [200] * 16]
    exact = [[i / 64 for i in range(16)], [0.25] * 16]
    buffers = [{"dtype": "uint8", "values": v} for v in values] + [
        {"dtype": "float32", "values": e} for e in exact
    ]
    items = [
        {"layer": LAYER, "head": head, "batch": 0, "batches": 2, "heads": 1, "step": 1,
         "shape": [4, 4], "full_shape": [4, 4], "lo": 0.0, "hi": 0.5, "dtype": "uint8",
         "buffer": i, "exact": {"buffer": 2 + i, "dtype": "float32", "shape": [4, 4]}}
        for i, head in enumerate(["mean", 0])
    ]  # fmt: skip
    items[0] |= {"tokens_q": TOKENS, "tokens_k": TOKENS}
    other = {**items[1], "layer": "not.selected"}
    harness.evaluate(
        "([c, a]) => window.harness.inject(c, a)",
        [{"type": "attention", "items": [*items, other]}, buffers],
    )
    assert harness.locator("section[data-attention]").count() == 1  # only selected layers
    lut = harness.evaluate("async () => Array.from((await import('/js/src/colormap.js')).COLORMAP)")
    v = int(
        np.floor(exact[0][1 * 4 + 2] / 0.25 * 255 + 0.5)
    )  # no range sent: the maps' own, 0-0.25
    assert pixel(harness, MAP, 2, 1) == [*lut[3 * v : 3 * v + 3], 255]
    assert hover_cell(harness, 1, 2) == 'query "cat" #1 · key "sat" #2 · weight 0.0938'
    harness.select_option("select.sw-att-batch", "1")
    assert {"type": "attention_batch", "layer": LAYER, "batch": 1} in harness.evaluate(
        "() => window.harness.model().sent"
    )
    harness.evaluate("() => { const m = window.harness.model(); m.set('selected', []); }")
    assert harness.locator("section[data-attention]").count() == 0
    assert harness.evaluate("() => window.harness.unmount()") is True
    assert harness.evaluate("() => window.harness.liveListeners()") == before


def test_arrow_keys_move_the_read_out(att):
    exact = [[i / 100 for i in range(16)], [0.0] * 16]
    items = small_items({"mean": [0] * 16, 0: [0] * 16}, exact=exact)
    att.evaluate("(items) => window.attention.inject(items)", items)
    att.locator(MAP).focus()
    readout = att.locator(f"section[data-attention='{LAYER}'] .sw-att-readout")
    att.keyboard.press("ArrowDown")  # first key shows cell (0, 0)
    assert readout.inner_text() == 'query "The" #0 · key "The" #0 · weight 0'
    att.keyboard.press("ArrowDown")
    att.keyboard.press("ArrowRight")
    assert readout.inner_text() == 'query "cat" #1 · key "cat" #1 · weight 0.0500'


def legend(page):
    box = f"section[data-attention='{LAYER}'] .sw-att-legend"
    return (
        page.locator(f"{box} .sw-att-legend-lo").inner_text(),
        page.locator(f"{box} .sw-att-legend-hi").inner_text(),
    )


def message_items(content, buffers):
    """An ``attention`` message's items with their buffers as lists (the harness's inject())."""
    items = []
    for it in content["items"]:
        one = {k: v for k, v in it.items() if k not in ("buffer", "exact")}
        one["values"] = list(buffers[it["buffer"]])
        if "exact" in it:
            one["exactValues"] = np.frombuffer(buffers[it["exact"]["buffer"]], np.float32).tolist()
        items.append(one)
    return items


def canvas_rgb(page, selector):
    """``uint8 [rows, cols, 3]`` of a map canvas (one pixel per cell)."""
    w, h, data = page.evaluate(
        """(s) => { const c = document.querySelector(s);
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            return [c.width, c.height, Array.from(d)]; }""",
        selector,
    )
    return np.array(data, np.uint8).reshape(h, w, 4)[..., :3]


def near_uniform(n=12, heads=3, seed=0):
    """Softmax of small scores: weights about 0.075-0.1 around 1/12, as early in training."""
    torch.manual_seed(seed)
    return torch.softmax(torch.randn(1, heads, n, n) * 0.05, -1)


def peaked(n=12, heads=3, seed=1):
    torch.manual_seed(seed)
    return torch.softmax(torch.randn(1, heads, n, n) * 4, -1)


@pytest.mark.parametrize("kind", ["near_uniform", "peaked"])
def test_js_and_python_give_the_same_colours_for_the_same_data(att, kind):
    from surgeon_widgets.widget.views.attention_colors import attention_range, colours
    from surgeon_widgets.widget.views.attention_figure import attention_figure

    pattern = near_uniform() if kind == "near_uniform" else peaked()
    content, buffers = attention_message(LAYER, pattern)
    att.evaluate("(items) => window.attention.inject(items)", message_items(content, buffers))
    for fixed in (False, True):
        if fixed:
            att.locator("input.sw-att-fixed").check()
        lo, hi = attention_range(pattern[0], "fixed" if fixed else "range")
        for head in [None, 0, 2]:
            att.select_option("select.sw-att-head", "mean" if head is None else str(head))
            shown = canvas_rgb(att, MAP)
            data = pattern[0].mean(0) if head is None else pattern[0, head]
            assert (shown == colours(data, lo, hi)).all()  # the rule, in Python
            fig = attention_figure(pattern, LAYER, head, scale="fixed" if fixed else "range")
            image = fig.axes[0].images[0]
            assert (image.to_rgba(image.get_array(), bytes=True)[..., :3] == shown).all()
            key = "mean" if head is None else head
            thumb = f"button[data-layer='{LAYER}'][data-head='{key}'] canvas"
            assert (canvas_rgb(att, thumb) == shown).all()  # the model view's thumbnail


def test_near_uniform_maps_get_distinct_colours_and_the_legend_shows_their_range(att):
    pattern = near_uniform()
    lo, hi = float(pattern.min()), float(pattern.max())
    assert 0.07 < lo < 1 / 12 < hi < 0.105  # the case of the issue (0.075-0.09)
    content, buffers = attention_message(LAYER, pattern)
    att.evaluate("(items) => window.attention.inject(items)", message_items(content, buffers))
    lut = np.array(att.evaluate("() => window.attention.COLORMAP"), np.uint8).reshape(256, 3)
    index = {tuple(c): i for i, c in enumerate(lut)}
    used = [index[tuple(c)] for c in canvas_rgb(att, MAP).reshape(-1, 3)]
    assert max(used) - min(used) > 100 and len(set(used)) > 20  # the mean alone spans the scale
    box = f"section[data-attention='{LAYER}'] .sw-att-legend"
    lo_text, hi_text = legend(att)
    assert float(lo_text) == pytest.approx(lo, rel=0.01) and float(hi_text) == pytest.approx(
        hi, rel=0.01
    )
    assert att.locator(f"{box} .sw-att-legend-note").inner_text() == "this layer's range"
    assert att.locator(box).get_attribute("data-scale") == "range"
    att.locator("input.sw-att-fixed").check()  # the fixed scale, one switch away: all dark
    used = {index[tuple(c)] for c in canvas_rgb(att, MAP).reshape(-1, 3)}
    assert max(used) <= 24 and legend(att) == ("0", "1")
    assert att.locator(f"{box} .sw-att-legend-note").inner_text() == "fixed 0–1 scale"
    att.locator("input.sw-att-fixed").uncheck()
    assert float(legend(att)[1]) == pytest.approx(hi, rel=0.01)


def test_a_flat_layer_sits_mid_scale_and_says_so(att):
    pattern = torch.full((1, 2, 16, 16), 1 / 16)
    content, buffers = attention_message(LAYER, pattern)
    att.evaluate("(items) => window.attention.inject(items)", message_items(content, buffers))
    lut = att.evaluate("() => window.attention.COLORMAP")
    assert pixel(att, MAP, 7, 9) == [*lut[3 * 128 : 3 * 128 + 3], 255]
    assert legend(att) == ("0.0625", "0.0625")
    box = f"section[data-attention='{LAYER}'] .sw-att-legend"
    assert att.locator(f"{box} .sw-att-legend-note").inner_text() == "all weights equal"


def test_hovered_cell_is_outlined_and_a_query_label_highlights_its_row(att):
    exact = [[0.1, 0.2, 0.3, 0.4, 0.7, 0.1, 0.1, 0.1, 0.25] + [0.25] * 7, [0.0] * 16]
    items = small_items({"mean": [0] * 16, 0: [0] * 16}, exact=exact)
    att.evaluate("(items) => window.attention.inject(items)", items)
    section = f"section[data-attention='{LAYER}']"
    assert att.locator(f"{section} .sw-att-axis-q").inner_text() == "query →"
    assert att.locator(f"{section} .sw-att-axis-k").inner_text() == "key →"
    hover_cell(att, 2, 1)
    cursor = att.locator(f"{section} .sw-att-cursor")
    box, cell = att.locator(MAP).bounding_box(), cursor.bounding_box()
    assert cursor.is_visible()
    assert (round(cell["x"] - box["x"]), round(cell["y"] - box["y"])) == (64, 128)
    assert (round(cell["width"]), round(cell["height"])) == (64, 64)
    labels = att.locator(f"{section} canvas.sw-att-qlabels")
    lbox = labels.bounding_box()
    labels.hover(position={"x": lbox["width"] - 10, "y": 1.5 * lbox["height"] / 4})  # "cat"
    readout = att.locator(f"{section} .sw-att-readout").inner_text()
    assert (
        readout
        == 'query "cat" #1 attends most to "The" #0 0.7000, "cat" #1 0.1000, "sat" #2 0.1000'
    )
    row = att.locator(f"{section} .sw-att-rowmark").bounding_box()
    assert (round(row["y"] - box["y"]), round(row["height"]), round(row["width"])) == (64, 64, 256)
    assert not cursor.is_visible()  # the pointer left the map
    att.mouse.move(0, 0)
    assert not att.locator(f"{section} .sw-att-rowmark").is_visible()


def test_title_says_train_or_eval_when_maps_carry_the_mode(att):
    title = f"section[data-attention='{LAYER}'] .sw-layer-title"
    att.evaluate("(items) => window.attention.inject(items)", small_items({"mean": [0] * 16}))
    assert att.locator(title).inner_text().endswith("· step 3")  # older items: no mode
    for training, word in ((True, "train"), (False, "eval")):
        items = [{**i, "training": training} for i in small_items({"mean": [0] * 16})]
        att.evaluate("(items) => window.attention.inject(items)", items)
        assert att.locator(title).inner_text().endswith(f"· step 3 · {word}")


GRID_LABELS = """() => [...document.querySelectorAll('.sw-att-grid-layer')].map((el) => {
    const box = el.getBoundingClientRect();
    const cut = el.scrollWidth > el.clientWidth + 0.5 || el.scrollHeight > el.clientHeight + 0.5;
    return [el.textContent, el.title, cut, box.width > 0];
})"""


def test_grid_row_labels_are_never_cut(att):
    layers = [f"model.encoder.layers.{i}.attention.self_attention_block.inner" for i in (0, 11)]
    assert att.evaluate("() => window.attention.unmount()") == 0
    att.evaluate("(s) => window.attention.mount(s)", layers)
    for layer in layers:
        items = [{**it, "layer": layer} for it in small_items({"mean": [9] * 16, 0: [99] * 16})]
        att.evaluate("(items) => window.attention.inject(items)", items)
    att.get_by_role("radio", name="model").check()
    labels = att.evaluate(GRID_LABELS)
    assert labels == [
        [f"{i}.attention.self_attention_block.inner", layer, False, True]
        for i, layer in zip((0, 11), layers)
    ]  # the shared prefix dropped, the rest whole (wrapped), the full name on hover


# --- the "attention view" control: map | lines | model --------------------------------------

SECTION = f"section[data-attention='{LAYER}']"
SVG = f"{SECTION} svg.sw-att-lines-svg"
SHOWN_LINES = """(s) => [...document.querySelectorAll(s + ' line')]
    .filter((l) => [l, l.parentElement].every((e) => getComputedStyle(e).display !== 'none'))
    .map((l) => [l.closest('g').dataset.head, Number(l.dataset.q), Number(l.dataset.k)])"""


def inject_pattern(page, pattern, layer=LAYER, tokens=TOKENS):
    content, buffers = attention_message(layer, pattern, tokens=[tokens] if tokens else None)
    page.evaluate("(items) => window.attention.inject(items)", message_items(content, buffers))


def test_one_control_named_attention_view_with_map_lines_and_model(att):
    inject_pattern(att, peaked(4, 3))
    group = att.get_by_role("radiogroup", name="attention view")
    assert group.count() == 1
    radios = group.get_by_role("radio")
    assert [radios.nth(i).evaluate("(r) => r.value") for i in range(3)] == ["map", "lines", "model"]
    assert [group.get_by_role("radio", name=n).count() for n in ("map", "lines", "model")] == [
        1
    ] * 3
    assert group.get_by_role("radio", name="map").is_checked()
    assert att.locator(MAP).is_visible() and not att.locator(".sw-att-grid").is_visible()
    group.get_by_role("radio", name="lines").check()
    assert att.locator(SVG).is_visible() and not att.locator(MAP).is_visible()
    group.get_by_role("radio", name="model").check()
    assert att.locator(".sw-att-grid").is_visible() and not att.locator(SECTION).is_visible()


def test_lines_view_one_group_per_head_swatches_toggle_hover_isolates(att):
    pattern = peaked(4, 3)
    inject_pattern(att, pattern)
    att.get_by_role("radio", name="lines").check()
    groups = att.locator(f"{SVG} g[data-head]")
    assert [groups.nth(i).get_attribute("data-head") for i in range(groups.count())] == [
        "0",
        "1",
        "2",
    ]
    colours = {groups.nth(i).get_attribute("stroke") for i in range(3)}
    assert len(colours) == 3  # each head its own colour
    tokens = att.evaluate(
        "(s) => [...document.querySelectorAll(s)].map((t) => t.firstChild.nodeValue)",
        f"{SVG} text[data-side='q']",
    )
    assert tokens == TOKENS and att.locator(f"{SVG} text[data-side='k']").count() == 4
    lines = att.evaluate(SHOWN_LINES, SVG)
    assert {h for h, _, _ in lines} == {"0", "1", "2"}
    # a line's opacity is its weight's place on the layer's range (the colour rule)
    from surgeon_widgets.widget.views.attention_colors import attention_range, position

    lo, hi = attention_range(pattern[0])
    line = att.locator(f"{SVG} g[data-head='1'] line[data-q='2'][data-k='1']")
    t = float(position(float(pattern[0, 1, 2, 1]), lo, hi))
    if t >= 0.02:
        assert float(line.get_attribute("stroke-opacity")) == pytest.approx(0.9 * t, abs=1e-3)
    swatch = att.locator(f"{SECTION} button.sw-att-swatch[data-head='1']")
    assert swatch.get_attribute("aria-pressed") == "true"
    swatch.click()  # hide head 1
    assert swatch.get_attribute("aria-pressed") == "false"
    assert {h for h, _, _ in att.evaluate(SHOWN_LINES, SVG)} == {"0", "2"}
    swatch.click()
    assert {h for h, _, _ in att.evaluate(SHOWN_LINES, SVG)} == {"0", "1", "2"}
    att.locator(f"{SVG} text[data-side='q'][data-index='2']").hover()  # query "sat"
    shown = att.evaluate(SHOWN_LINES, SVG)
    assert shown and {q for _, q, _ in shown} == {2}
    assert len(shown) == len([x for x in lines if x[1] == 2])  # all of its lines, no other
    readout = att.locator(f"{SECTION} .sw-att-readout").inner_text()
    assert readout.startswith('query "sat" #2 · strongest key per head: head 0: ')
    att.locator(f"{SVG} text[data-side='k'][data-index='0']").hover()  # key "The"
    shown = att.evaluate(SHOWN_LINES, SVG)
    assert shown and {k for _, _, k in shown} == {0}
    att.mouse.move(1, 1)  # leave: every line again
    assert len(att.evaluate(SHOWN_LINES, SVG)) == len(lines)
    att.locator(SVG).focus()  # the keyboard: down twice is query #1, right is key #1
    for key in ("ArrowDown", "ArrowDown", "ArrowRight"):
        att.keyboard.press(key)
    assert {k for _, _, k in att.evaluate(SHOWN_LINES, SVG)} == {1}
    att.keyboard.press("ArrowLeft")
    assert {q for _, q, _ in att.evaluate(SHOWN_LINES, SVG)} == {1}
    att.keyboard.press("Escape")
    assert len(att.evaluate(SHOWN_LINES, SVG)) == len(lines)


def test_lines_of_a_near_uniform_layer_are_visible_and_long_maps_point_to_the_map(att):
    inject_pattern(att, near_uniform(4, 2))
    att.get_by_role("radio", name="lines").check()
    opacities = [
        float(x)
        for x in att.evaluate(
            "(s) => [...document.querySelectorAll(s + ' line')].map((l) => "
            "l.getAttribute('stroke-opacity'))",
            SVG,
        )
    ]
    assert max(opacities) > 0.8  # the layer's range: its strongest line is bold
    inject_pattern(att, near_uniform(100, 2), tokens=None)
    note = att.locator(f"{SECTION} .sw-att-lines-note")
    assert note.inner_text().startswith("Lines need at most 64 tokens a side")
    assert att.locator(f"{SVG} line").count() == 0


def test_model_view_shows_every_layer_by_head_and_a_click_opens_that_map(att):
    layers = ["enc.0.attn", "enc.1.attn"]
    assert att.evaluate("() => window.attention.unmount()") == 0
    att.evaluate("(s) => window.attention.mount(s)", layers)
    for seed, layer in enumerate(layers):
        inject_pattern(att, peaked(4, 3, seed=seed), layer=layer)
    att.get_by_role("radio", name="model").check()
    rows = att.locator(".sw-att-grid-row")
    assert rows.count() == 2
    for layer in layers:
        heads = att.locator(f".sw-att-grid-row[data-layer='{layer}'] button[data-head]")
        assert [heads.nth(i).get_attribute("data-head") for i in range(4)] == [
            "mean",
            "0",
            "1",
            "2",
        ]
        assert all(heads.nth(i).is_visible() for i in range(4))  # all at once
    rng = att.locator(".sw-att-grid-row[data-layer='enc.1.attn'] .sw-att-grid-range").inner_text()
    assert "–" in rng  # each row says the range its thumbnails are coloured over
    att.get_by_role("button", name="Open enc.1.attn head 2").click()
    assert att.get_by_role("radio", name="map").is_checked()
    section = "section[data-attention='enc.1.attn']"
    assert att.locator(f"{section} select.sw-att-head").input_value() == "2"
    assert att.locator(f"{section} canvas.sw-att-map").get_attribute("data-head") == "2"
    assert att.locator(f"{section} canvas.sw-att-map").is_visible()


def test_lines_and_model_views_draw_from_the_snapshot_without_a_kernel(harness):
    """The built bundle with a saved ``snapshot`` and nothing answering ``hello`` (no kernel)."""
    from torch import nn

    from surgeon_widgets.engine.stats import tensor_stats
    from surgeon_widgets.widget.history import History, Record
    from surgeon_widgets.widget.live.attention import AttentionView
    from surgeon_widgets.widget.snapshot import snapshot_state
    from surgeon_widgets.widget.views.attention_colors import colours

    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(8, 2, batch_first=True).eval()
    view = AttentionView(model, lambda content, buffers: None)
    view.sync(["self_attn"])
    view.set_tokens([["The", "cat", "sat", "down", "."]])
    with torch.no_grad():
        out = model(torch.randn(1, 5, 8) * 3)
    history = History()
    history.add(Record("self_attn/output", "self_attn", "output", "activation", 7,
                       tensor_stats(out)))  # fmt: skip
    state = snapshot_state(history, ["self_attn"], view.maps())
    pattern = view.latest("self_attn")
    view.close()
    harness.evaluate(
        "(s) => window.harness.mount(s)", {"selected": ["self_attn"], "snapshot": state}
    )
    harness.locator(".sw-explorer.sw-snapshot").wait_for(timeout=10_000)
    section = "section[data-attention='self_attn']"
    heatmap = f"{section} canvas.sw-att-map"
    lo, hi = state["attention"]["items"][0]["range"]
    mean = state["attention"]["items"][0]
    assert mean["shape"] == [5, 5] and (lo, hi) == pytest.approx(
        (pattern[0].min().item(), pattern[0].max().item())
    )
    expected = colours(pattern[0].mean(0), lo, hi)  # the full-resolution rule, Python
    shown = canvas_rgb(harness, heatmap)
    assert np.abs(shown.astype(int) - expected.astype(int)).max() <= 8  # uint8 thumbnail
    group = harness.get_by_role("radiogroup", name="attention view")
    for name in ("map", "lines", "model"):
        assert group.get_by_role("radio", name=name).is_enabled()  # local: no kernel needed
    assert harness.locator(f"{section} select.sw-att-batch").is_disabled()
    group.get_by_role("radio", name="lines").check()
    svg = f"{section} svg.sw-att-lines-svg"
    assert harness.locator(f"{svg} g[data-head]").count() == 2  # one group per head
    assert harness.locator(f"{svg} text[data-side='k']").count() == 5
    harness.locator(f"{section} button.sw-att-swatch[data-head='0']").click()
    assert harness.evaluate(SHOWN_LINES, svg) and {
        h for h, _, _ in harness.evaluate(SHOWN_LINES, svg)
    } == {"1"}
    harness.locator(f"{svg} text[data-side='q'][data-index='1']").hover()
    assert {q for _, q, _ in harness.evaluate(SHOWN_LINES, svg)} == {1}
    group.get_by_role("radio", name="model").check()
    thumbs = harness.locator(".sw-att-grid-row[data-layer='self_attn'] button[data-head]")
    assert thumbs.count() == 3 and thumbs.nth(2).is_visible()
    harness.get_by_role("button", name="Open self_attn head 1").click()
    assert harness.locator(heatmap).get_attribute("data-head") == "1"
    assert harness.locator(heatmap).is_visible()
