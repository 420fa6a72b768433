"""Extract: forms and order, clear errors, pruning, copies, leaks, train/eval."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torchvision
from support.models import Branchy, Repeated, SomeModelFn
from torch import nn
from torchvision.models.feature_extraction import create_feature_extractor

from surgeon_widgets import Extract, Inspect, TracingError, UnknownNameError
from surgeon_widgets.engine.cut.extract import InputLeakWarning


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.fixture(scope="module")
def resnet18():
    return torchvision.models.resnet18().eval()


def test_outputs_in_the_order_asked():
    model = SomeModelFn()
    x = torch.rand(3, 5)
    relu = torch.relu(model.layer1(x))
    sigmoid = torch.sigmoid(model.layer2(relu))
    torch.testing.assert_close(Extract(model, node_out=["sigmoid", "relu"])(x), [sigmoid, relu])
    out = Extract(model, node_out=("sigmoid", "relu"))(x)
    assert isinstance(out, tuple)
    out = Extract(model, node_out={"sigmoid": "s", "relu": "r"})(x)
    assert list(out) == ["s", "r"]
    y, s = Extract(model, node_out="sigmoid", keep_output=True)(x)
    torch.testing.assert_close((y, s), (model(x), sigmoid))


@pytest.mark.parametrize(
    ("kwargs", "bad"),
    [
        ({"node_out": "sigmoidd"}, "sigmoidd"),
        ({"node_out": ["relu", "layer4"]}, "layer4"),
        ({"node_out": {"tanhh": "t"}}, "tanhh"),
        ({"node_in": "layer0", "node_out": "tanh"}, "layer0"),
        ({"node_in": ("relu", "lyer2"), "node_out": "tanh"}, "lyer2"),
    ],
)
def test_unknown_names_raise_one_error_type(kwargs, bad):
    with pytest.raises(UnknownNameError) as info:
        Extract(SomeModelFn(), **kwargs)
    assert repr(bad) in str(info.value) and "closest valid" in str(info.value)
    assert "get_nodes" in str(info.value)


def test_module_name_means_last_node_inside(resnet18):
    x = torch.rand(1, 3, 64, 64)
    _, layer1_0 = Inspect(resnet18, "layer1.0")(x)
    torch.testing.assert_close(Extract(resnet18, node_out="layer1.0")(x), layer1_0)


def test_prunes_to_what_the_cut_needs(resnet18):
    cut = Extract(resnet18, node_out="layer2")
    reference = create_feature_extractor(resnet18, ["layer2"])
    assert n_params(cut) == n_params(reference) < 1_000_000 < n_params(resnet18)
    assert not hasattr(cut, "fc") and not hasattr(cut, "layer3")
    x = torch.rand(2, 3, 64, 64)
    torch.testing.assert_close(cut(x), reference(x)["layer2"])


def test_copies_unless_sharing(resnet18):
    copied = Extract(resnet18, node_out="layer1")
    shared = Extract(resnet18, node_out="layer1", share_modules=True)
    assert copied.conv1.weight.data_ptr() != resnet18.conv1.weight.data_ptr()
    assert shared.conv1.weight is resnet18.conv1.weight


def test_shared_module_stays_shared_in_copy():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = self.a

        def forward(self, x):
            return self.b(self.a(x))

    model = Tied()
    cut = Extract(model, node_out="a_1")
    assert n_params(cut) == 12  # one copy of the tied weights
    x = torch.rand(2, 3)
    torch.testing.assert_close(cut(x), model(x))


def test_pickle_and_deepcopy_round_trips(resnet18):
    with pytest.warns(InputLeakWarning):
        cut = Extract(Branchy(), node_in={"layer1a": "my_input"}, node_out={"add": "my_add"})
    x, a = torch.rand(2, 5), torch.rand(2, 3)
    expected = cut(x=x, my_input=a)
    for clone in (pickle.loads(pickle.dumps(cut)), copy.deepcopy(cut)):
        assert isinstance(clone, Extract)
        assert repr(clone.summary) == repr(cut.summary)
        assert clone.summary.leaks == {"x": ["layer1b"]}
        torch.testing.assert_close(clone(x=x, my_input=a), expected)
    big = pickle.loads(pickle.dumps(Extract(resnet18, node_out="layer2")))
    assert n_params(big) == n_params(create_feature_extractor(resnet18, ["layer2"]))


def test_leak_warning_and_summary():
    with pytest.warns(InputLeakWarning, match=r"'x' is still needed .* through 'layer1b'"):
        cut = Extract(Branchy(), node_in={"layer1a": "my_input"}, node_out={"add": "my_add"})
    assert repr(cut.summary) == "{'input': ('x', 'my_input'), 'output': {'my_add': add}}"
    assert cut.summary.leaks == {"x": ["layer1b"]}


def test_no_leak_warning_for_a_clean_cut(recwarn):
    cut = Extract(SomeModelFn(), node_in="layer1", node_out="sigmoid")
    assert cut.summary.leaks == {}
    assert not [w for w in recwarn if issubclass(w.category, InputLeakWarning)]


def test_same_node_in_and_out_is_identity():
    cut = Extract(SomeModelFn(), node_in="relu", node_out="relu")
    x = torch.rand(2, 3)
    torch.testing.assert_close(cut(x), x)


class ModeDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if self.training else y


def test_train_eval_mode_dependent_graph_raises():
    cut = Extract(ModeDependent().eval())
    with pytest.raises(RuntimeError, match=r"traced in eval mode .* build it again"):
        cut.train()
    cut.eval()  # same mode: fine


def test_train_eval_switch_allowed_when_graph_does_not_depend_on_mode(resnet18):
    cut = Extract(resnet18, node_out="layer1")
    cut.train()
    x = torch.rand(4, 3, 64, 64)
    train_out = cut(x)
    cut.eval()
    assert not torch.allclose(train_out, cut(x))  # BatchNorm really switched mode


def test_untraceable_model_error_names_line_and_suggests_inspect():
    class Dynamic(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x

    with pytest.raises(TracingError, match=r"(?s)torch.fx.*torch.export: not tried.*Inspect"):
        Extract(Dynamic(), node_out="x")


def test_repeated_calls_are_distinct_nodes():
    model = Repeated()
    x = torch.randn(2, 4)
    _, (first, second) = Inspect(model, ["block", "block_1"])(x)
    torch.testing.assert_close(Extract(model, node_out="block.add")(x), first)
    torch.testing.assert_close(Extract(model, node_out="block.add_1")(x), second)
    torch.testing.assert_close(Extract(model, node_out="block_1")(x), second)


def test_when_every_tracer_fails_the_error_gives_both_reasons_and_the_line(capfd):
    class Dynamic(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x

    with pytest.raises(TracingError) as info:
        Extract(Dynamic(), node_out="x", example_inputs=(torch.ones(2),))
    message = str(info.value)
    assert "torch.fx: TraceError" in message and "torch.export: " in message
    assert "test_extract.py" in message and "in forward" in message
    assert "Inspect(model" in message
    assert "def forward" not in capfd.readouterr().err  # torch's partial graph dump is hidden


class BlockLeafTracer(torch.fx.Tracer):
    def is_leaf_module(self, module, qualname):
        return type(module).__name__ == "Block" or super().is_leaf_module(module, qualname)


def test_tracer_argument_and_default_tracer():
    from surgeon_widgets import get_nodes, reset_tracer, set_tracer

    model = Repeated()
    assert "block_1" in get_nodes(model, tracer=BlockLeafTracer)
    assert "block.add" not in get_nodes(model, tracer=BlockLeafTracer)
    set_tracer(BlockLeafTracer)
    try:
        assert get_nodes(model)[:3] == ["x", "block", "relu"]
        x = torch.randn(2, 4)
        _, expected = Inspect(model, "block_1")(x)
        torch.testing.assert_close(Extract(model, node_out="block_1")(x), expected)
    finally:
        reset_tracer()
    assert "block.add" in get_nodes(model)
    with pytest.raises(TypeError, match="Tracer subclass"):
        set_tracer(object)


def test_unused_node_in_warns():
    from surgeon_widgets.engine.cut.extract import UnusedInputWarning

    with pytest.warns(UnusedInputWarning, match="node_in 'layer2' feeds none of the outputs"):
        cut = Extract(SomeModelFn(), node_in="layer2", node_out="relu")
    assert cut.summary["input"] == ("x",)


def test_new_input_named_like_an_internal_node():
    from support.models import Block

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            y = self.block(x)  # its add is fx's 'add', public 'block.add'
            z = y + x  # fx's 'add_1', public 'add'
            return z * y

    model = Residual()
    x, z = torch.randn(2, 4), torch.randn(2, 4)
    cut = Extract(model, node_in="add", node_out="mul")
    assert "add" in cut.summary["input"]
    _, y = Inspect(model, "block")(x)
    torch.testing.assert_close(cut(x=x, add=z), z * y)
