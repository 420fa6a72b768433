"""The one naming scheme, pinned by golden lists on hand-built models."""

from __future__ import annotations

import pytest
import torch
from support.models import Repeated, SomeModelFn

from surgeon_widgets import Extract, UnknownNameError, get_nodes
from surgeon_widgets.engine.naming import Namer, base_name, closest, normalize_spec
from surgeon_widgets.engine.tracing import _export_trace


def test_golden_names_repeated_calls_and_underscores():
    assert get_nodes(Repeated()) == [
        "x",
        "block.lin",
        "block.act",
        "block.add",
        "relu",
        "block.lin_1",
        "block.act_1",
        "block.add_1",
        "relu_1",
        "layer_norm",
        "unsqueeze",
        "scaled_dot_product_attention",
        "squeeze",
    ]


def test_export_names_follow_the_same_scheme():
    exported = _export_trace(Repeated(), (torch.randn(2, 4),))
    assert exported.method == "export"
    assert exported.node_names() == get_nodes(Repeated())


def test_seeds_nodes():
    assert get_nodes(SomeModelFn()) == [
        "x", "layer1", "relu", "layer2", "sigmoid", "layer3", "tanh"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("node", "base"),
    [("add_2", "add"), ("layer_norm", "layer_norm"), ("_assert", "_assert"), ("conv2d", "conv2d")],
)
def test_base_name_keeps_underscores(node, base):
    assert base_name(node) == base


def test_namer_unique_even_when_module_names_collide():
    namer = Namer(taken=["relu_1"])
    assert [namer.name("", "relu") for _ in range(3)] == ["relu", "relu_2", "relu_3"]


def test_closest_and_error_message():
    assert closest("layr2", ["layer1", "layer2", "fc"])[0] == "layer2"
    error = UnknownNameError("layr2", ["layer1", "layer2"], "node")
    assert isinstance(error, KeyError)
    assert str(error).startswith("unknown node 'layr2'; closest valid: 'layer2'")


@pytest.mark.parametrize("spec", [3, None, {1: "a"}])
def test_normalize_spec_rejects_non_names(spec):
    with pytest.raises(TypeError, match=r"must be|entries must be"):
        normalize_spec(spec, "node_out")


def test_normalize_spec_rejects_empty():
    with pytest.raises(ValueError, match="empty"):
        normalize_spec([], "layer")


def test_surgeon_pytorchs_input_1_names_a_sequentials_input():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    assert get_nodes(model)[0] == "input"  # fx renames it input_1 (a builtin's name)
    x = torch.randn(5, 4)
    for name in ("input", "input_1"):
        cut = Extract(model, node_in=name, node_out="1")
        torch.testing.assert_close(cut(x), model[1](model[0](x)))
    with pytest.raises(UnknownNameError, match="closest valid: 'input'"):
        Extract(model, node_in="input_2", node_out="1")


def test_get_nodes_second_positional_is_tracer_and_says_so():
    model = SomeModelFn()
    with pytest.raises(TypeError, match="got a Tensor; example inputs go by keyword"):
        get_nodes(model, torch.ones(1, 5))
    with pytest.raises(TypeError, match=r"torch\.fx\.Tracer subclass or None, got <class .int.>"):
        get_nodes(model, int)
    assert get_nodes(model, example_inputs=torch.ones(1, 5)) == get_nodes(model)
