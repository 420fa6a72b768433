"""Issue 9 §3 and the Explorer's side effects: what removes its hooks, what it leaves on torch.

Collection: an Explorer opens its comm only when a view needs it (its display, ``model_id``: a
``Box``'s children), so one never shown is collected after ``del`` and ``gc.collect()``; one
shown is collected once ipywidgets lets go of it (here: the front end closes its comm, and the
widget registry entry is dropped, as ipywidgets' weak-reference mode would). Either way no hook
of any kind is left on the model, ownership is given back and dynamo's option restored.
Compiled models: making an Explorer drops only the compiled code of its own model's module
classes, and a click posted while ``torch.compile(model)`` runs applies at the next forward.
"""

from __future__ import annotations

import gc
import threading
import weakref

import comm
import ipywidgets
import ipywidgets.widgets.widget as ipywidget
import pytest
import torch
import torchvision
from support.models import tiny_bert
from torch import nn

from surgeon_widgets.engine.attention.capture import attention_layers
from surgeon_widgets.widget.explorer import Explorer
from surgeon_widgets.widget.live.nonfinite import FINITE_IN_FINITE_OUT
from surgeon_widgets.widget.runtime import hook_guards, ownership

MODULE_HOOKS = (
    "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
    "_state_dict_hooks", "_load_state_dict_pre_hooks",
)  # fmt: skip


def hook_counts(model: nn.Module, *tensors: torch.Tensor) -> dict[str, int]:
    """Every hook on the model's modules, parameters and the given tensors, by kind."""
    counts = {kind: sum(len(getattr(m, kind)) for m in model.modules()) for kind in MODULE_HOOKS}
    leaves = [*model.parameters(), *tensors]
    counts["tensor"] = sum(len(t._backward_hooks or {}) for t in leaves)
    counts["post_accumulate_grad"] = sum(len(t._post_accumulate_grad_hooks or {}) for t in leaves)
    return counts


def let_go(ex: Explorer) -> weakref.ref[Explorer]:
    """Drop what ipywidgets 8 itself holds: the front end closes the comm; the registry entry."""
    manager = comm.get_comm_manager()
    manager.comm_close(None, None, {"content": {"comm_id": ex.comm.comm_id, "data": {}}})
    ipywidget._instances.pop(ex.model_id)
    return weakref.ref(ex)


def comms() -> tuple[int, int]:
    """How many widgets ipywidgets keeps, and how many comms are open."""
    return len(ipywidget._instances), len(comm.get_comm_manager().comms)


@pytest.fixture
def guards_default():
    """Dynamo's own default for the option the Explorer scopes, put back after the test."""
    config = torch._dynamo.config
    before = config.skip_nnmodule_hook_guards
    config.skip_nnmodule_hook_guards = True
    yield
    config.skip_nnmodule_hook_guards = before


def test_a_registry_collected_in_a_reference_cycle_removes_its_hooks():
    from surgeon_widgets.engine.registry import HookRegistry

    model = nn.Sequential(nn.Linear(2, 2))
    owner = {"registry": HookRegistry("cycle")}
    owner["self"] = owner  # only the cycle collector can free it (a __del__ would be too late)
    owner["registry"].forward(model[0], lambda m, i, o: None, name="0")
    owner["registry"].tensor(model[0].weight, lambda g: None, name="0")
    del owner
    gc.collect()
    assert sum(hook_counts(model).values()) == 0


