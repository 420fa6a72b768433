"""analyze_cut / suggest_fix: cut reports that match Extract, leaks and their minimal repair."""

from __future__ import annotations

import dataclasses
import itertools
import json
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.models import Branchy, SomeModelFn, tiny_bert
from torch import nn
from torchvision.models import resnet18

from surgeon_widgets import Extract, Inspect
from surgeon_widgets.engine.cut import analyze as cut_module
from surgeon_widgets.engine.cut.analyze import CutReport, analyze_cut, suggest_fix
from surgeon_widgets.engine.cut.extract import InputLeakWarning
from surgeon_widgets.engine.cut.mincut import min_vertex_cut
from surgeon_widgets.engine.naming import UnknownNameError
from surgeon_widgets.engine.tracing import trace

OPS = ("call_module", "call_function", "call_method")


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    return resnet18().eval()


@pytest.fixture(scope="module")
def resnet_trace(resnet):
    return trace(resnet)


def quiet_extract(model, node_in=None, node_out=None, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputLeakWarning)
        return Extract(model, node_in, node_out, **kwargs)


def assert_matches_extract(report: CutReport, extracted: Extract) -> None:
    assert report.inputs == extracted.summary["input"]
    assert report.leaks == extracted.summary.leaks
    assert report.params_kept == sum(p.numel() for p in extracted.parameters())
    assert report.nodes_kept == sum(n.op in OPS for n in extracted.graph.nodes)


RESNET_CUTS = [
    (None, "layer2"),
    ("layer1", "layer3"),
    ({"layer1.0.conv1": "a", "maxpool": "b"}, {"layer1.0": "o", "layer1.1.relu_1": "p"}),
    ("layer1.0.conv1", "layer1.0"),
    ("layer2.0.conv1", "fc"),
    (["layer3.0.conv1", "layer3.0.downsample.0"], ("layer4.0.add", "avgpool")),
    ("conv1", None),
]


def test_report_matches_extract_on_resnet(resnet, resnet_trace):
    for node_in, node_out in RESNET_CUTS:  # one test: the shared teardown's gc.collect is slow
        report = analyze_cut(resnet_trace, node_in, node_out)
        assert report.valid, report.problems
        assert report.method == "fx" and report.nodes_total == 69
        assert report.params_total == sum(p.numel() for p in resnet.parameters())
        assert_matches_extract(report, quiet_extract(resnet, node_in, node_out))


def test_residual_leak_and_fix(resnet, resnet_trace):
    report = analyze_cut(resnet_trace, "layer1.0.conv1", "layer1.0")
    assert report.leaks == {"x": ["conv1"]}
    assert report.inputs == ("x", "layer1_0_conv1")
    assert report.fix == ("maxpool",)
    assert report.valid  # a leak is legal: the cut model takes x too
    assert suggest_fix(resnet, "layer1.0.conv1", "layer1.0") == ["maxpool"]
    fixed = Extract(resnet, ["layer1.0.conv1", *report.fix], "layer1.0")
    assert fixed.summary.leaks == {}
    x = torch.randn(1, 3, 64, 64)
    feed = Extract(resnet, node_out={"layer1.0.conv1": "a", "maxpool": "b", "layer1.0": "y"})(x)
    torch.testing.assert_close(fixed(feed["a"], feed["b"]), feed["y"])


def test_module_name_and_its_last_node_overlap(resnet_trace):
    (problem,) = analyze_cut(resnet_trace, "layer1", "layer1.1.relu_1").problems
    assert problem.startswith("'layer1.1.relu_1' is both an output and an input ('layer1')")


def test_downsample_branch_fix(resnet, resnet_trace):
    report = analyze_cut(resnet_trace, "layer2.0.conv1", "fc")
    assert report.fix == ("layer2.0.downsample.1",)
    assert Extract(resnet, ["layer2.0.conv1", *report.fix], "fc").summary.leaks == {}


def test_seed_branch_model_leak():
    model = Branchy()
    report = analyze_cut(model, {"layer1a": "my_input"}, {"add": "my_add"})
    assert report.inputs == ("x", "my_input")
    assert report.leaks == {"x": ["layer1b"]}
    assert report.outputs == ("my_add",)
    assert report.fix == ("layer1b",)
    fixed = Extract(model, {"layer1a": "my_input", "layer1b": "b"}, {"add": "my_add"})
    assert fixed.summary.leaks == {} and fixed.summary["input"] == ("my_input", "b")


