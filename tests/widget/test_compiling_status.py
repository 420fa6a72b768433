"""Issue 32 §4: while the user's model is in its first torch.compile the view says so, and the
code box follows a selection made meanwhile (the model's thread is busy compiling)."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from torch import nn

from surgeon_widgets.engine.cut.codegen import inspect_code
from surgeon_widgets.widget.live.recompile_status import COMPILING
from surgeon_widgets.widget.runtime.eager_steps import dynamo_counts


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _watch(ex) -> list[tuple]:
    """``(compiling, dynamo's graphs so far, status, hooks)`` at each change of ``compiling``."""
    seen: list[tuple] = []
    ex.observe(
        lambda c: seen.append((c["new"], dynamo_counts()[0], ex.status, list(ex.hooks))),
        "compiling",
    )
    return seen


def test_the_first_real_compile_is_said_while_it_runs(make, fresh_dynamo):
    model = _mlp()
    compiled = torch.compile(model)  # the default backend (inductor): a real compile
    ex = make(compiled)
    seen = _watch(ex)
    graphs = dynamo_counts()[0]
    start = time.perf_counter()
    compiled(torch.randn(8, 16))
    took = time.perf_counter() - start
    print(f"first call of torch.compile(MLP 16-32-4) on CPU: {took:.1f} s")
    # said before dynamo made its graph, taken back once it was made
    assert seen == [(True, graphs, COMPILING, []), (False, graphs + 1, "", [])]
    assert ex.status == "" and not ex.compiling
    compiled(torch.randn(8, 16))  # compiled: nothing to say
    assert len(seen) == 2


@pytest.mark.parametrize("how", ["wrapper", "in_place"])
def test_a_selection_made_during_the_compile_gets_its_code_at_once(make, fresh_dynamo, how):
    model = _mlp()
    if how == "wrapper":
        compiled = torch.compile(model, backend="eager")  # dynamo's own compile, no codegen
    else:
        compiled = model
        model.compile(backend="eager")
    ex = make(compiled, max_rate=0)
    seen = _watch(ex)

    def click_while_compiling(change) -> None:
        if change["new"]:  # the view's click arrives on the widget's subshell thread
            click = threading.Thread(target=ex.set_state, args=({"selected": ["2"]},))
            click.start()
            click.join()

    ex.observe(click_while_compiling, "compiling")
    graphs = dynamo_counts()[0]
    compiled(torch.randn(8, 16))
    # during the compile: nothing applied to the model, but the code box has the selection's
    assert ex.selected == [] and ex.hooks == [] and ex.code == ""
    assert ex.sent[-1] == ({"type": "code", "selected": ["2"], "code": inspect_code(["2"])}, [])
    assert [s[:3] for s in seen] == [(True, graphs, COMPILING), (False, graphs + 1, "")]
    compiled(torch.randn(8, 16)).sum().backward()  # the next call applies the click
    assert ex.selected == ["2"] and ex.code == inspect_code(["2"])
    assert ex.hooks == [{"name": "2", "kind": "forward"}, {"name": "2", "kind": "gradient"}]
    assert set(ex.stats("2")) == {"2/output", "2/grad_output"}
    assert len(seen) == 2  # warm: no compile said again


def test_with_a_layer_selected_the_first_step_records_and_the_compile_after_it_is_said(
    make, fresh_dynamo
):
    model = _mlp()
    compiled = torch.compile(model, backend="eager")
    ex = make(compiled, max_rate=0.01, selected=["0"])  # an update every 100 s at most
    seen = _watch(ex)
    compiled(torch.randn(8, 16))  # the selection's first update: an eager step, no compile
    assert seen == [] and ex.stats("0")["0/output"].steps == [0]
    graphs = dynamo_counts()[0]
    compiled(torch.randn(8, 16))  # none due: the compiled code runs, cold
    assert [s[:3] for s in seen] == [(True, graphs, COMPILING), (False, graphs + 1, "")]
    assert seen[0][3] == [{"name": "0", "kind": "forward"}, {"name": "0", "kind": "gradient"}]


def test_a_failed_compile_is_not_said_for_ever(make, fresh_dynamo):
    def broken(gm, example_inputs):
        raise RuntimeError("backend broke")

    compiled = torch.compile(_mlp(), backend=broken)
    ex = make(compiled)
    seen = _watch(ex)
    with pytest.raises(Exception, match="backend broke"):
        compiled(torch.randn(8, 16))
    assert [s[0] for s in seen] == [True, False] and ex.status == ""


def test_an_eager_model_never_says_compiling(make):
    model = _mlp()
    ex = make(model, selected=["0"])
    model(torch.randn(8, 16))
    assert not ex.compiling and ex.status == ""
