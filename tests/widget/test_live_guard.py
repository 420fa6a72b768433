"""Issue 9 (2-6): live hooks stay out of traces, one Explorer per model, steps, compile, errors."""

from __future__ import annotations

import copy

import pytest
import torch
import torchvision
import traitlets
from support.models import tiny_bert, tiny_gpt2
from torch import nn

from surgeon_widgets import Extract, get_layers, get_nodes
from surgeon_widgets.engine.cut.analyze import analyze_cut
from surgeon_widgets.engine.registry import live_hooks
from surgeon_widgets.engine.tracing import trace
from surgeon_widgets.widget.explorer import Explorer
from surgeon_widgets.widget.live.nonfinite import FINITE_IN_FINITE_OUT
from surgeon_widgets.widget.live.selection import META
from surgeon_widgets.widget.runtime.ownership import REPLACED
from surgeon_widgets.widget.views import tree


@pytest.fixture
def explorer():
    made: list[Explorer] = []

    def build(*args, **kwargs) -> Explorer:
        ex = Explorer(*args, **kwargs)
        made.append(ex)
        return ex

    yield build
    for ex in made:
        ex.close()


def _stats_steps(ex: Explorer) -> dict[str, list[int]]:
    return {k: s.steps for n in ex.selected for k, s in ex.stats(n).items()}


def _user_view(model: nn.Module, x, node_in, node_out, example_inputs=None) -> dict:
    """What the user gets from the engine with nothing of ours in the way."""
    traced = trace(model, example_inputs=example_inputs)
    ext = Extract(model, node_in=node_in, node_out=node_out, example_inputs=example_inputs)
    with torch.no_grad():
        out = (
            None
            if node_in is not None or x is None
            else ext(**x)
            if isinstance(x, dict)
            else ext(x)
        )
    report = analyze_cut(model, node_in, node_out, example_inputs=example_inputs).to_dict()
    return {
        "nodes": get_nodes(model, example_inputs=example_inputs),
        "method": traced.method,
        "extract_nodes": len(ext.graph.nodes),
        "out": out,
        "report": report,
        "rows": tree.node_rows(model, example_inputs, frozenset(get_layers(model))),
    }


def _same(a: dict, b: dict) -> None:
    for key in a:
        if key == "out":
            if a[key] is None:
                assert b[key] is None
            else:
                torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
        else:
            assert a[key] == b[key], key


def test_resnet_traces_are_identical_with_every_layer_live(explorer):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    fresh = copy.deepcopy(model)
    x = torch.randn(2, 3, 64, 64)
    fresh.train()(x)  # the same BatchNorm statistics as the training step below
    fresh.eval()
    expected = _user_view(fresh, x, None, "layer2")
    cut = _user_view(fresh, x, "layer1.0.conv1", "layer1.0")
    ex = explorer(model, x, selected=get_layers(model), gradients=True, max_rate=0)
    model.train()
    model(x).sum().backward()  # the hooks are live and recording
    model.eval()
    steps = _stats_steps(ex)
    assert steps["layer2/output"] == [0] and steps["conv1/grad_output"] == [0]

    got = _user_view(model, x, None, "layer2")
    _same(expected, got)
    _same(cut, _user_view(model, x, "layer1.0.conv1", "layer1.0"))
    assert got["method"] == "fx" and len(got["nodes"]) == len(expected["nodes"])
    ex.show_nodes = True  # the widget's own graph-node rows, traced with hooks attached
    assert ex.nodes_error == "" and [r for r in ex.rows if r["kind"] == "node"]
    ex.node_in, ex.node_out = "layer1.0.conv1", "layer1.0"
    assert {k: v for k, v in ex.cut_report.items() if k != "code"} == cut["report"]
    assert ex.errors == []
    assert _stats_steps(ex) == steps  # nothing the package or the user's Extract ran recorded


