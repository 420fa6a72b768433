"""Issue 17 §1: a compiled model is observed without recompiling (its recorded forwards run
eagerly, hooked for that call only), with the values of an eager reference."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from support.models import TinyAttention
from torch import nn

from surgeon_widgets.engine.registry import live_hooks
from surgeon_widgets.engine.stats import tensor_stats
from surgeon_widgets.widget.explorer import Explorer
from surgeon_widgets.widget.live.selection import COMPILED, EAGER_STEPS
from surgeon_widgets.widget.runtime import eager_steps
from surgeon_widgets.widget.runtime.eager_steps import EagerSteps, dynamo_counts


class Counting:
    """A torch.compile backend that counts the graphs it compiles and the calls of them."""

    def __init__(self) -> None:
        self.graphs = 0
        self.calls = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> object:
        self.graphs += 1

        def run(*args: object) -> object:
            self.calls += 1
            return gm.forward(*args)

        return run


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.Flatten(), nn.Linear(8 * 8 * 8, 16), nn.ReLU(), nn.Linear(16, 4),
    )  # fmt: skip


def _compiled(how: str, backend: object) -> tuple[nn.Module, nn.Module]:
    """(what the user calls, the module inside)."""
    model = _net()
    if how == "wrapper":
        return torch.compile(model, backend=backend), model
    model.compile(backend=backend)
    return model, model


def _step(run: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = run(x)
    out.sum().backward()
    return out


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _select_and_step(ex: Explorer, model: nn.Module, x: torch.Tensor) -> None:
    """Selections changed between steps, then gradients switched off: one walk for both arms."""
    for selection in (["2", "4"], ["0", "6"], []):
        ex.select(selection)
        _step(model, x)
    ex.gradients = False
    ex.select(["4"])
    _step(model, x)


@pytest.mark.parametrize("how", ["wrapper", "in_place"])
def test_selection_changes_compile_no_graph_and_values_match_eager(make, fresh_dynamo, how):
    backend = Counting()
    handed, model = _compiled(how, backend)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(2):
        _step(handed, x)  # the user's compiled graphs, before any Explorer
    graphs, counts = backend.graphs, dynamo_counts()
    ex = make(handed, max_rate=0, gradients=True)
    assert ex.notes == [EAGER_STEPS]
    _select_and_step(ex, handed, x)
    assert backend.graphs == graphs and dynamo_counts() == counts  # no graph, no graph break
    assert live_hooks() == []
    calls = backend.calls
    ex.select([])
    _step(handed, x)
    assert backend.calls > calls  # deselected: the compiled graph runs again

    ref = Explorer(eager, max_rate=0, gradients=True)  # the same steps, eagerly
    try:
        _select_and_step(ref, eager, x)
        for layer in ("0", "2", "4", "6"):
            got, want = ex.stats(layer), ref.stats(layer)
            assert sorted(got) == sorted(want) and got
            for key in got:
                assert got[key].steps == want[key].steps
                g, w = got[key].latest, want[key].latest
                assert (g.mean, g.std, g.min, g.max, g.zeros) == pytest.approx(
                    (w.mean, w.std, w.min, w.max, w.zeros), rel=1e-5, abs=1e-6
                ), key
    finally:
        ref.close()


def test_inductor_graph_stays_and_records_equal_the_eager_forward(make, fresh_dynamo):
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    handed = torch.compile(model)  # inductor: the one case that compiles for real
    x = torch.randn(4, 6)
    handed(x).sum().backward()
    counts = dynamo_counts()
    ex = make(handed, selected=["1"], max_rate=0, gradients=True, params=True)
    out = handed(x)
    out.sum().backward()
    ex.select(["0", "2"])
    handed(x).sum().backward()
    assert dynamo_counts() == counts
    with torch.no_grad():
        hidden = torch.tanh(model[0](x))
    torch.testing.assert_close(out, model[2](hidden))  # the eager step's output is the model's
    assert ex.stats("1")["1/output"].latest.mean == pytest.approx(hidden.mean().item(), abs=1e-6)
    weight = ex.stats("2")["2/weight"].latest
    assert weight.max == pytest.approx(model[2].weight.max().item())
    grad = ex.stats("2")["2/weight.grad"].latest  # the gradient of this step's backward
    assert grad.l2 == pytest.approx(tensor_stats(model[2].weight.grad).l2, rel=1e-5)


def test_first_record_comes_with_the_next_forward_despite_the_pace(make, fresh_dynamo):
    handed, _ = _compiled("wrapper", "eager")
    x = torch.randn(2, 3, 8, 8)
    ex = make(handed, selected=["2"])  # the default throttle: 10 a second, 2% budget
    pace = ex._live.pace
    pace.took(True, 10.0)  # an eager step that costs 10 s more than a compiled one
    pace.took(False, 0.0)
    assert not pace.allowed()
    _step(handed, x)
    assert ex.stats("2") == {} and ex._live.steps.eager == 0  # held back: ran compiled
    ex.select(["4"])
    _step(handed, x)
    assert ex.stats("4")["4/output"].steps == [1]


def test_a_forward_that_raises_in_an_eager_step_leaves_nothing_behind(make, fresh_dynamo):
    backend = Counting()
    model = TinyAttention().eval()
    handed = torch.compile(model, backend=backend)
    ex = make(handed, selected=["attn", "head"], max_rate=0)
    with pytest.raises(RuntimeError):
        handed(torch.randn(1, 3, 5))  # wrong feature size
    assert live_hooks() == [] and "forward" not in model.attn.__dict__
    assert torch._C._len_torch_function_stack() == 0
    ex.select([])
    handed(torch.randn(1, 3, 4))
    assert backend.calls == 1  # the stance is back: compiled code runs


def test_copies_and_pickles_of_the_wrapper_get_the_compiled_call(make, fresh_dynamo):
    handed, model = _compiled("in_place", "eager")
    ex = make(handed, selected=["2"], max_rate=0)
    assert isinstance(model.__dict__["_compiled_call_impl"], EagerSteps)
    x = torch.randn(2, 3, 8, 8)
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert not isinstance(other.__dict__.get("_compiled_call_impl"), EagerSteps)
        torch.testing.assert_close(other(x), model(x))
    ex.close()
    assert not isinstance(model.__dict__.get("_compiled_call_impl"), EagerSteps)


def test_without_the_door_the_hooks_go_into_the_graph(make, fresh_dynamo, monkeypatch):
    """The fallback (a torch where the compiled call is not where we look): hooks on the
    modules, each a graph break in the user's graph, and the values still come."""
    monkeypatch.setattr(eager_steps, "entry", lambda model: None)
    handed, _ = _compiled("wrapper", Counting())
    x = torch.randn(2, 3, 8, 8)
    ex = make(handed, selected=["2"], max_rate=0)
    assert ex.notes == [COMPILED] and ex._live.steps is None
    breaks = dynamo_counts()[1]
    _step(handed, x)
    ex.select(["4"])
    _step(handed, x)
    assert dynamo_counts()[1] > breaks
    assert ex.stats("2")["2/output"].steps == [0] and ex.stats("4")["4/output"].steps == [1]