def test_bert_cut_reads_the_mask_it_needs_without_a_leak():
    """The block after the cut applies the attention mask: the cut takes it (no warning, no
    fix such as ``('to',)``) and, fed a padded mask, equals the model run."""
    torch.manual_seed(0)
    bert = tiny_bert(hidden_size=64, intermediate_size=128)
    mask = torch.ones(2, 8).long()
    mask[1, 5:] = 0
    inputs = {"input_ids": torch.randint(0, 100, (2, 8)), "attention_mask": mask}
    traced = trace(bert, example_inputs=inputs)
    report = analyze_cut(traced, {"encoder.layer.0": "h"}, "encoder.layer.1.output")
    assert report.method == "export" and report.valid
    assert report.inputs == ("attention_mask", "h")  # input_ids only gave shapes: read from h
    assert report.leaks == {} and report.fix is None
    assert suggest_fix(traced, {"encoder.layer.0": "h"}, "encoder.layer.1.output") == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cut = Extract(
            bert, {"encoder.layer.0": "h"}, "encoder.layer.1.output", example_inputs=inputs
        )
    assert cut.summary["input"] == ("attention_mask", "h") and cut.summary.leaks == {}
    with torch.no_grad():
        _, (h, expected) = Inspect(bert, ["encoder.layer.0", "encoder.layer.1.output"])(**inputs)
        h = h[0] if isinstance(h, tuple) else h
        by_name = cut(h=h, attention_mask=mask)
        like_the_model = cut(**inputs, h=h)  # input_ids is ignored: the cut does not read it
        unmasked = cut(h=h, attention_mask=torch.ones_like(mask))
    torch.testing.assert_close(by_name, expected)
    torch.testing.assert_close(like_the_model, expected)
    assert not torch.allclose(unmasked[1], expected[1])  # the mask really is applied
    assert analyze_cut(bert, "embeddings", "pooler").problems[0].startswith("could not trace")


BAD_CUTS = [
    ("layer1", "layer", "unknown node_out 'layer'; closest valid: 'layer3'"),
    ("layr1", "layer2", "unknown node_in 'layr1'; closest valid: 'layer1'"),
    ("layer1", "layer1", "'layer1' is both an output and an input"),
    ("layer2", "relu", "output 'relu' does not depend on any node_in"),
    ("layer2", "relu", "node_in 'layer2' is not used by any output"),
    (["layer1", "layer1"], "layer2", "node_in 'layer1' and 'layer1' name the same node"),
    (5, "layer2", "node_in must be a str, list, tuple or dict of names, not int"),
    ([], "layer2", "node_in is empty"),
    ({"layer1": "class"}, "layer2", "'class' cannot name an input (a Python keyword"),
]


def test_problems():
    traced = trace(SomeModelFn())
    for node_in, node_out, expected in BAD_CUTS:
        report = analyze_cut(traced, node_in, node_out)
        assert not report.valid
        assert any(expected in problem for problem in report.problems), report.problems


def test_new_input_named_like_a_leaking_input():
    report = analyze_cut(Branchy(), {"layer1a": "x"}, "add")
    assert report.problems == ("two inputs would both be called 'x'",)


@pytest.mark.parametrize(
    ("new_name", "message"),
    [("x", "'x' is already an input"), ("class", "Python keyword or 'self'")],
)
def test_extract_with_clashing_or_reserved_input_name(new_name, message):
    with pytest.raises(ValueError, match=message):
        quiet_extract(Branchy(), {"layer1a": new_name}, "add")


def test_renamed_input_is_not_a_leak():
    report = analyze_cut(Branchy(), {"x": "inp"}, "add")
    assert report.leaks == {} and report.inputs == ("inp",)
    assert quiet_extract(Branchy(), {"x": "inp"}, "add").summary.leaks == {}


def test_untraceable_model_reported_then_exported():
    class ShapeBranch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(5, 5), nn.Linear(5, 1)

        def forward(self, x):
            h = self.a(x) if x.dim() == 2 else x  # fx cannot branch on a Proxy
            return self.b(torch.relu(h))

    report = analyze_cut(ShapeBranch(), "a", "b")
    assert not report.valid and report.method is None
    assert "could not trace ShapeBranch" in report.problems[0]
    assert "example_inputs" in report.problems[0]
    report = analyze_cut(ShapeBranch(), "a", "b", example_inputs=torch.ones(2, 5))
    assert report.valid and report.method == "export" and report.inputs == ("a",)


def test_reuses_the_trace(monkeypatch):
    traced = trace(Branchy())
    monkeypatch.setattr(cut_module, "trace", lambda *a, **k: pytest.fail("traced again"))
    assert analyze_cut(traced, "layer1a", "add").fix == ("layer1b",)
    assert suggest_fix(traced, "layer1a", "add") == ["layer1b"]


