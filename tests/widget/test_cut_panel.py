"""Explorer cut panel (Python side): node_in/out sync, report, fix, code, submodel, magics."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torchvision
from support.models import SomeModel, tiny_bert
from torch import fx, nn

from surgeon_widgets.engine.cut.surgery import input_identifier
from surgeon_widgets.engine.tracing import NAME, trace
from surgeon_widgets.widget import Explorer
from surgeon_widgets.widget.views.cut_panel import NO_INSERT, normalize_names


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(5, 3), nn.Linear(5, 3)

    def forward(self, x):
        return torch.add(self.a(x), self.b(x))


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[-1] == 4:  # control flow on a shape: torch.fx fails, torch.export does not
            return self.fc(x)
        return x


def node_values(model: nn.Module, example_inputs) -> tuple[dict, object]:
    """Every named node's value in a full forward pass (a torch.fx Interpreter over the trace)."""
    traced = trace(model, example_inputs=example_inputs)
    values: dict[fx.Node, object] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n):
            values[n] = out = super().run_node(n)
            return out

    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    if isinstance(example_inputs, dict):
        args = [example_inputs[n.meta[NAME]] for n in placeholders]
    else:
        args = [example_inputs]
    with torch.no_grad():
        Recorder(traced.module).run(*args)
    return values, traced


def cut_inputs(ex: Explorer, values: dict, traced, example_inputs) -> dict:
    """Keyword arguments for the cut model: node values for new inputs, originals as given."""
    originals = example_inputs if isinstance(example_inputs, dict) else {"x": example_inputs}
    new = {input_identifier(key): values[traced.resolve(name)] for name, key in ex.node_in.items()}
    return {n: new[n] if n in new else originals[n] for n in ex.cut_report["inputs"]}


def as_list(out) -> list:
    if isinstance(out, torch.Tensor):  # a single node_out is written as a str: one tensor
        return [out]
    return list(out.values()) if isinstance(out, dict) else list(out)


def test_node_in_out_normalise_to_one_wire_form_and_sync(make):
    ex = make(SomeModel())
    assert ex.cut_report == {} and ex.code == ""
    ex.node_in = "layer1"
    ex.node_out = ["layer3"]
    assert ex.node_in == {"layer1": "layer1"} and ex.node_out == {"layer3": "layer3"}
    assert ex.cut_report["valid"] and ex.cut_report["inputs"] == ["layer1"]
    assert "node_in='layer1', node_out='layer3'" in ex.code
    # the front end sets the dict form (a rename), as a comm message would
    ex.set_state({"node_in": {"layer1": "h"}})
    assert ex.cut_report["inputs"] == ["h"] and "node_in={'layer1': 'h'}" in ex.code
    state = ex.get_state()
    assert state["node_in"] == {"layer1": "h"} and state["cut_report"]["valid"]
    json.dumps(state["cut_report"])
    assert normalize_names({"a": " "}, "node_in") == {"a": "a"}  # an emptied rename keeps the name
    with pytest.raises(Exception, match="list of node names"):
        ex.node_in = 3


def test_leaky_cut_reports_the_leak_and_the_fix_applies_by_message(make, from_view):
    ex = make(Branchy())
    ex.node_in, ex.node_out = ["a"], ["add"]
    report = ex.cut_report
    assert report["leaks"] == {"x": ["b"]} and report["fix"] == ["b"] and report["valid"]
    from_view(ex, {"type": "cut_apply_fix"})
    assert ex.node_in == {"a": "a", "b": "b"}
    assert ex.cut_report["leaks"] == {} and ex.cut_report["inputs"] == ["a", "b"]


@pytest.mark.parametrize(
    ("node_in", "node_out", "expected"),
    [
        (["layer2"], ["layer1"], "does not depend on any node_in"),
        (["layer2"], ["layer2"], "both an output and an input"),
        (["layer9"], ["layer3"], "unknown node_in 'layer9'"),
    ],
)
def test_bad_cuts_become_problems_not_tracebacks(make, node_in, node_out, expected):
    ex = make(SomeModel())
    ex.node_in, ex.node_out = node_in, node_out
    assert not ex.cut_report["valid"]
    assert any(expected in p for p in ex.cut_report["problems"]), ex.cut_report["problems"]
    assert ex.code.startswith("# not a valid cut yet")
    with pytest.raises(ValueError, match="not valid"):
        ex.submodel()


