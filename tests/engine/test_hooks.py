"""The article's three hook tools on torchvision resnet50, and the hook registry."""

from __future__ import annotations

import pytest
import torch
import torchvision
from support.models import SomeModel

from surgeon_widgets.hooks import (
    FeatureExtractor,
    HookRegistry,
    VerboseExecution,
    gradient_clipper,
    live_hooks,
)

SEEDS_SHAPES = """\
conv1: torch.Size([10, 64, 112, 112])
bn1: torch.Size([10, 64, 112, 112])
relu: torch.Size([10, 64, 112, 112])
maxpool: torch.Size([10, 64, 56, 56])
layer1: torch.Size([10, 256, 56, 56])
layer2: torch.Size([10, 512, 28, 28])
layer3: torch.Size([10, 1024, 14, 14])
layer4: torch.Size([10, 2048, 7, 7])
avgpool: torch.Size([10, 2048, 1, 1])
fc: torch.Size([10, 1000])
"""


@pytest.fixture(scope="module")
def resnet50():
    return torchvision.models.resnet50().eval()


def test_verbose_execution_prints_seeds_shapes(resnet50, capsys):
    verbose = VerboseExecution(resnet50)
    with torch.no_grad():
        verbose(torch.ones(10, 3, 224, 224))
    assert capsys.readouterr().out == SEEDS_SHAPES
    verbose.remove()
    assert all(not m._forward_hooks for m in resnet50.modules())


def test_feature_extractor_seeds_shapes(resnet50):
    extractor = FeatureExtractor(resnet50, layers=["layer4", "avgpool"])
    with torch.no_grad():
        features = extractor(torch.ones(10, 3, 224, 224))
    assert {k: v.shape for k, v in features.items()} == {
        "layer4": torch.Size([10, 2048, 7, 7]),
        "avgpool": torch.Size([10, 2048, 1, 1]),
    }
    extractor.remove()


def test_gradient_clipper_clamps_and_removes(resnet50):
    clipped = gradient_clipper(resnet50, 0.01)
    loss = clipped(torch.ones(2, 3, 224, 224)).log().mean()
    loss.backward()
    grad = clipped.fc.bias.grad
    assert grad.abs().max() <= 0.01 and grad.abs().max() > 0
    clipped.remove()
    resnet50.zero_grad()
    (resnet50.fc(torch.ones(2, 2048)) * 1000).sum().backward()
    assert resnet50.fc.bias.grad.abs().max() > 0.01  # unclipped once removed
    resnet50.zero_grad()


def test_gradient_clipper_rejects_bad_value():
    with pytest.raises(ValueError, match="val > 0"):
        gradient_clipper(SomeModel(), 0)


def test_registry_lists_and_removes_on_exit():
    model = SomeModel()
    with HookRegistry("test") as hooks:
        hooks.forward(model.layer1, lambda *a: None, name="layer1")
        hooks.forward_pre(model.layer2, lambda *a: None, name="layer2")
        hooks.tensor(model.layer3.weight, lambda g: g, name="layer3.weight")
        assert hooks.list() == [
            ("forward", "layer1"),
            ("forward_pre", "layer2"),
            ("tensor", "layer3.weight"),
        ]
        assert "forward=1" in repr(hooks) and len(live_hooks()) == 3
        assert hooks.remove("layer2") == 1
    assert not model.layer1._forward_hooks and not model.layer2._forward_pre_hooks
    assert live_hooks() == []


def test_registry_removes_when_body_raises():
    model = SomeModel()
    with pytest.raises(RuntimeError), HookRegistry("test") as hooks:
        hooks.forward(model.layer1, lambda *a: None)
        raise RuntimeError
    assert not model.layer1._forward_hooks
