"""Every example of SEEDS.md, verbatim but for the import line, printing what SEEDS.md shows.

The models are SEEDS.md's, from ``toy_models`` (``SomeModel``, ``SomeModelFn``, ``Branchy``);
``SomeModelExtract`` keeps the README's ``layer3 = nn.Linear(1, 1)``.

Values are random (``torch.rand``, untrained weights), so printed tensors are matched by form:
shape, and ``grad_fn`` where the original shows it.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
import torch.nn as nn
from support.models import Branchy, SomeModel, SomeModelFn
from torch import fx

from surgeon_widgets import Extract, Inspect, get_layers, get_nodes, reset_tracer, set_tracer

try:  # the article's tools (seed 000): public if the package exports them
    from surgeon_widgets import FeatureExtractor, VerboseExecution, gradient_clipper
except ImportError:
    from surgeon_widgets.engine.hook_tools import (
        FeatureExtractor,
        VerboseExecution,
        gradient_clipper,
    )

torchvision_models = pytest.importorskip("torchvision.models")


def tensor_print(rows: int, cols: int, grad_fn: str | None) -> re.Pattern[str]:
    """How ``print`` shows a small float tensor of that shape, values left free."""
    number = r"\s*-?\d+\.\d+(e[+-]\d+)?"
    row = r"\[" + ",".join([number] * cols) + r"\]"
    body = r"tensor\(\[" + r",\s*".join([row] * rows) + r"\]"
    tail = rf", grad_fn=<{grad_fn}>\)" if grad_fn else r"\)"
    return re.compile(body + tail)


# ---------------------------------------------------------------------------------------------
# Seed 000: "How to use PyTorch hooks"


@pytest.fixture
def dummy_input():
    return torch.ones(10, 3, 224, 224)


@pytest.mark.slow
def test_verbose_execution(dummy_input, capsys):
    from torchvision.models import resnet50

    verbose_resnet = VerboseExecution(resnet50())
    _ = verbose_resnet(dummy_input)
    verbose_resnet.remove()
    assert capsys.readouterr().out.splitlines() == [
        "conv1: torch.Size([10, 64, 112, 112])",
        "bn1: torch.Size([10, 64, 112, 112])",
        "relu: torch.Size([10, 64, 112, 112])",
        "maxpool: torch.Size([10, 64, 56, 56])",
        "layer1: torch.Size([10, 256, 56, 56])",
        "layer2: torch.Size([10, 512, 28, 28])",
        "layer3: torch.Size([10, 1024, 14, 14])",
        "layer4: torch.Size([10, 2048, 7, 7])",
        "avgpool: torch.Size([10, 2048, 1, 1])",
        "fc: torch.Size([10, 1000])",
    ]


@pytest.mark.slow
def test_feature_extractor(dummy_input, capsys):
    from torchvision.models import resnet50

    resnet_features = FeatureExtractor(resnet50(), layers=["layer4", "avgpool"])
    features = resnet_features(dummy_input)

    print({name: output.shape for name, output in features.items()})
    resnet_features.remove()
    assert capsys.readouterr().out == (
        "{'layer4': torch.Size([10, 2048, 7, 7]), 'avgpool': torch.Size([10, 2048, 1, 1])}\n"
    )


@pytest.mark.slow
def test_gradient_clipper(dummy_input, capsys):
    from torchvision.models import resnet50

    clipped_resnet = gradient_clipper(resnet50(), 0.01)
    pred = clipped_resnet(dummy_input)
    loss = pred.log().mean()
    loss.backward()

    print(clipped_resnet.fc.bias.grad[:25])
    grad = clipped_resnet.fc.bias.grad
    clipped_resnet.remove()
    assert capsys.readouterr().out.startswith("tensor([")
    assert torch.isfinite(grad).all()
    assert grad.min() >= -0.01 and grad.max() <= 0.01
    assert (grad.abs() == 0.01).any(), "some gradient should have needed clipping"


# ---------------------------------------------------------------------------------------------
# Seed 001: surgeon-pytorch's README, Inspect


def test_get_layers(capsys):
    model = SomeModel()
    print(get_layers(model))  # ['layer1', 'layer2', 'layer3']
    assert capsys.readouterr().out == "['layer1', 'layer2', 'layer3']\n"


def test_inspect_one_layer(capsys):
    model = SomeModel()
    model_wrapped = Inspect(model, layer="layer2")
    x = torch.rand(1, 5)
    y, x2 = model_wrapped(x)
    print(x2)  # tensor([[-0.2726,  0.0910]], grad_fn=<AddmmBackward0>)
    # ours is a clone (safe from later in-place ops), so its grad_fn is CloneBackward0
    assert tensor_print(1, 2, r"\w+Backward0").fullmatch(capsys.readouterr().out.strip())
    torch.testing.assert_close(x2, model.layer2(model.layer1(x)))
    torch.testing.assert_close(y, model(x))


def test_inspect_several_layers(capsys):
    model = SomeModel()
    model_wrapped = Inspect(model, layer=["layer1", "layer2"])
    x = torch.rand(1, 5)
    y, [x1, x2] = model_wrapped(x)  # noqa: RUF059 (verbatim)
    print(x1)  # tensor([[ 0.1739,  0.3844, -0.4724]], grad_fn=<AddmmBackward0>)
    print(x2)  # tensor([[-0.2238,  0.0107]], grad_fn=<AddmmBackward0>)
    first, second = capsys.readouterr().out.strip().split("\n")
    assert tensor_print(1, 3, r"\w+Backward0").fullmatch(first)
    assert tensor_print(1, 2, r"\w+Backward0").fullmatch(second)
    torch.testing.assert_close(x1, model.layer1(x))
    torch.testing.assert_close(x2, model.layer2(x1))
    _, as_tuple = Inspect(model, layer=("layer1", "layer2"))(x)  # a tuple gives a tuple
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2


def test_inspect_named_layers(capsys):
    model = SomeModel()
    model_wrapped = Inspect(model, layer={"layer1": "x1", "layer2": "x2"})
    x = torch.rand(1, 5)
    y, layers = model_wrapped(x)  # noqa: RUF059 (verbatim)
    print(layers)
    out = capsys.readouterr().out
    assert out.startswith("{'x1': tensor([[") and "'x2': tensor([[" in out
    assert list(layers) == ["x1", "x2"]
    assert layers["x1"].shape == (1, 3) and layers["x2"].shape == (1, 2)


def test_inspect_keep_output():
    model = SomeModel()
    x = torch.rand(1, 5)
    y, x2 = Inspect(model, "layer2", keep_output=True)(x)
    only = Inspect(model, "layer2", keep_output=False)(x)
    torch.testing.assert_close(only, x2)
    torch.testing.assert_close(y, model(x))


# ---------------------------------------------------------------------------------------------
# Seed 001: Extract


class SomeModelExtract(SomeModelFn):
    """The README's Extract model: ``layer3 = nn.Linear(1, 1)``, which only the cut models run."""

    def __init__(self):
        super().__init__()
        self.layer3 = nn.Linear(1, 1)


