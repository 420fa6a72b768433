"""The cut panel of the built bundle in headless Chromium, against the harness's fake model.

Marks nodes by clicking and with the i / o keys, renames an input, shows a leaky report and its
fix, highlights the code, and falls back to a clear message when no insertion path exists.
"""

from __future__ import annotations

NO_INSERT = "insertion is not available here (VS Code / Voila): use Copy"


def row(name, kind="module"):
    cls = "Linear" if kind == "module" else "add"
    return {"name": name, "parent": None, "depth": 0, "cls": cls, "kind": kind, "params": 3,
            "children": 0}  # fmt: skip


ROWS = [row("x", "node"), row("a"), row("b"), row("add", "node")]
LEAKY = {
    "node_in": ["a"], "node_out": ["add"], "inputs": ["x", "a"], "outputs": ["add"],
    "leaks": {"x": ["b"]}, "fix": ["b"], "params_kept": 18, "params_total": 36,
    "nodes_kept": 3, "nodes_total": 3, "method": "fx", "problems": [], "valid": True,
}  # fmt: skip
CODE = "from surgeon_widgets import Extract\n\ncut_model = Extract(model, node_in=['a'])"


def state(page, key):
    return page.evaluate("(k) => window.harness.model().get(k)", key)


def test_mark_rename_report_fix_code_and_insert_fallback(harness):
    page = harness
    counts = [exercise(page) for _ in range(2)]
    # Playwright's own injected listeners stay; a second render must not add to them
    assert counts[0] == counts[1]


def exercise(page) -> int:
    """Mount, drive every control, unmount; the live DOM listener count afterwards."""
    page.evaluate("(s) => window.harness.mount(s)", {"rows": ROWS, "show_nodes": True})
    assert page.locator(".sw-cut-hint").is_visible()

    # click the "in" button of row a, then the keyboard: focus row add, press o
    page.click('[data-name="a"] .sw-mark-in')
    assert state(page, "node_in") == {"a": "a"}
    assert page.get_attribute('[data-name="a"] .sw-mark-in', "aria-pressed") == "true"
    page.click('[data-name="add"] .sw-name')
    page.keyboard.press("o")
    assert state(page, "node_out") == {"add": "add"}
    assert state(page, "selected") == ["add"]  # the click also selected it; "o" did not
    page.keyboard.press("o")  # toggles back off
    assert state(page, "node_out") == {}
    page.click('[data-name="add"] .sw-mark-out')
    page.click('[data-name="add"] .sw-mark-in')  # moves add over to the inputs
    assert state(page, "node_in") == {"a": "a", "add": "add"} and state(page, "node_out") == {}
    page.click('[aria-label="Unmark input add"]')
    page.click('[data-name="add"] .sw-mark-out')

    # rename an input in its field
    page.fill('[aria-label="New name of input a"]', "h")
    page.press('[aria-label="New name of input a"]', "Enter")
    page.evaluate("() => document.activeElement.blur()")
    assert state(page, "node_in") == {"a": "h"}

    # until Python's report for these marks is in, it shows it is recomputing
    assert page.locator(".sw-cut-recomputing").is_visible()
    assert page.locator(".sw-cut-stale .sw-code[aria-busy='true']").count() == 1
    # Python answers with a leaky report and the code
    page.evaluate(
        "([r, c]) => { const m = window.harness.model(); m.set('cut_report', r); "
        "m.set('code', c); }",
        [LEAKY, CODE],
    )
    assert page.inner_text(".sw-cut-leak") == "⚠ original input x is still needed through b"
    assert "Keeps 18 of 36 parameters" in page.inner_text(".sw-cut-summary")
    assert page.locator(".sw-cut-recomputing").is_hidden()
    assert page.locator(".sw-cut-stale").count() == 0
    assert page.locator(".sw-cut-problems").is_hidden()
    page.click(".sw-cut-fix")
    assert {"type": "cut_apply_fix"} in page.evaluate("() => window.harness.model().sent")
    keywords = page.locator(".sw-code .sw-tok-keyword").all_inner_texts()
    assert keywords == ["from", "import"]
    assert page.locator(".sw-code").inner_text() == CODE

    # a bad cut: problems listed, no fix button
    page.evaluate(
        "(r) => window.harness.model().set('cut_report', r)",
        {**LEAKY, "leaks": {}, "fix": None, "valid": False, "problems": ["'a' is both"]},
    )
    assert page.inner_text(".sw-cut-problems") == "'a' is both"
    assert page.locator(".sw-cut-fix").is_hidden()
    assert page.locator(".sw-cut-note").count() == 0  # the trace has no note

    # a static-shape trace: its note is shown
    static = "traced with static shapes (a dynamic-shape trace took longer than 15 s)"
    page.evaluate("(r) => window.harness.model().set('cut_report', r)", {**LEAKY, "note": static})
    assert page.inner_text(".sw-cut-note") == f"Note: {static}"

    # no JupyterLab app in this page: ask the kernel, which says insertion cannot work here
    page.click(".sw-insert")
    sent = page.evaluate("() => window.harness.model().sent")
    assert {"type": "insert_cell", "code": CODE} in sent
    page.evaluate(
        "(m) => window.harness.model().emit('msg:custom', m, [])",
        {"type": "insert_result", "ok": False, "message": NO_INSERT},
    )
    assert page.inner_text(".sw-cut-status") == NO_INSERT
    page.click(".sw-copy")
    page.wait_for_function("() => document.querySelector('.sw-cut-status').textContent !== ''")
    assert page.evaluate("() => window.harness.unmount()") is True
    assert page.evaluate("() => window.harness.model().listenerCount()") == 0
    return page.evaluate("() => window.harness.liveListeners()")


