"""The embedded demo models load offline, are small, solve their tasks and trace with fx."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.fx

from surgeon_widgets.demo import (
    CNN_WEIGHTS,
    TRANSFORMER_WEIGHTS,
    load_cnn,
    load_transformer,
    reversal_batch,
    shape_batch,
    weights_path,
)
from surgeon_widgets.demo.models import TinyCNN, TinyTransformer

SEED = 20_261_130  # not a training seed (those are 1 ... steps)


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the demo models must load without network access")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="module")
def transformer() -> TinyTransformer:
    return load_transformer()


@pytest.fixture(scope="module")
def cnn() -> TinyCNN:
    return load_cnn()


def test_weights_are_packaged_and_small() -> None:
    sizes = [len(weights_path(name).read_bytes()) for name in (TRANSFORMER_WEIGHTS, CNN_WEIGHTS)]
    assert sum(sizes) <= 2 * 1024 * 1024


def test_loaded_in_eval_mode(transformer: TinyTransformer, cnn: TinyCNN) -> None:
    assert not transformer.training and not cnn.training


@torch.no_grad()
def test_reversal_accuracy(transformer: TinyTransformer) -> None:
    tokens, targets = reversal_batch(1024, seed=SEED)
    accuracy = (transformer(tokens).argmax(-1) == targets).float().mean().item()
    assert accuracy >= 0.95


def test_last_layer_has_anti_diagonal_head(transformer: TinyTransformer) -> None:
    tokens, _ = reversal_batch(256, seed=SEED + 1)
    weights = transformer.attention_weights(tokens)[-1]  # batch, heads, query, key
    assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-5)
    mass = weights.flip(-1).diagonal(dim1=-2, dim2=-1).mean((0, 2))  # per head
    assert mass.max().item() > 0.5, mass


def test_attention_weights_match_sdpa(transformer: TinyTransformer) -> None:
    """``Attention.weights`` is exactly what ``scaled_dot_product_attention`` applies to v."""
    attn = transformer.layers[-1].attn
    x = torch.randn(3, 10, 64, generator=torch.Generator().manual_seed(SEED))
    with torch.no_grad():
        v = attn._heads(attn.v_proj(x))
        expected = attn.out_proj((attn.weights(x) @ v).transpose(1, 2).flatten(-2))
        assert torch.allclose(attn(x), expected, atol=1e-5)


@torch.no_grad()
def test_cnn_accuracy(cnn: TinyCNN) -> None:
    images, labels = shape_batch(512, seed=SEED)
    accuracy = (cnn(images).argmax(-1) == labels).float().mean().item()
    assert accuracy >= 0.9


def test_data_is_seeded() -> None:
    assert torch.equal(reversal_batch(8, seed=5)[0], reversal_batch(8, seed=5)[0])
    assert torch.equal(shape_batch(8, seed=5)[0], shape_batch(8, seed=5)[0])
    assert not torch.equal(shape_batch(8, seed=5)[0], shape_batch(8, seed=6)[0])


@torch.no_grad()
def test_fx_traces_transformer(transformer: TinyTransformer) -> None:
    graph_module = torch.fx.symbolic_trace(transformer)
    targets = {node.target for node in graph_module.graph.nodes}
    assert torch.nn.functional.scaled_dot_product_attention in targets
    assert "layers.1.attn.q_proj" in targets
    tokens, _ = reversal_batch(4, seed=SEED)
    assert torch.equal(graph_module(tokens), transformer(tokens))


@torch.no_grad()
def test_fx_traces_cnn(cnn: TinyCNN) -> None:
    graph_module = torch.fx.symbolic_trace(cnn)
    assert "block3.conv" in {node.target for node in graph_module.graph.nodes}
    images, _ = shape_batch(4, seed=SEED)
    assert torch.equal(graph_module(images), cnn(images))