def test_get_nodes(capsys):
    model = SomeModelExtract()
    print(get_nodes(model))  # ['x', 'layer1', 'relu', 'layer2', 'sigmoid', 'layer3', 'tanh']
    assert capsys.readouterr().out == (
        "['x', 'layer1', 'relu', 'layer2', 'sigmoid', 'layer3', 'tanh']\n"
    )


def test_extract_node_out(capsys):
    model = SomeModelExtract()
    model_ext = Extract(model, node_out="sigmoid")
    x = torch.rand(1, 5)
    sigmoid = model_ext(x)
    print(sigmoid)  # tensor([[0.5570, 0.3652]], grad_fn=<SigmoidBackward0>)
    assert tensor_print(1, 2, "SigmoidBackward0").fullmatch(capsys.readouterr().out.strip())
    torch.testing.assert_close(sigmoid, torch.sigmoid(model.layer2(torch.relu(model.layer1(x)))))


def test_extract_node_in(capsys):
    model = SomeModelExtract()
    model_ext = Extract(model, node_in="layer1", node_out="sigmoid")
    layer1 = torch.rand(1, 3)
    sigmoid = model_ext(layer1)
    print(sigmoid)  # tensor([[0.5444, 0.3965]], grad_fn=<SigmoidBackward0>)
    assert tensor_print(1, 2, "SigmoidBackward0").fullmatch(capsys.readouterr().out.strip())
    torch.testing.assert_close(sigmoid, torch.sigmoid(model.layer2(torch.relu(layer1))))