@pytest.mark.parametrize("shown", [False, True], ids=["never-shown", "shown-then-let-go"])
def test_a_collected_explorer_leaves_no_hook_and_the_model_trains(guards_default, shown):
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(2, 3, 64, 64)
    widgets = comms()
    ex = Explorer(
        model, selected=["conv1", "layer1.0", "layer3", "fc"], gradients=True, max_rate=0,
        params=True,
    )  # fmt: skip
    out = model(x)  # its gradient hook is still pending on `out` (no backward yet)
    model(x).sum().backward()
    before = hook_counts(model, out)
    # the four selected, and live.nonfinite's one on every module but ReLUs and the max pool
    checked = [m for m in model.modules() if type(m) not in FINITE_IN_FINITE_OUT]
    assert before["_forward_hooks"] == 4 + len(checked) and len(checked) < 60
    assert before["_forward_pre_hooks"] >= 3
    # conv1.weight, fc.weight, fc.bias and layer1.0's children's six (a block owns none);
    # fc's output is `out`, the model's: its gradient hook and live.nonfinite's wait
    assert before["post_accumulate_grad"] == 9 and before["tensor"] == 2
    assert ownership.owner_of(model) is ex
    assert torch._dynamo.config.skip_nnmodule_hook_guards is False
    if shown:
        ex._repr_mimebundle_()  # what a display does: the comm opens, ipywidgets keeps it
        assert ex.comm is not None and ipywidget._instances[ex.model_id] is ex
        alive = let_go(ex)
    else:
        assert ex.comm is None and comms() == widgets  # nothing of ipywidgets holds it
        alive = weakref.ref(ex)
    del ex
    gc.collect()
    assert alive() is None
    assert hook_counts(model, out) == dict.fromkeys(before, 0)
    assert ownership.owner_of(model) is None and hook_guards.holders() == 0
    assert torch._dynamo.config.skip_nnmodule_hook_guards is True  # the user's value again
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    weight = model.fc.weight.detach().clone()
    model(x).sum().backward()
    optimizer.step()
    assert not torch.equal(weight, model.fc.weight)


def test_a_collected_explorer_with_attention_and_gradients_leaves_no_hook():
    model = tiny_bert(vocab_size=64, max_position_embeddings=16).train()
    layers = attention_layers(model)
    widgets = comms()
    ex = Explorer(model, selected=[*layers, "encoder.layer.0"], gradients=True, max_rate=0)
    ids = torch.randint(0, 64, (1, 8))
    model(input_ids=ids).last_hidden_state.sum().backward()
    assert ex._live.attention.latest(layers[0]) is not None and ex.stats("encoder.layer.0")
    assert sum(hook_counts(model).values()) > 0
    assert all("forward" in model.get_submodule(n).__dict__ for n in layers)  # run_eagerly's
    assert ex.comm is None and comms() == widgets  # never shown: no comm was made
    alive = weakref.ref(ex)
    del ex
    gc.collect()
    assert alive() is None and sum(hook_counts(model).values()) == 0
    assert not any("forward" in m.__dict__ for m in model.modules())  # the class's forward again
    model(input_ids=ids).last_hidden_state.sum().backward()  # nothing of ours runs or fails


def test_showing_an_explorer_opens_its_comm_with_everything_recorded_before(monkeypatch):
    model = torchvision.models.resnet18(num_classes=10)
    widgets = comms()
    ex = Explorer(model, selected=["layer1", "fc"], gradients=True, max_rate=0)
    for _ in range(2):
        model(torch.randn(2, 3, 64, 64)).sum().backward()
    assert ex.comm is None and comms() == widgets and ex.stats("fc")["fc/output"].steps == [0, 1]
    opened: list[dict] = []
    create = comm.create_comm
    monkeypatch.setattr(comm, "create_comm", lambda **kw: opened.append(kw) or create(**kw))
    bundle, _ = ex._repr_mimebundle_()
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == ex.model_id == ex.comm.comm_id and "image/png" in bundle
    assert ipywidget._instances[ex.model_id] is ex
    states = [kw["data"]["state"] for kw in opened]
    mine = [state for state in states if state["_model_name"] == "AnyModel"]
    assert len(mine) == 1  # its Layout opens too; the full state goes out with the open message
    state = mine[0]
    assert state["selected"] == ["layer1", "fc"] and state["gradients"] is True
    assert {"name": "fc", "kind": "gradient"} in state["hooks"]
    assert state["shapes"]["fc"] == {"shape": [2, 10], "dtype": "float32"}
    assert ex.clicks == ""  # routing ran with the comm (no kernel here: nothing to route)
    ex._repr_mimebundle_()
    assert len(opened) == 2  # one comm per Explorer (and one for its Layout)
    sent: list[dict] = []
    ex.send = lambda content, buffers=None: sent.append(content)
    hello = {"method": "custom", "content": {"type": "hello"}}
    ex.comm._msg_callback({"content": {"data": hello}, "buffers": []})  # a view asks what it missed
    assert [m["type"] for m in sent] == ["snapshot"]
    history = sent[0]["history"]
    assert len(history["fc/output"]) == len(history["fc/grad_output"]) == 2
    ex.close()
    assert sum(hook_counts(model).values()) == 0 and ex.comm is not None  # "Explorer closed"
    ex.close()
    ex.layout.close()  # (ipywidgets keeps a closed DOMWidget's Layout)
    assert ex.comm is None and comms() == widgets


