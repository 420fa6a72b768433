"""Embedded demo models, trained by ``scripts/train_demo_models.py`` and loaded with no network.

>>> from surgeon_widgets.demo import load_transformer, reversal_batch
>>> tokens, targets = reversal_batch(4, seed=123)
>>> bool((load_transformer()(tokens).argmax(-1) == targets).all())
True
>>> from surgeon_widgets.demo import SHAPE_CLASSES, load_cnn, shape_batch
>>> images, labels = shape_batch(4, seed=123)
>>> [SHAPE_CLASSES[i] for i in load_cnn()(images).argmax(-1)]
['circle', 'square', 'triangle', 'cross']
"""

from __future__ import annotations

from importlib import resources

import torch
from torch import nn

from .data import IMAGE_SIZE, NUM_DIGITS, SEQ_LEN, SHAPE_CLASSES, reversal_batch, shape_batch
from .models import TinyCNN, TinyTransformer

__all__ = [
    "CNN_WEIGHTS",
    "IMAGE_SIZE",
    "NUM_DIGITS",
    "SEQ_LEN",
    "SHAPE_CLASSES",
    "TRANSFORMER_WEIGHTS",
    "TinyCNN",
    "TinyTransformer",
    "load_cnn",
    "load_transformer",
    "reversal_batch",
    "shape_batch",
    "weights_path",
]

TRANSFORMER_WEIGHTS = "tiny_transformer.pt"
CNN_WEIGHTS = "tiny_cnn.pt"


def weights_path(filename: str) -> resources.abc.Traversable:
    """The packaged file ``surgeon_widgets/data/<filename>``."""
    return resources.files("surgeon_widgets").joinpath("data", filename)


def _load(model: nn.Module, filename: str) -> nn.Module:
    with weights_path(filename).open("rb") as f:
        state = torch.load(f, map_location="cpu", weights_only=True)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    return model.eval()


def load_transformer() -> TinyTransformer:
    """The trained digit-reversal :class:`TinyTransformer`, in eval mode on the CPU."""
    return _load(TinyTransformer(), TRANSFORMER_WEIGHTS)


def load_cnn() -> TinyCNN:
    """The trained shape-classifying :class:`TinyCNN`, in eval mode on the CPU."""
    return _load(TinyCNN(), CNN_WEIGHTS)