def test_extract_several_named_nodes(capsys):
    model = SomeModelExtract()
    model_ext = Extract(model, node_in={"layer1": "x"}, node_out={"sigmoid": "y1", "relu": "y2"})
    out = model_ext(x=torch.rand(1, 3))
    print(out)
    """
    {
        'y1': tensor([[0.4437, 0.7152]], grad_fn=<SigmoidBackward0>),
        'y2': tensor([[0.0555, 0.9014, 0.8297]]),
    }
    """
    printed = capsys.readouterr().out.strip()
    y1 = tensor_print(1, 2, "SigmoidBackward0").pattern
    y2 = tensor_print(1, 3, None).pattern
    assert re.fullmatch(rf"\{{'y1': {y1}, 'y2': {y2}\}}", printed, re.S), printed


def test_summary(capsys):
    model = Branchy()
    print(get_nodes(model))  # ['x', 'layer1a', 'layer1b', 'add', 'layer2']

    with pytest.warns(UserWarning, match="still needed"):  # ours also warns about the leak
        model_ext = Extract(model, node_in={"layer1a": "my_input"}, node_out={"add": "my_add"})
    print(model_ext.summary)  # {'input': ('x', 'my_input'), 'output': {'my_add': add}}

    out = model_ext(x=torch.rand(1, 5), my_input=torch.rand(1, 3))
    print(out)  # {'my_add': tensor([[ 0.3722, -0.6843]], grad_fn=<AddBackward0>)}

    nodes, summary, printed = capsys.readouterr().out.strip().split("\n")
    assert nodes == "['x', 'layer1a', 'layer1b', 'add', 'layer2']"
    assert summary == "{'input': ('x', 'my_input'), 'output': {'my_add': add}}"
    add = tensor_print(1, 3, "AddBackward0").pattern  # toy_models.Branchy: 3 features
    assert re.fullmatch(rf"\{{'my_add': {add}\}}", printed), printed


def test_extract_signature():
    params = list(inspect.signature(Extract).parameters.values())
    expected = [
        ("model", inspect.Parameter.empty),
        ("node_in", None),
        ("node_out", None),
        ("tracer", None),
        ("concrete_args", None),
        ("keep_output", None),
        ("share_modules", False),
    ]
    assert [(p.name, p.default) for p in params[: len(expected)]] == expected


def test_extract_keep_output_and_share_modules():
    model = SomeModelExtract()
    model.layer3 = nn.Linear(2, 1)  # the whole model must run to keep its output
    x = torch.rand(1, 5)
    y, sig = Extract(model, node_out="sigmoid", keep_output=True)(x)
    torch.testing.assert_close(y, model(x))
    torch.testing.assert_close(sig, torch.sigmoid(model.layer2(torch.relu(model.layer1(x)))))
    y = Extract(model)(x)  # no node_out: keep_output defaults to True, the model's output
    torch.testing.assert_close(y, model(x))
    shared = Extract(model, node_out="layer1", share_modules=True)
    copied = Extract(model, node_out="layer1")
    assert shared.layer1.weight is model.layer1.weight
    assert copied.layer1.weight is not model.layer1.weight


def test_set_tracer():
    class Whole(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return True  # every child module is one node

    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 1)))
    first = get_nodes(model)[0]  # the input (see test_differential for its name)
    assert get_nodes(model) == [first, "0", "1.0", "1.1"]
    set_tracer(Whole)
    try:
        assert get_nodes(model) == [first, "0", "1"]
        assert Extract(model, node_out="1")(torch.ones(1, 2)).shape == (1, 1)
    finally:
        reset_tracer()
    assert get_nodes(model) == [first, "0", "1.0", "1.1"]
    assert get_nodes(model, tracer=Whole) == [first, "0", "1"]
