"""The thread hand-over: the view's trait changes that arrive on another thread (the kernel
subshell, through ``set_state``) apply at the model's next forward; their traces run between
forwards on the main thread (when the cell ends)."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.fx
from torch import nn

from surgeon_widgets.engine import guard, tracing
from surgeon_widgets.engine.registry import live_hooks
from surgeon_widgets.widget.explorer import TRACING, Explorer
from surgeon_widgets.widget.runtime.handover import Handover


def toy() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def on_thread(fn, *args) -> None:
    """Run ``fn`` on another thread (as the kernel subshell does) and wait for it."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn(*args)
        except BaseException as error:  # surfaced below
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert not errors, errors


class Traces:
    """Every real trace of a model (the engine's uncached trace): on which thread, and whether a
    forward of the test's training loop was running."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []
        self.inside = False

    def forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        self.inside = True
        try:
            return model(x)
        finally:
            self.inside = False


@pytest.fixture
def traces(monkeypatch) -> Traces:
    spy = Traces()
    real = tracing._trace_uncached

    def spied(*args, **kwargs):
        spy.seen.append((threading.current_thread().name, spy.inside))
        return real(*args, **kwargs)

    monkeypatch.setattr(tracing, "_trace_uncached", spied)
    return spy


def has_nodes(ex: Explorer) -> bool:
    """Does the tree show graph nodes (rows that are not modules)?"""
    return any(r["name"] not in ex._tree.layers for r in ex.rows)


def hooked(model: nn.Module) -> set[str]:
    """The modules with a forward hook of the selection (live.nonfinite's are on all)."""
    named = {name for owner, kind, name in live_hooks() if (owner, kind) == ("Explorer", "forward")}
    return {n for n, m in model.named_modules() if m._forward_hooks and n in named}



def from_view(ex: Explorer, **state) -> None:
    """A change from the view, as ipywidgets hands it over, on another thread (a subshell)."""
    on_thread(ex.set_state, state)


def test_selection_from_another_thread_applies_at_the_next_forward_and_records_it():
    model = toy()
    ex = Explorer(model, max_rate=0)
    from_view(ex, selected=["2"])
    assert ex.selected == []  # the trait too changes on the model's thread
    assert hooked(model) == set() and ex.hooks == []  # nothing touched the model yet
    assert [owner for owner, _, _ in live_hooks()] == ["Explorer handover"]

    model(torch.randn(3, 4))  # the pre-hook attaches before layer 2 runs: this forward counts
    assert hooked(model) == {"2"}
    assert ex.stats("2")["2/output"].latest.shape == (3, 2)
    assert ex.hooks == [{"name": "2", "kind": "forward"}, {"name": "2", "kind": "gradient"}]
    assert all(owner != "Explorer handover" for owner, _, _ in live_hooks())  # pre-hook gone
    ex.close()


def test_changes_apply_in_order_and_the_newest_of_a_trait_wins():
    model = toy()
    ex = Explorer(model)
    from_view(ex, selected=["0"])
    from_view(ex, max_rate=0.0)
    from_view(ex, selected=["0", "2"])
    from_view(ex, gradients=True, search="lin")  # search: no observer touches the model
    assert ex._view_state.waiting == ["max_rate", "selected", "gradients"]
    assert ex.search == "lin" and ex.selected == []
    assert ex._live.throttle.max_rate == 10.0
    model(torch.randn(2, 4)).sum().backward()
    assert ex._live.throttle.max_rate == 0.0 and ex._live.activations.gradients
    assert hooked(model) == {"0", "2"}
    assert "0/grad_output" in ex.stats("0")
    ex.close()


def test_graph_nodes_and_cut_marks_from_another_thread_trace_when_the_cell_ends(loop, traces):
    model = toy()
    ex = Explorer(model, torch.randn(1, 4))
    rows = list(ex.rows)
    from_view(ex, show_nodes=True)
    from_view(ex, node_out={"1": "1"})
    for _ in range(3):
        traces.forward(model, torch.randn(1, 4))
    assert ex.show_nodes and ex.node_out == {"1": "1"}  # the changes applied at a forward...
    assert traces.seen == [] and ex.rows == rows and ex.cut_report == {}  # ...not their traces
    assert ex._handover.waiting_work == ["show_nodes", "cut"] and TRACING in ex.notes
    loop.cell_ends()
    assert traces.seen == [("MainThread", False)]  # one trace, shared, between forwards
    assert len(ex.rows) > len(rows) and not ex.nodes_error
    assert ex.cut_report["outputs"] and not ex.cut_report["problems"]
    assert "node_out='1'" in ex.code and TRACING not in ex.notes
    ex.close()


def test_a_click_drained_inside_the_pre_hook_traces_when_the_cell_ends(loop, traces):
    model = toy()
    ex = Explorer(model, torch.randn(1, 4))
    ex._handover.poll = lambda: setattr(ex, "show_nodes", True)  # as the drain: main thread
    traces.forward(model, torch.randn(1, 4))
    ex._handover.poll = None
    assert ex.show_nodes and traces.seen == [] and TRACING in ex.notes
    loop.cell_ends()
    assert traces.seen == [("MainThread", False)] and has_nodes(ex)
    ex.close()


def test_an_idle_kernel_traces_a_click_at_once_on_its_main_loop(loop, traces):
    model = toy()
    ex = Explorer(model, torch.randn(1, 4))
    from_view(ex, node_out={"1": "1"})
    assert traces.seen == [] and ex.cut_report == {}
    loop.cell_ends()  # no cell runs: the loop's callback comes at once
    assert traces.seen == [("MainThread", False)] and ex.cut_report["valid"]
    assert TRACING not in ex.notes  # never waited
    ex.close()


def test_graph_nodes_switched_back_off_before_the_cell_ends_need_no_trace(loop, traces):
    model = toy()
    ex = Explorer(model, torch.randn(1, 4))
    rows = list(ex.rows)
    from_view(ex, show_nodes=True)
    traces.forward(model, torch.randn(1, 4))
    assert TRACING in ex.notes
    from_view(ex, show_nodes=False)
    traces.forward(model, torch.randn(1, 4))
    assert ex._handover.waiting_work == [] and TRACING not in ex.notes
    loop.cell_ends()
    assert traces.seen == [] and ex.rows == rows
    ex.close()


def test_the_users_own_code_on_the_main_thread_traces_at_once(traces):
    model = toy()
    ex = Explorer(model, torch.randn(1, 4), show_nodes=True)  # no kernel: as before
    ex.node_out = ["1"]
    assert traces.seen == [("MainThread", False)] and ex.cut_report["valid"]
    assert has_nodes(ex) and TRACING not in ex.notes
    ex.close()


def test_a_main_thread_change_first_applies_what_is_pending():
    model = toy()
    ex = Explorer(model)
    from_view(ex, selected=["0"])
    ex.select(["2"])  # the user's own code, on the main thread: applies now, newer than the click
    assert ex._view_state.waiting == [] and hooked(model) == {"2"}
    model(torch.randn(1, 4))
    assert ex.selected == ["2"] and hooked(model) == {"2"}
    ex.close()


def test_nothing_is_applied_inside_a_trace_or_the_packages_own_forwards():
    model = toy()
    ex = Explorer(model)
    plain = len(torch.fx.symbolic_trace(nn.Sequential(toy())).graph.nodes)
    from_view(ex, selected=["0"])
    seen = []
    ex._handover.registry.forward_pre(model, lambda m, a: seen.append(type(a[0]).__name__))
    graph = torch.fx.symbolic_trace(nn.Sequential(model)).graph  # model runs its pre-hooks
    assert seen == ["Proxy"]  # our pre-hook ran too, and did nothing under the tracer
    assert len(graph.nodes) == plain
    with guard.internal():
        model(torch.randn(1, 4))
    assert ex._handover.pending == ["view state"] and hooked(model) == set()
    model(torch.randn(1, 4))
    assert hooked(model) == {"0"}
    ex._handover.registry.remove()
    ex.close()


def test_a_python_change_applies_on_the_thread_that_makes_it():
    model = toy()
    ex = Explorer(model)
    on_thread(setattr, ex, "selected", ["0"])  # the user's own code: plain traitlets
    assert ex._handover.pending == [] and hooked(model) == {"0"}
    ex.close()


def test_a_view_change_to_a_closed_explorer_is_refused_at_once():
    model = toy()
    ex = Explorer(model)
    ex.close()
    from_view(ex, selected=["0"])
    assert ex.selected == [] and live_hooks() == [] and ex._view_state.waiting == []


def test_close_drops_pending_changes_and_the_pre_hook():
    model = toy()
    ex = Explorer(model)
    from_view(ex, selected=["0"])
    ex.close()
    assert live_hooks() == []
    model(torch.randn(1, 4))
    assert hooked(model) == set()


def test_a_failing_change_is_logged_and_the_rest_still_apply(caplog):
    model = toy()
    inbox = Handover(model)
    seen: list[str] = []

    def boom(value: object) -> None:
        raise RuntimeError("boom")

    on_thread(inbox.post, "a", boom, None)
    on_thread(inbox.post, "b", seen.append, "b")
    model(torch.randn(1, 4))
    assert seen == ["b"] and inbox.pending == []
    assert "applying a change of 'a' failed" in caplog.text
    inbox.close()


def test_widget_messages_from_another_thread_wait_for_a_forward_but_hello_does_not():
    model = toy()
    ex = Explorer(model, selected=["0"])
    sent = []
    ex.send = lambda content, buffers=None: sent.append(content["type"])
    ex.open()  # as a display does
    handler = ex.comm._msg_callback  # ipywidgets' handler, as the comm calls it

    def message(content: dict) -> dict:
        return {"content": {"data": {"method": "custom", "content": content}}, "buffers": []}

    on_thread(handler, message({"type": "remove_all_hooks"}))
    on_thread(handler, message({"type": "hello"}))
    assert sent == ["snapshot"]  # answered at once (reads history only)
    assert hooked(model) == {"0"}  # the removal waits for the model's thread
    model(torch.randn(1, 4))
    assert ex.selected == [] and hooked(model) == set()
    ex.close()
