"""The hooks article's three tools, each keeping its handles and offering ``remove()``.

* :class:`VerboseExecution` prints each child layer's output shape as data flows through.
* :class:`FeatureExtractor` returns ``{layer: output}`` for the named layers.
* :func:`gradient_clipper` clamps every parameter's gradient during ``backward()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor, nn

from .inspect import resolve_layer, snapshot
from .registry import HookRegistry

__all__ = ["FeatureExtractor", "GradientClipper", "VerboseExecution", "gradient_clipper"]


def _describe(output: Any) -> str:
    if isinstance(output, Tensor):
        return str(output.shape)
    if isinstance(output, (tuple, list)):
        return "(" + ", ".join(_describe(o) for o in output) + ")"
    return type(output).__name__


class VerboseExecution(nn.Module):
    """Wrap ``model``; every call prints ``name: shape`` for each direct child, in call order.

    >>> m = VerboseExecution(nn.Sequential(nn.Linear(3, 2), nn.ReLU()))
    >>> _ = m(torch.ones(4, 3))
    0: torch.Size([4, 2])
    1: torch.Size([4, 2])
    >>> m.remove()
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.hooks = HookRegistry("VerboseExecution")
        for name, layer in model.named_children():
            self.hooks.forward(layer, self._printer(name), name=name)

    @staticmethod
    def _printer(name: str):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            print(f"{name}: {_describe(output)}")

        return hook

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def remove(self) -> None:
        """Remove every hook this wrapper added; ``model`` is as it was."""
        self.hooks.remove()


class FeatureExtractor(nn.Module):
    """A module whose forward returns ``{layer: output}`` for the named layers (any depth).

    Outputs are cloned, so later in-place ops in the model cannot change them.

    >>> fe = FeatureExtractor(nn.Sequential(nn.Linear(3, 2), nn.ReLU()), layers=["0"])
    >>> {k: v.shape for k, v in fe(torch.ones(4, 3)).items()}
    {'0': torch.Size([4, 2])}
    >>> fe.remove()
    """

    def __init__(self, model: nn.Module, layers: Iterable[str]) -> None:
        super().__init__()
        self.model = model
        self.layers = list(layers)
        self._features: dict[str, Tensor] = {}
        self.hooks = HookRegistry("FeatureExtractor")
        for name in self.layers:
            module, _, _ = resolve_layer(model, name)
            self.hooks.forward(module, self._saver(name), name=name)

    def _saver(self, name: str):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self._features[name] = snapshot(output)

        return hook

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Tensor]:
        self._features = {}
        self.model(*args, **kwargs)
        return {name: self._features[name] for name in self.layers if name in self._features}

    def remove(self) -> None:
        """Remove every hook this extractor added."""
        self.hooks.remove()


class GradientClipper(nn.Module):
    """``model`` with a tensor hook on every parameter clamping its gradient to ``[-val, val]``.

    Attribute access falls through to ``model`` (``clipped.fc.bias.grad``).
    """

    def __init__(self, model: nn.Module, val: float) -> None:
        super().__init__()
        if val <= 0:
            raise ValueError(f"gradient_clipper needs val > 0, got {val}")
        self.model = model
        self.val = float(val)
        self.hooks = HookRegistry("gradient_clipper")
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                self.hooks.tensor(parameter, self._clamp, name=name)

    def _clamp(self, grad: Tensor) -> Tensor:
        return grad.clamp(-self.val, self.val)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_modules"]["model"], name)

    def remove(self) -> None:
        """Remove the clamping hooks; gradients flow unclipped again."""
        self.hooks.remove()


def gradient_clipper(model: nn.Module, val: float) -> GradientClipper:
    """Clamp every parameter gradient of ``model`` to ``[-val, val]`` during ``backward()``.

    >>> clipped = gradient_clipper(nn.Linear(3, 1), 0.01)
    >>> (clipped(torch.ones(2, 3)) * 100).sum().backward()
    >>> bool(clipped.bias.grad.abs().max() <= 0.01)
    True
    >>> clipped.remove()
    """
    return GradientClipper(model, val)