def test_a_box_opens_its_childs_comm_and_close_still_removes_everything():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    widgets = comms()
    ex = Explorer(model, selected=["0", "2"], gradients=True, max_rate=0)
    assert ex.comm is None
    box = ipywidgets.VBox([ex])  # widget_serialization reads the child's model_id
    assert ex.comm is not None and ipywidget._instances[ex.model_id] is ex
    assert box.get_state()["children"] == [f"IPY_MODEL_{ex.model_id}"]
    model(torch.randn(2, 8)).sum().backward()
    assert sum(hook_counts(model).values()) > 0
    ex.close()
    assert sum(hook_counts(model).values()) == 0 and ownership.owner_of(model) is None
    assert ex.comm is not None  # shown: the placeholder stays until a second close()
    ex.close()
    box.close()
    assert ex.comm is None and ex not in ipywidget._instances.values()
    box.layout.close()  # (a DOMWidget's Layout: ipywidgets keeps it after the Box's close)
    ex.layout.close()
    assert comms() == widgets


def test_an_explorer_closed_before_it_was_shown_never_opens_a_comm():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    widgets = comms()
    ex = Explorer(model, selected=["0"], gradients=True, max_rate=0)
    model(torch.randn(2, 8)).sum().backward()
    ex.close()
    assert ex.closed and ex.selected == [] and ex.stats("0") == {}
    assert sum(hook_counts(model).values()) == 0 and ownership.owner_of(model) is None
    assert ex._repr_mimebundle_() is None  # a display shows the text, as for closed widgets
    assert repr(ex) == "Explorer(Sequential, 2 layers, closed)"
    ex.open()
    with pytest.raises(RuntimeError, match="this Explorer is closed"):
        _ = ex.model_id
    with pytest.raises(RuntimeError, match="this Explorer is closed"):
        ipywidgets.VBox([ex])
    assert ex.comm is None and comms() == widgets
    ex.close()  # again: nothing left to do
    assert ex.comm is None


def test_close_removes_every_kind_of_hook_and_gives_everything_back(guards_default):
    model = torchvision.models.resnet18(num_classes=10)
    ex = Explorer(model, selected=["layer1", "fc"], gradients=True, max_rate=0, params=True)
    out = model(torch.randn(1, 3, 64, 64))
    assert sum(hook_counts(model, out).values()) > 0
    ex.close()
    assert sum(hook_counts(model, out).values()) == 0
    assert ownership.owner_of(model) is None and hook_guards.holders() == 0
    assert torch._dynamo.config.skip_nnmodule_hook_guards is True
    ex.close()  # the comm too


def test_dynamo_option_is_held_while_any_explorer_lives_then_restored(guards_default):
    config = torch._dynamo.config
    first = Explorer(nn.Linear(2, 2))
    second = Explorer(nn.Linear(2, 2))
    assert config.skip_nnmodule_hook_guards is False
    first.close()
    assert config.skip_nnmodule_hook_guards is False  # `second` still needs it
    model = nn.Linear(2, 2)
    third = Explorer(model)
    Explorer(model).close()  # takes `model` over from `third`, which lets go too
    assert third.replaced and hook_guards.holders() == 1
    second.close()
    assert config.skip_nnmodule_hook_guards is True and hook_guards.holders() == 0
    config.skip_nnmodule_hook_guards = False  # the user's own choice stays
    Explorer(nn.Linear(2, 2)).close()
    assert config.skip_nnmodule_hook_guards is False
    config.skip_nnmodule_hook_guards = True
    ex = Explorer(nn.Linear(2, 2))
    config.skip_nnmodule_hook_guards = True  # changed by the user while an Explorer lives
    ex.close()
    assert config.skip_nnmodule_hook_guards is True


