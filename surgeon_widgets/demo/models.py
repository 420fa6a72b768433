"""The demo models: a tiny transformer that reverses digits and a small CNN that names shapes.

Both are plain ``nn.Module`` s that ``torch.fx.symbolic_trace`` can trace. Attention calls
``torch.nn.functional.scaled_dot_product_attention`` from a module named
``layers.<i>.attn``, so attention capture can intercept it.

>>> import torch
>>> TinyTransformer()(torch.zeros(2, 10, dtype=torch.long)).shape
torch.Size([2, 10, 10])
>>> TinyCNN()(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 4])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .data import NUM_DIGITS, SEQ_LEN, SHAPE_CLASSES

__all__ = ["Attention", "Block", "ConvBlock", "TinyCNN", "TinyTransformer"]


class Attention(nn.Module):
    """Multi-head self-attention with separate ``q_proj``/``k_proj``/``v_proj`` and ``out_proj``.

    >>> Attention(64, 4)(torch.zeros(1, 5, 64)).shape
    torch.Size([1, 5, 64])
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        # (batch, seq, d_model) -> (batch, heads, seq, head_dim)
        return x.unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (
            self._heads(self.q_proj(x)),
            self._heads(self.k_proj(x)),
            self._heads(self.v_proj(x)),
        )
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).flatten(-2))

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """Attention probabilities ``(batch, heads, query, key)``: softmax(QK^T / sqrt(d))."""
        q, k = self._heads(self.q_proj(x)), self._heads(self.k_proj(x))
        return (q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).softmax(-1)


class Block(nn.Module):
    """Pre-norm transformer encoder block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """Encoder-only transformer that maps a digit sequence to logits of its reversal.

    Token embedding plus learned positions, ``n_layers`` pre-norm blocks, a final norm and a
    linear ``head``; input ``(batch, seq)`` int64 digits, output ``(batch, seq, vocab)``.
    The trained model (:func:`surgeon_widgets.demo.load_transformer`) reverses length-10
    sequences, and a head of its last layer attends along the anti-diagonal.

    >>> model = TinyTransformer()
    >>> model(torch.randint(0, 10, (3, 10))).shape
    torch.Size([3, 10, 10])
    >>> model.attention_weights(torch.randint(0, 10, (3, 10))).shape  # layers, batch, heads, q, k
    torch.Size([2, 3, 4, 10, 10])
    """

    def __init__(
        self,
        vocab_size: int = NUM_DIGITS,
        max_len: int = SEQ_LEN,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int = 128,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Parameter(0.02 * torch.randn(max_len, d_model))
        self.layers = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos_embed[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))

    @torch.no_grad()
    def attention_weights(self, tokens: torch.Tensor) -> torch.Tensor:
        """Attention probabilities of every layer, ``(layers, batch, heads, query, key)``."""
        x = self.embed(tokens) + self.pos_embed[: tokens.shape[1]]
        maps = []
        for layer in self.layers:
            maps.append(layer.attn.weights(layer.norm1(x)))
            x = layer(x)
        return torch.stack(maps)


class ConvBlock(nn.Sequential):
    """``conv`` 3x3 -> ``bn`` -> ``relu`` -> ``pool`` (2x2 max), halving the resolution."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)


class TinyCNN(nn.Module):
    """Three conv blocks and a linear classifier for 3x32x32 images of shapes.

    Classes are :data:`surgeon_widgets.demo.data.SHAPE_CLASSES` (circle, square, triangle,
    cross). Feature maps: ``block1`` 16x16x16, ``block2`` 32x8x8, ``block3`` 64x4x4.

    >>> TinyCNN()(torch.rand(5, 3, 32, 32)).shape
    torch.Size([5, 4])
    """

    def __init__(
        self, num_classes: int = len(SHAPE_CLASSES), channels: tuple[int, int, int] = (16, 32, 64)
    ) -> None:
        super().__init__()
        c1, c2, c3 = channels
        self.block1 = ConvBlock(3, c1)
        self.block2 = ConvBlock(c1, c2)
        self.block3 = ConvBlock(c2, c3)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c3, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.block3(self.block2(self.block1(images)))
        return self.fc(self.avgpool(x).flatten(1))
