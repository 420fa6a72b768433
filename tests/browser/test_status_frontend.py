"""Issue 32 §4 in the built bundle, against the harness's fake model: the compile status in the
panels, the code box following a selection that waits for the kernel, and a view whose kernel
stopped (the model's ``comm_live_update``, as JupyterLab's widget manager fires on a restart).
"""

from __future__ import annotations

COMPILING = "the model is compiling: first record after it"
SET = "([k, v]) => window.harness.model().set(k, v)"


def row(name):
    return {"name": name, "parent": None, "depth": 0, "cls": "Linear", "kind": "module",
            "params": 3, "children": 0}  # fmt: skip


ROWS = [row("a"), row("b")]
KERNEL_CONTROLS = (".sw-gradients", ".sw-rate", ".sw-remove-hooks", ".sw-insert", "input.sw-params")


def code_box(page) -> str:
    return page.inner_text("pre.sw-code")


def test_compiling_replaces_the_waiting_line_and_the_empty_hooks_count(harness):
    page = harness
    page.evaluate("(s) => window.harness.mount(s)", {"rows": ROWS, "selected": ["a"]})
    waiting = '[data-layer="a"] .sw-waiting'
    assert page.inner_text(waiting) == "Waiting for a forward pass through a…"
    assert page.inner_text(".sw-hooks-title") == "Active hooks (0)"
    page.evaluate(SET, ["status", COMPILING])
    page.evaluate(SET, ["compiling", True])
    assert page.inner_text(waiting) == COMPILING
    assert page.inner_text(".sw-hooks .sw-status") == COMPILING
    assert page.inner_text(".sw-hooks-title") == "Active hooks: attached when the compile ends"
    page.evaluate(SET, ["hooks", [{"name": "a", "kind": "forward"}]])
    assert page.inner_text(".sw-hooks-title") == "Active hooks (1)"  # attached: counted
    page.evaluate(SET, ["status", ""])
    page.evaluate(SET, ["compiling", False])
    assert page.inner_text(waiting) == "Waiting for a forward pass through a…"
    assert not page.is_visible(".sw-hooks .sw-status")
    assert page.evaluate("() => window.harness.unmount()") is True
    assert page.evaluate("() => window.harness.model().listenerCount()") == 0


def test_the_code_box_shows_the_waiting_selections_code_until_pythons_code_comes(harness):
    page = harness
    page.evaluate("(s) => window.harness.mount(s)", {"rows": ROWS, "code": ""})
    assert code_box(page) == "# mark a cut or select layers to get code"
    page.click('[role="treeitem"][data-name="a"]')  # the view's selection; Python is busy
    assert page.evaluate("() => window.harness.model().get('selected')") == ["a"]
    emit = "(m) => window.harness.model().emit('msg:custom', m, [])"
    page.evaluate(emit, {"type": "code", "selected": ["a"], "code": "inspected = A"})
    assert code_box(page) == "inspected = A"
    assert page.is_enabled(".sw-copy")
    page.click('[role="treeitem"][data-name="b"]')  # another selection: not that code any more
    assert page.evaluate("() => window.harness.model().get('selected')") == ["b"]
    assert code_box(page) == "# mark a cut or select layers to get code"
    page.evaluate(emit, {"type": "code", "selected": ["b"], "code": "inspected = B"})
    assert code_box(page) == "inspected = B"
    page.evaluate("(c) => window.harness.model().set('code', c)", "inspected = Python's B")
    assert code_box(page) == "inspected = Python's B"  # Python's own code wins once it comes


def test_a_stopped_kernel_says_so_and_disables_the_kernel_controls(harness):
    page = harness
    page.evaluate("(s) => window.harness.mount(s)", {
        "rows": ROWS, "selected": ["a"], "code": "x", "status": COMPILING, "compiling": True,
    })  # fmt: skip
    assert page.is_enabled(".sw-gradients") and page.is_enabled(".sw-remove-hooks")
    assert page.is_visible(".sw-hooks .sw-status")
    page.evaluate("() => window.harness.model().emit('comm_live_update')")
    root = page.locator('.sw-explorer[data-kernel="stopped"]')
    assert root.get_attribute("data-kernel-signal") == "comm_live"
    assert page.inner_text(".sw-snapshot-note.sw-kernel-stopped") == "kernel stopped"
    for control in KERNEL_CONTROLS:
        assert page.is_disabled(control), control
    assert page.is_enabled(".sw-search") and page.is_enabled(".sw-copy")
    assert not page.is_visible(".sw-hooks .sw-status")  # the kernel's compile is no more
    assert not page.is_visible('[data-layer="a"] .sw-waiting')
    page.evaluate("() => window.harness.model().emit('msg:custom', {type: 'stats', items: []}, [])")
    assert root.count() == 1  # a late message does not bring a stopped kernel back
    assert page.evaluate("() => window.harness.unmount()") is True
    assert page.evaluate("() => window.harness.model().listenerCount()") == 0