IN, OUT = "encoder.layer.1.attention.output.LayerNorm", "encoder.layer.1.output.LayerNorm"
CUT_CODE = f"from surgeon_widgets import Extract\n\ncut_model = Extract(model, node_in={IN!r})"
BOTH = CUT_CODE.replace("Extract\n", "Extract, Inspect\n") + "\ninspected = Inspect(model, ['a'])"
RIGHT_EDGE = "(s) => document.querySelector(s).getBoundingClientRect().right"


def test_long_marks_keep_their_remove_buttons_and_insert_puts_in_the_code_shown(harness):
    page = harness
    rows = [row("input_ids", "node"), row(IN, "node"), row(OUT, "node"), row("a")]
    page.evaluate("(s) => window.harness.mount(s)", {
        "rows": rows, "show_nodes": True, "node_in": {IN: IN}, "node_out": {OUT: OUT},
    })  # fmt: skip
    report = {**LEAKY, "node_in": [IN], "node_out": [OUT], "inputs": ["input_ids", "h"],
              "leaks": {"input_ids": ["embeddings"]}, "code": BOTH}  # fmt: skip
    page.evaluate(
        "([r, c]) => { const m = window.harness.model(); m.set('cut_report', r); "
        "m.set('code', c); }",
        [report, BOTH],
    )
    assert page.inner_text(".sw-cut-valid") == "✓ valid, also reads original input input_ids"
    colors = page.evaluate("""() => ['.sw-cut-leak', '.sw-cut-problems'].map(
        (s) => getComputedStyle(document.querySelector(s)).color)""")
    assert colors[0] != colors[1]  # the leak line is not in the error colour
    for side, name in (("input", IN), ("output", OUT)):
        unmark = f'[aria-label="Unmark {side} {name}"]'
        assert page.evaluate(RIGHT_EDGE, unmark) <= page.evaluate(RIGHT_EDGE, ".sw-left")

    page.click(".sw-insert")  # no JupyterLab here: the kernel is asked, with the code shown
    sent = page.evaluate("() => window.harness.model().sent")
    assert {"type": "insert_cell", "code": BOTH} in sent
    assert page.inner_text(".sw-code") == BOTH  # the Inspect line shown is inserted too
    assert page.inner_text(".sw-cut-status") == "Inserting through the kernel…"
    page.evaluate(
        "(m) => window.harness.model().emit('msg:custom', m, [])",
        {"type": "insert_result", "ok": True, "message": "asked JupyterLab for a cell"},
    )
    assert page.inner_text(".sw-cut-status") == "asked JupyterLab for a cell"
    page.click('[aria-label="Unmark output ' + OUT + '"]')  # a real click reaches the button
    assert state(page, "node_out") == {}
    page.evaluate("(c) => window.harness.model().set('code', c)", CUT_CODE + "\n")  # new code
    assert page.inner_text(".sw-cut-status") == ""  # the last insert's message is gone
    page.click('[aria-label="Unmark input ' + IN + '"]')
    assert state(page, "node_in") == {}