def test_model_changed_after_tracing_is_traced_again(make):
    model = SomeModel()
    ex = make(model)
    ex.node_in, ex.node_out = ["layer2"], ["layer3"]
    assert ex.cut_report["valid"]
    model.layer2 = nn.Sequential(nn.Linear(3, 2))  # layer2 is now a container: new node names
    ex.node_in, ex.node_out = ["layer1"], ["layer3", "layer2.0"]  # a name the new model has
    assert ex.cut_report["valid"], ex.cut_report["problems"]
    model.layer2 = nn.Linear(3, 2)  # back to a plain layer: 'layer2.0' is gone
    ex.node_out = ["layer2.0"]
    assert any("unknown node_out 'layer2.0'" in p for p in ex.cut_report["problems"])


def test_untraceable_model_gives_a_clear_message(make):
    ex = make(Untraceable())
    ex.node_out = ["fc"]
    (problem,) = ex.cut_report["problems"]
    assert problem.startswith("the model cannot be traced") and "torch.fx" in problem
    ex2 = make(Untraceable(), torch.ones(1, 4))  # the export fallback takes the branch it saw
    ex2.node_out = ["fc"]
    assert ex2.cut_report["valid"] and ex2.cut_report["method"] == "export"


def test_code_names_the_users_variable_and_includes_inspect(make):
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    net = SomeModel()
    shell.user_ns["net"] = net
    try:
        ex = make(net, selected=["layer1"])
        assert "inspected = Inspect(net, layer=['layer1'])" in ex.code
        ex.node_out = ["layer2"]
        assert ex.code.startswith("from surgeon_widgets import Extract, Inspect\n")
        assert "cut_model = Extract(net, node_out='layer2')" in ex.code
        shell.user_ns.pop("net")
        ex.node_out = ["layer3"]
        assert "Extract(model, node_out='layer3')" in ex.code
    finally:
        shell.user_ns.pop("net", None)


def test_to_cell_and_insert_without_ipylab(make, monkeypatch, from_view):
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    ex = make(SomeModel(), selected=["layer1"])
    seen = []
    monkeypatch.setattr(shell, "set_next_input", lambda text, replace=False: seen.append(text))
    ex.to_cell()  # no cut: the selected layers' Inspect call
    assert seen == [ex.code] and "Inspect(model, layer=['layer1'])" in ex.code
    ex.node_out = ["layer2"]
    # what the panel shows, Copy copies and Insert inserts: one code, the cut and the layers
    assert ex.code == (
        "from surgeon_widgets import Extract, Inspect\n\n"
        "cut_model = Extract(model, node_out='layer2')\n"
        "inspected = Inspect(model, layer=['layer1'])"
    )
    assert ex.cut_report["code"] == ex.code
    ex.to_cell()
    assert seen[-1] == ex.code
    monkeypatch.setitem(__import__("sys").modules, "ipylab", None)  # not installed
    from_view(ex, {"type": "insert_cell", "code": ex.code})
    assert ex.sent[-1][0] == {"type": "insert_result", "ok": False, "message": NO_INSERT}