def test_bert_with_attention_selected_exports_identically(explorer):
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = tiny_bert(vocab_size=64, max_position_embeddings=16)
    fresh = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 8))
    inputs = {"input_ids": ids}
    layer = "encoder.layer.1.output"
    expected = _user_view(fresh, inputs, None, layer, inputs)
    out_node = layer
    expected_ext = Extract(fresh, node_out=out_node, example_inputs=inputs)
    ex = explorer(model, inputs, selected=get_layers(model), gradients=True, max_rate=0)
    model(**inputs).last_hidden_state.sum().backward()
    assert any(h["kind"] == "attention" for h in ex.hooks)  # capture on for attention layers
    assert ex._live.attention.latest("encoder.layer.0.attention.self") is not None
    steps = _stats_steps(ex)

    got = _user_view(model, inputs, None, layer, inputs)
    _same(expected, got)
    assert got["method"] == "export"  # transformers cannot be traced by torch.fx
    ext = Extract(model, node_out=out_node, example_inputs=inputs)
    assert len(ext.graph.nodes) == len(expected_ext.graph.nodes)
    with torch.no_grad():
        torch.testing.assert_close(ext(**inputs), expected_ext(**inputs))
    ex.show_nodes = True
    assert ex.nodes_error == ""
    assert ex.errors == []
    assert _stats_steps(ex) == steps


def test_gpt2_with_attention_selected_keeps_its_graph(explorer):
    pytest.importorskip("transformers")
    model = tiny_gpt2(n_positions=16, vocab_size=64)
    model.config.use_cache = False
    inputs = {"input_ids": torch.randint(0, 64, (1, 8))}
    expected = get_nodes(copy.deepcopy(model), example_inputs=inputs)
    ex = explorer(model, inputs, selected=get_layers(model), max_rate=0)
    with torch.no_grad():
        model(**inputs)
    assert ex._live.attention.latest(ex._live.attention.layers[0]) is not None
    assert get_nodes(model, example_inputs=inputs) == expected
    assert ex.errors == []


def test_fx_symbolic_trace_sees_no_hook_ops(explorer):
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    plain = torch.fx.symbolic_trace(copy.deepcopy(model)).graph
    ex = explorer(model, selected=["0", "1", "1.0", "1.1"], gradients=True, max_rate=0)
    graph = torch.fx.symbolic_trace(model).graph
    assert [n.op for n in graph.nodes] == [n.op for n in plain.nodes]
    assert ex.errors == [] and _stats_steps(ex) == {}


def test_four_reruns_leave_one_hook_per_layer_and_the_latest_reports():
    model = torchvision.models.resnet18(num_classes=10)
    selected = ["layer1", "layer2.0.conv1", "fc"]
    widgets = [Explorer(model, selected=selected, max_rate=0) for _ in range(4)]
    try:
        hooked = {n: len(m._forward_hooks) for n, m in model.named_modules() if m._forward_hooks}
        # the newest one's on the selected layers, and its live.nonfinite's on every module
        # that can make a value non-finite
        checked = {n for n, m in model.named_modules() if type(m) not in FINITE_IN_FINITE_OUT}
        assert hooked == {n: (n in checked) + (n in selected) for n in checked | set(selected)}
        assert len(model._forward_pre_hooks) == 1  # one step clock
        with torch.no_grad():
            model(torch.randn(1, 3, 64, 64))
        assert [bool(w.stats("fc")) for w in widgets] == [False, False, False, True]
        assert [w.replaced for w in widgets] == [REPLACED] * 3 + [""]
        assert [w.hooks for w in widgets[:3]] == [[], [], []]
        with pytest.raises(traitlets.TraitError, match="selected cannot change: Replaced"):
            widgets[0].selected = ["fc"]  # a replaced view cannot put hooks back
        assert len(model.fc._forward_hooks) == 2
    finally:
        for w in widgets:
            w.close()
    assert live_hooks() == []