def test_dynamo_counts_without_dynamo_counters(monkeypatch):
    import sys

    assert all(isinstance(n, int) for n in dynamo_counts())
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", None)  # import raises ImportError
    assert dynamo_counts() is None


def test_a_recompiling_selection_change_says_so_until_its_first_record(make, fresh_dynamo):
    """Blocks compiled in place in an eager model: the hooks go into their graphs."""
    model = _net()
    model[4].compile(backend="eager")
    ex = make(model, max_rate=0)
    assert ex.notes == [COMPILED] and ex.status == ""
    ex.select(["4"])
    assert ex.status == "recompiling"
    _step(model, torch.randn(2, 3, 8, 8))
    assert ex.status == "" and ex.stats("4")["4/output"].steps == [0]
    ex.select(["4", "6"])
    assert ex.status.startswith("recompiling, ~") and ex.status.endswith(" s")


@pytest.mark.parametrize("how", ["wrapper", "in_place"])
def test_a_click_from_another_thread_applies_at_the_next_compiled_forward(make, fresh_dynamo, how):
    """A click during a running cell: applied by the model's call, outside compiled code (a
    pre-hook on a root compiled in place would sit inside it, unseen by dynamo's graph)."""
    import threading

    backend = Counting()
    handed, model = _compiled(how, backend)
    x = torch.randn(2, 3, 8, 8)
    ex = make(handed, max_rate=0)
    _step(handed, x)
    graphs = backend.graphs
    click = threading.Thread(target=ex.set_state, args=({"selected": ["4"]},))  # from the view
    click.start()
    click.join()
    assert ex._view_state.waiting == ["selected"] and ex.hooks == []
    assert not model._forward_pre_hooks  # no pre-hook for the inbox: the call applies it
    _step(handed, x)
    assert ex.hooks == [{"name": "4", "kind": "forward"}, {"name": "4", "kind": "gradient"}]
    assert ex.stats("4")["4/output"].steps == [0] and backend.graphs == graphs


def test_the_compiled_model_does_not_keep_a_dropped_explorer_alive(fresh_dynamo):
    import gc
    import weakref

    handed, _ = _compiled("wrapper", "eager")
    ex = Explorer(handed, selected=["2"], max_rate=0)
    _step(handed, torch.randn(2, 3, 8, 8))
    gone = weakref.ref(ex)
    del ex
    gc.collect()
    assert gone() is None and not isinstance(handed.__dict__["forward"], EagerSteps)
    assert live_hooks() == []
    _step(handed, torch.randn(2, 3, 8, 8))