def check_grid(make, model, example_inputs, cuts):
    """For each cut: submodel outputs = full model's values at node_out; exec'd code = submodel."""
    values, traced = node_values(model, example_inputs)
    ex = make(model, example_inputs)
    ex.show_nodes = True
    for node_in, node_out in cuts:
        ex.node_in, ex.node_out = node_in, node_out
        assert ex.cut_report["valid"], (node_in, node_out, ex.cut_report["problems"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # leak warnings: the report lists them already
            sub = ex.submodel()
            namespace = {"model": model, "example_inputs": example_inputs}
            exec(ex.code, namespace)
        kwargs = cut_inputs(ex, values, traced, example_inputs)
        with torch.no_grad():
            got, again = as_list(sub(**kwargs)), as_list(namespace["cut_model"](**kwargs))
        expected = [values[traced.resolve(name)] for name in ex.node_out]
        for a, b, c in zip(got, again, expected, strict=True):
            torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_grid_of_cuts_on_resnet18(make):
    model = torchvision.models.resnet18().eval()
    cuts = [
        (None, ["layer2"]),
        (["layer1"], ["layer3", "layer2.1.relu_1"]),
        (["layer2.0.conv1"], ["layer3"]),  # leaks x through conv1: x is still an input
        ({"layer2.0.conv1": "h", "layer2.0.downsample.1": "skip"}, {"layer3": "feat"}),
        (["layer4"], {"fc": "logits"}),
    ]
    check_grid(make, model, torch.randn(1, 3, 64, 64), cuts)


def test_grid_of_cuts_on_bert_config(make):
    model = tiny_bert(hidden_size=64, intermediate_size=128)
    inputs = {"input_ids": torch.randint(0, 100, (1, 8))}
    cuts = [
        (None, ["encoder.layer.0.intermediate"]),
        (["embeddings"], ["encoder.layer.1"]),
        ({"encoder.layer.0": "h"}, {"pooler": "pooled"}),
    ]
    check_grid(make, model, inputs, cuts)


def test_magics_display_an_explorer(make):
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.user_ns.update(net=SomeModel(), xs=torch.ones(2, 5))
    try:
        shell.run_line_magic("load_ext", "surgeon_widgets.ipython_ext")
        ex = shell.run_line_magic("surgeon", "net --example-inputs xs --nodes")
        try:
            assert (
                isinstance(ex, Explorer)
                and ex.show_nodes
                and ex.shapes["layer1"]["shape"] == [2, 3]
            )
            with pytest.raises(ValueError, match="no model 'nope'"):
                shell.run_line_magic("surgeon", "nope")
            with pytest.raises(ValueError, match="unrecognized arguments"):
                shell.run_line_magic("surgeon", "net --bogus")
            shell.user_ns["ex"] = ex
            ex.node_out = ["layer2"]
            seen = []
            shell.set_next_input = lambda text, replace=False: seen.append(text)
            shell.run_line_magic("surgeon_cell", "ex")
            assert seen == [ex.code]
            assert "Extract(net, node_out='layer2', example_inputs=xs)" in ex.code
        finally:
            ex.close()
            del shell.set_next_input
    finally:
        shell.run_line_magic("unload_ext", "surgeon_widgets.ipython_ext")
        for key in ("net", "xs", "ex"):
            shell.user_ns.pop(key, None)


def test_insert_through_ipylab_runs_the_notebook_commands(make, monkeypatch, from_view):
    import sys
    import types

    calls = []

    class FrontEnd:
        def __init__(self):
            self.commands = types.SimpleNamespace(execute=lambda *a: calls.append(a))

        def on_ready(self, callback):  # the front end answers "lab_ready" later; here at once
            callback()

    monkeypatch.setitem(sys.modules, "ipylab", types.SimpleNamespace(JupyterFrontEnd=FrontEnd))
    ex = make(SomeModel())
    ex.node_out = ["layer2"]
    from_view(ex, {"type": "insert_cell", "code": ex.code})
    assert calls == [
        ("notebook:insert-cell-below",),
        ("notebook:replace-selection", {"text": ex.code}),
    ]
    reply, _ = ex.sent[-1]
    assert reply["type"] == "insert_result" and reply["ok"]


def test_load_ext_surgeon_widgets():
    import surgeon_widgets

    if not hasattr(surgeon_widgets, "load_ipython_extension"):
        pytest.skip("surgeon_widgets/__init__.py does not define load_ipython_extension yet")
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "surgeon_widgets")
    try:
        magics = set(shell.magics_manager.magics["line"])
        assert {"surgeon", "surgeon_code", "surgeon_cell"} <= magics
    finally:
        shell.run_line_magic("unload_ext", "surgeon_widgets")


def test_graph_nodes_never_reach_inspect_code_and_one_trace_serves_the_panel(make, monkeypatch):
    from surgeon_widgets.engine import tracing

    calls = []
    real = tracing._trace_uncached
    monkeypatch.setattr(
        tracing, "_trace_uncached", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    model = tiny_bert()
    inputs = {"input_ids": torch.randint(0, 100, (1, 8))}
    ex = make(model, inputs)
    ex.show_nodes = True  # the tree's node rows
    node = next(r["name"] for r in ex.rows if r["kind"] == "node" and r["cls"] != "input")
    ex.selected = ["encoder.layer.0", node]
    ex.node_in, ex.node_out = {"encoder.layer.0": "h"}, ["encoder.layer.1"]  # the cut report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sub = ex.submodel()
        namespace = {"model": model, "example_inputs": inputs}
        exec(ex.code, namespace)  # the generated code runs
    assert "inspected = Inspect(model, layer=['encoder.layer.0'])" in ex.code, ex.code
    assert "node_out='encoder.layer.1'" in ex.code
    assert sub.summary["input"] == ("h",)
    assert len(calls) == 1, "node rows, cut report, code and submodel share one trace"