def test_a_step_is_one_forward_of_the_model_with_its_mode(explorer):
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    ex = explorer(model, torch.ones(1, 3), selected=["0", "2"], gradients=True, max_rate=0)
    for i in range(3):
        model.train(i != 1)
        model(torch.ones(2, 3)).sum().backward()
    model[0](torch.ones(1, 3))  # a submodule alone: no new step
    out = ex.stats("0")["0/output"]
    assert out.steps == [0, 1, 2, 2] and out.training == [True, False, True, True]
    assert ex.stats("2")["2/output"].steps == [0, 1, 2]
    grads = ex.stats("2")["2/grad_output"]
    assert grads.steps == [0, 1, 2] and grads.training == [True, False, True]
    tree.output_shapes(model, torch.ones(1, 3))  # the package's own forward: never recorded
    assert ex.stats("2")["2/output"].steps == [0, 1, 2]
    item = ex._history.latest()[0]
    from surgeon_widgets.widget.wire import item as wire

    assert wire(item, 0)["training"] is True and wire(item, 0)["step"] == item.step


def test_compiled_model_names_and_records(explorer):
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = torch.compile(model)
    x = torch.randn(3, 4)
    compiled(x)  # compiled before the Explorer existed
    ex = explorer(compiled, x, selected=["1"], max_rate=0)
    assert [r["name"] for r in ex.rows] == ["0", "1", "2"]
    assert set(ex.shapes) == {"0", "1", "2"} and "torch.compile" in ex.notes[0]
    compiled(x)
    compiled(x)
    assert ex.stats("1")["1/output"].steps == [0, 1]
    ex.select(["2"])  # a new selection recompiles; the new layer reports
    compiled(x)
    assert ex.stats("2")["2/output"].steps == [2]
    assert ex.stats("1")["1/output"].steps == [0, 1]  # its hook is gone
    assert ex.errors == []


def test_compiled_model_never_compiles_the_hook_itself(explorer):
    """Under a whole-model compile dynamo breaks the graph at each hook; the hook's own frame
    then runs eagerly. Compiled, it took one compile per module type and shape (7 of dynamo's
    recompile limit of 8 for 12 layers of ResNet-18)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from surgeon_widgets.widget.runtime.compiled import compile_safe

    torch._dynamo.reset()
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 4)
    )
    compiled = torch.compile(model, backend="eager")
    ex = explorer(compiled, selected=["0", "1", "2", "3", "4"], max_rate=0)
    for _ in range(2):
        compiled(torch.randn(2, 3, 16, 16)).sum().backward()
    hook_code = compile_safe(lambda *args: None).__code__  # every hook's frame has this code
    assert _debug_get_cache_entry_list(hook_code) == []
    steps = {n: s.steps for n in ex.selected for s in ex.stats(n).values()}
    assert steps == {n: [0, 1] for n in ex.selected}
    assert ex.errors == []


def test_errors_merge_with_a_count_and_clear(explorer, monkeypatch, from_view):
    from surgeon_widgets.widget.live import hooks as live

    model = nn.Sequential(nn.Linear(2, 2))
    ex = explorer(model, selected=["0"], max_rate=0)

    def explode(_t):
        raise RuntimeError("reduction exploded\n  (a long torch-internal detail)")

    monkeypatch.setattr(live, "tensor_stats", explode)
    for _ in range(5):
        model(torch.ones(1, 2))
    assert len(ex.errors) == 1
    entry = ex.errors[0]
    assert entry["count"] == 5 and entry["layer"] == "0"
    assert "\n" not in entry["text"] and "0: the activation statistics failed" in entry["text"]
    assert "Deselect 0" in entry["text"] and "torch-internal detail" in entry["detail"]
    from_view(ex, {"type": "clear_errors"})
    assert ex.errors == []


def test_meta_model_says_meta_tensors_have_no_values(explorer):
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    ex = explorer(model, selected=["0"], max_rate=0)
    model(torch.ones(2, 4, device="meta"))
    assert ex.notes == [META] and "meta tensors have no values" in META
    assert ex.errors == [] and ex.stats("0") == {}


def test_invalid_max_rate_is_refused_visibly(explorer):
    ex = explorer(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(traitlets.TraitError, match="max_rate must be >= 0"):
        ex.max_rate = -3
    ex.set_state({"max_rate": -3})  # from the view
    assert ex.max_rate == 10.0
    assert any("max_rate must be >= 0" in e["text"] for e in ex.errors)
    with pytest.raises(traitlets.TraitError):
        Explorer(nn.Linear(1, 1), max_rate=-3)
