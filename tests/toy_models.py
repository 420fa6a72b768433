"""Toy models with known structure, shared by the tests (built in fixtures, never at import)."""

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