def test_a_failed_constructor_leaves_nothing_behind(guards_default):
    model = torchvision.models.resnet18(num_classes=10)
    widgets = comms()
    with pytest.raises(Exception, match=r"layer3\.O"):
        Explorer(model, selected=["layer1", "layer3.O"])  # a letter O for a zero
    assert sum(hook_counts(model).values()) == 0 and ownership.owner_of(model) is None
    assert comms() == widgets and hook_guards.holders() == 0
    assert torch._dynamo.config.skip_nnmodule_hook_guards is True


class Counting:
    """A dynamo backend that counts its compiles (and runs the graph as is)."""

    def __init__(self) -> None:
        self.compiles = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> object:
        self.compiles += 1
        return gm.forward


class Other(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x)) * 2


class Watched(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def test_another_compiled_model_keeps_its_code(guards_default):
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    other_backend, watched_backend = Counting(), Counting()
    other = torch.compile(Other(), backend=other_backend)
    watched = torch.compile(Watched(), backend=watched_backend)
    other(x), watched(x)
    assert (other_backend.compiles, watched_backend.compiles) == (1, 1)
    ex = Explorer(watched, selected=["a"], max_rate=0)
    try:
        watched(x)
        watched(x)
        assert ex.stats("a")["a/output"].steps == [0, 1]  # the old code without hooks was dropped
        other(x)
        assert other_backend.compiles == 1  # torch.compiler.reset() would have made this 2
    finally:
        ex.close()


def test_a_model_of_a_class_compiled_before_records_once_compiled(guards_default):
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    first = torch.compile(Watched(), backend="eager")
    first(x)  # compiled without hook guards, for every model of this class
    model = Watched()
    ex = Explorer(model, selected=["b"], max_rate=0)
    try:
        compiled = torch.compile(model, backend="eager")
        compiled(x)
        compiled(x)
        assert ex.stats("b")["b/output"].steps == [0, 1]
        first(x)  # recompiles once (its class's code was dropped), and records nothing of ours
        assert ex.stats("b")["b/output"].steps == [0, 1]
    finally:
        ex.close()


def post_from_another_thread(ex: Explorer, names: list[str]) -> None:
    """What a click does on a kernel subshell: the view's state arrives off the model's thread."""
    thread = threading.Thread(target=ex.set_state, args=({"selected": names},))
    thread.start()
    thread.join()
    assert ex._view_state.waiting == ["selected"]


def test_a_first_selection_applied_at_a_forward_counts_that_forward():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    ex = Explorer(model, max_rate=0)
    try:
        post_from_another_thread(ex, ["2"])  # nothing was selected: no step clock yet
        for _ in range(3):
            model(torch.randn(4, 8))
        assert ex.stats("2")["2/output"].steps == [0, 1, 2]  # was [0, 0, 1]
    finally:
        ex.close()


@pytest.mark.parametrize("wrapped", [False, True], ids=["compiled-after", "compiled-wrapper"])
def test_a_click_applies_at_the_next_forward_of_a_compiled_model(guards_default, wrapped):
    torch._dynamo.reset()
    # an nn.Sequential root: dynamo traces its hooks (torch.compile adds an inlined frame)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(4, 8)
    compiled = torch.compile(model, backend="eager")
    ex = Explorer(compiled if wrapped else model, selected=["0"], max_rate=0)
    try:
        for step in range(6):
            if step == 3:
                post_from_another_thread(ex, ["0", "2"])
            compiled(x)
        assert ex._handover.pending == [] and ex.selected == ["0", "2"]
        assert ex.stats("2")["2/output"].steps == [3, 4, 5]  # from the very next forward
        assert ex.stats("0")["0/output"].steps == [0, 1, 2, 3, 4, 5]
        assert ex.errors == []
    finally:
        ex.close()
