"""Models shared by the tests: toy models with known structure, small Hugging Face configs.

Built in fixtures or tests, never at import."""

from __future__ import annotations

import torch
from torch import nn


class SomeModel(nn.Module):
    """SEEDS.md's Inspect example."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1 = nn.Linear(5, 3)
        self.layer2 = nn.Linear(3, 2)
        self.layer3 = nn.Linear(2, 1)

    def forward(self, x):
        x1 = self.layer1(x)
        x2 = self.layer2(x1)
        return self.layer3(x2)


class SomeModelFn(SomeModel):
    """SEEDS.md's Extract example (functional ops between the layers)."""

    def forward(self, x):
        x1 = torch.relu(self.layer1(x))
        x2 = torch.sigmoid(self.layer2(x1))
        return self.layer3(x2).tanh()


class Branchy(nn.Module):
    """SEEDS.md's summary example: two branches read the input."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1a = nn.Linear(5, 3)
        self.layer1b = nn.Linear(5, 3)
        self.layer2 = nn.Linear(3, 1)

    def forward(self, x):
        a = self.layer1a(x)
        b = self.layer1b(x)
        c = torch.add(a, b)
        return self.layer2(c)


class Block(nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x)) + x


class Repeated(nn.Module):
    """A block and a ReLU each called twice, and functions with underscores in their names."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.relu(self.block(x))
        y = self.relu(self.block(y))
        y = nn.functional.layer_norm(y, (4,))
        q = y.unsqueeze(1)
        return nn.functional.scaled_dot_product_attention(q, q, q).squeeze(1)


class Raises(nn.Module):
    """Raises in the middle of its forward, after layer1 ran."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1 = nn.Linear(5, 3)
        self.layer2 = nn.Linear(3, 2)

    def forward(self, x):
        y = self.layer1(x)
        raise RuntimeError("boom")
        return self.layer2(y)


# -- Hugging Face models built from small configs (random weights, nothing downloaded) ----------
# Defaults: 2 layers, hidden 32, 2 heads; keyword arguments override any config field. Find
# modules in these models by class, never by path (transformers renames paths between releases).


def tiny_bert(model_class: str = "BertModel", **config):
    """A 2-layer BERT (``transformers.<model_class>``), eval mode: ``tiny_bert(hidden_size=64)``."""
    import transformers

    fields = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                  intermediate_size=64, vocab_size=100, max_position_embeddings=32)  # fmt: skip
    fields.update(config)
    return getattr(transformers, model_class)(transformers.BertConfig(**fields)).eval()


def tiny_gpt2(model_class: str = "GPT2Model", **config):
    """A 2-layer GPT-2 (``transformers.<model_class>``) in eval mode."""
    import transformers

    fields = dict(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                  bos_token_id=0, eos_token_id=0)  # fmt: skip
    fields.update(config)
    return getattr(transformers, model_class)(transformers.GPT2Config(**fields)).eval()


def tiny_vit(model_class: str = "ViTModel", **config):
    """A 2-layer ViT (``transformers.<model_class>``) on 32x32 images in eval mode."""
    import transformers

    fields = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                  intermediate_size=64, image_size=32, patch_size=8)  # fmt: skip
    fields.update(config)
    return getattr(transformers, model_class)(transformers.ViTConfig(**fields)).eval()


def token_inputs(batch: int = 2, seq: int = 8, vocab: int = 100) -> dict[str, torch.Tensor]:
    """``input_ids`` and an all-ones ``attention_mask`` of ``[batch, seq]`` (batch >= 2: see the
    README on sizes torch.export fixes)."""
    return {
        "input_ids": torch.randint(0, vocab, (batch, seq)),
        "attention_mask": torch.ones(batch, seq, dtype=torch.long),
    }


# -- a small attention model of our own (no transformers) ---------------------------------------


class SelfAttention(nn.Module):
    """Multi-head self-attention through F.scaled_dot_product_attention (no weights returned)."""

    def __init__(self, dim: int = 16, heads: int = 2, causal: bool = False) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class TinyAttention(nn.Module):
    """``embed`` (4 -> 16), ``attn`` (:class:`SelfAttention`, 2 heads), ``head`` (16 -> 3)."""

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 16)
        self.attn = SelfAttention(causal=causal)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(self.embed(x)))
