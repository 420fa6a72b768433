"""Inspect: values as produced (clone-safe), gradients flow, every call, no hook left."""

from __future__ import annotations

import threading

import pytest
import torch
import torchvision
from support.models import Raises, Repeated, SomeModel

from surgeon_widgets import Extract, Inspect, UnknownNameError, get_layers


@pytest.fixture(scope="module")
def resnet18():
    return torchvision.models.resnet18().eval()


def test_forms_and_order():
    model = SomeModel()
    x = torch.rand(2, 5)
    x1, x2 = model.layer1(x), model.layer2(model.layer1(x))
    y, got = Inspect(model, layer=["layer2", "layer1"])(x)
    torch.testing.assert_close(got, [x2, x1])
    _, got = Inspect(model, layer=("layer2", "layer1"))(x)
    assert isinstance(got, tuple)
    _, got = Inspect(model, layer={"layer2": "b", "layer1": "a"})(x)
    assert list(got) == ["b", "a"]
    torch.testing.assert_close(got["a"], x1)
    got = Inspect(model, layer="layer2", keep_output=False)(x)
    torch.testing.assert_close(got, x2)
    torch.testing.assert_close(y, model(x))


def test_values_unaffected_by_later_inplace_ops(resnet18):
    x = torch.rand(1, 3, 64, 64)
    _, bn2 = Inspect(resnet18, "layer1.0.bn2")(x)
    assert bn2.min() < 0
    torch.testing.assert_close(bn2, Extract(resnet18, node_out="layer1.0.bn2")(x))


def test_gradients_flow_through_captured_values():
    model = SomeModel()
    _, x1 = Inspect(model, "layer1")(torch.rand(4, 5))
    x1.pow(2).sum().backward()
    assert model.layer1.weight.grad is not None and model.layer1.weight.grad.abs().sum() > 0
    assert model.layer3.weight.grad is None


def test_every_call_of_a_module_called_twice():
    model = Repeated()
    x = torch.randn(2, 4)
    _, calls = Inspect(model, "relu", all_calls=True)(x)
    assert len(calls) == 2
    _, (first, second) = Inspect(model, ["relu", "relu_1"])(x)
    torch.testing.assert_close([first, second], calls)
    torch.testing.assert_close(second, Extract(model, node_out="relu_1")(x))
    with pytest.raises(LookupError, match="ran 2 time"):
        Inspect(model, "relu_2")(x)


@pytest.mark.parametrize("bad", ["layer4", ["layer1", "layr2"], {"layer9": "a"}])
def test_unknown_names_raise_with_suggestions(bad):
    with pytest.raises(UnknownNameError, match="closest valid: 'layer"):
        Inspect(SomeModel(), bad)


def test_no_hook_left_when_model_raises():
    model = Raises()
    with pytest.raises(RuntimeError, match="boom"):
        Inspect(model, "layer1")(torch.rand(1, 5))
    assert not model.layer1._forward_hooks


def test_threads_get_their_own_values():
    model = SomeModel()
    inspect = Inspect(model, ["layer1", "layer2"])
    inputs = [torch.full((1, 5), float(i)) for i in range(8)]
    results: dict[int, object] = {}

    def run(i):
        for _ in range(20):
            results[i] = inspect(inputs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (_, (x1, x2)) in results.items():
        torch.testing.assert_close(x1, model.layer1(inputs[i]))
        torch.testing.assert_close(x2, model.layer2(model.layer1(inputs[i])))
    assert not model.layer1._forward_hooks and not model.layer2._forward_hooks


def test_nested_inspect():
    model = SomeModel()
    outer = Inspect(Inspect(model, "layer1"), "model.layer2")
    (_, x1), x2 = outer(torch.rand(1, 5))
    assert x1.shape == (1, 3) and x2.shape == (1, 2)


def test_get_layers_is_named_modules_but_root(resnet18):
    assert get_layers(SomeModel()) == ["layer1", "layer2", "layer3"]
    assert get_layers(resnet18)[:3] == ["conv1", "bn1", "relu"]