def test_report_is_frozen_and_json():
    report = analyze_cut(Branchy(), {"layer1a": "a"}, ["add", "layer2"])
    data = json.loads(json.dumps(report.to_dict()))
    assert data["leaks"] == {"x": ["layer1b"]} and data["valid"] is True
    assert data["outputs"] == ["add", "layer2"] and data["fix"] == ["layer1b"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.valid = False  # type: ignore[misc]


def test_suggest_fix_raises_for_bad_names():
    with pytest.raises(
        UnknownNameError, match="unknown node_in 'layer1'; closest valid: 'layer1b'"
    ):
        suggest_fix(Branchy(), "layer1", "add")


def test_parameter_free_read_of_an_input_is_an_input_not_a_leak():
    """A residual ``a(x) + x`` cut at ``a`` needs x itself: an input of the cut, not a leak."""

    class Skip(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(3, 3)

        def forward(self, x):
            return self.a(x) + x

    report = analyze_cut(Skip(), "a", "add")
    assert report.inputs == ("x", "a") and report.leaks == {} and report.fix is None
    assert suggest_fix(Skip(), "a", "add") == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no InputLeakWarning
        cut = Extract(Skip(), "a", "add")
    x, h = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(cut(x=x, a=h), h + x)


def test_no_fix_when_an_output_recomputes_from_the_input_directly():
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

        def forward(self, x):
            return self.a(x).relu(), self.b(x)

    report = analyze_cut(Two(), "a", ["relu", "b"])
    assert report.leaks == {"x": ["b"]}  # the output b itself runs on x: nothing can replace it
    assert report.fix is None and suggest_fix(Two(), "a", ["relu", "b"]) is None


def test_fix_ignores_a_parameter_free_read_beside_the_leak():
    class Both(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

        def forward(self, x):
            return self.a(x) + self.b(x) + x

    report = analyze_cut(Both(), "a", "add_1")
    assert report.leaks == {"x": ["b"]} and report.fix == ("b",)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed = Extract(Both(), ["a", "b"], "add_1")
    assert fixed.summary["input"] == ("x", "a", "b") and fixed.summary.leaks == {}


NAMES = ["x", "layer1", "relu", "layer2", "sigmoid", "layer3", "tanh", "lyer2", "nope"]
# "x" as node_in: see test_renamed_input_is_not_a_leak (an engine bug)


@settings(max_examples=40, deadline=None)
@given(
    st.none() | st.lists(st.sampled_from(NAMES[1:]), max_size=3),
    st.none() | st.lists(st.sampled_from(NAMES), max_size=3),
)
def test_valid_report_means_extract_works(node_in, node_out):
    """Whatever the names, analyze_cut never raises; when it says valid, Extract agrees."""
    model = SomeModelFn()
    report = analyze_cut(model, node_in, node_out)
    if report.valid and (node_in or node_out):
        assert_matches_extract(report, quiet_extract(model, node_in, node_out))


def reaches(preds, sources, sinks, removed):
    """Whether any source's value flows into any sink's inputs, avoiding ``removed``."""
    users = {v: [w for w in preds if v in preds[w]] for v in preds}
    todo, seen = [s for s in sources], set(sources)
    while todo:
        v = todo.pop()
        for w in users[v]:
            if w in sinks:
                return True
            if w not in seen and w not in removed:
                seen.add(w)
                todo.append(w)
    return False


@settings(max_examples=60, deadline=None)
@given(
    st.integers(3, 8).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(st.booleans(), min_size=n * n, max_size=n * n))
    )
)
def test_min_vertex_cut_is_minimal(dag):
    """Against brute force on random DAGs: vertex 0 is the source, the last one the sink."""
    n, bits = dag
    preds = {v: [u for u in range(v) if bits[u * n + v]] for v in range(n)}
    cost = {v: None if v in (0, n - 1) else 1 for v in range(n)}
    cut = min_vertex_cut(preds, [0], [n - 1], cost)
    middle = range(1, n - 1)
    sizes = [
        len(c)
        for k in range(n - 1)
        for c in itertools.combinations(middle, k)
        if not reaches(preds, [0], {n - 1}, set(c))
    ]
    if not sizes:
        assert cut is None
    else:
        assert cut is not None and len(cut) == min(sizes)
        assert not reaches(preds, [0], {n - 1}, set(cut))


def test_min_vertex_cut_prefers_the_cut_nearest_the_sinks():
    chain = {"x": [], "a": ["x"], "b": ["a"], "c": ["b"], "y": ["c"]}
    cost = {"x": None, "a": 1, "b": 1, "c": 1, "y": None}
    assert min_vertex_cut(chain, ["x"], ["y"], cost) == ["c"]
    assert min_vertex_cut(chain, ["x"], ["y"], {**cost, "b": 0}) == []


class ShapeRead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        h = self.a(x)
        return h + self.b(x).reshape(h.size(0), -1)


def test_reading_only_the_shape_of_a_new_input_is_not_computing_from_it():
    from surgeon_widgets.engine.cut.leaks import value_downstream

    graph = trace(ShapeRead()).graph
    a = next(n for n in graph.nodes if n.meta.get("surgeon_name") == "a")
    fed = value_downstream([a])
    assert sorted(n.meta["surgeon_name"] for n in fed if n.op != "output") == ["a", "add"]
    report = analyze_cut(ShapeRead(), "a", "add")
    assert report.leaks == {"x": ["b"]}
    assert report.fix == ("reshape",)  # it reads h's size only: it may be fed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed = Extract(ShapeRead(), ["a", "reshape"], "add")
    x = torch.randn(2, 3)
    feed = Extract(ShapeRead(), node_out={"a": "a", "reshape": "r", "add": "y"})(x)
    torch.testing.assert_close(fixed(a=feed["a"], reshape=feed["r"]), feed["y"])
