"""Seeded synthetic data for the demo models: digit reversal and shape images.

Every batch is a pure function of its arguments (a ``torch.Generator`` seeded with ``seed``),
so training, tests and notebooks see the same data without downloading anything.

>>> tokens, targets = reversal_batch(2, seed=0)
>>> tokens.shape, bool((targets == tokens.flip(-1)).all())
(torch.Size([2, 10]), True)
>>> images, labels = shape_batch(4, seed=0)
>>> images.shape, labels.tolist()
(torch.Size([4, 3, 32, 32]), [0, 1, 2, 3])
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "IMAGE_SIZE",
    "NUM_DIGITS",
    "SEQ_LEN",
    "SHAPE_CLASSES",
    "reversal_batch",
    "shape_batch",
]

NUM_DIGITS = 10
"""Vocabulary of the reversal task: the digits 0-9."""

SEQ_LEN = 10
"""Length of every reversal sequence."""

SHAPE_CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "cross")
"""Class names of :func:`shape_batch`, in label order."""

IMAGE_SIZE = 32
"""Side of the square shape images, in pixels."""


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def reversal_batch(
    n: int, seq_len: int = SEQ_LEN, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random digit sequences and their reversals, both ``(n, seq_len)`` int64.

    The target at position ``i`` is the input at ``seq_len - 1 - i``, so a model that
    solves the task must attend along the anti-diagonal.

    >>> x, y = reversal_batch(1, 4, seed=3)
    >>> y.tolist() == [x[0].flip(0).tolist()]
    True
    """
    tokens = torch.randint(0, NUM_DIGITS, (n, seq_len), generator=_generator(seed))
    return tokens, tokens.flip(-1)


def _shape_masks(labels: torch.Tensor, size: int, g: torch.Generator) -> torch.Tensor:
    """Soft masks ``(n, size, size)`` in [0, 1] of one randomly placed shape per label."""
    n = labels.numel()
    radius = 0.22 + 0.13 * torch.rand(n, generator=g)  # fraction of the image side
    margin = radius + 0.04
    cx = margin + (1 - 2 * margin) * torch.rand(n, generator=g)
    cy = margin + (1 - 2 * margin) * torch.rand(n, generator=g)
    angle = 2 * math.pi * torch.rand(n, generator=g)

    coords = (torch.arange(size, dtype=torch.float32) + 0.5) / size
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    dx = xx[None] - cx[:, None, None]
    dy = yy[None] - cy[:, None, None]
    cos, sin = angle.cos()[:, None, None], angle.sin()[:, None, None]
    u, v = cos * dx + sin * dy, -sin * dx + cos * dy  # shape-local coordinates
    r = radius[:, None, None]

    def polygon(sides: int, inradius: torch.Tensor) -> torch.Tensor:
        # signed distance-like value: max over edges of (projection - inradius)
        ks = torch.arange(sides, dtype=torch.float32)[:, None, None, None]
        phi = 2 * math.pi * ks / sides
        return (u[None] * phi.cos() + v[None] * phi.sin()).amax(0) - inradius

    dist = torch.stack(
        [
            (u**2 + v**2).sqrt() - r,  # circle
            polygon(4, 0.8 * r),  # square
            polygon(3, 0.55 * r),  # equilateral triangle
            torch.minimum(  # plus-shaped cross
                torch.maximum(u.abs() - r, v.abs() - 0.3 * r),
                torch.maximum(v.abs() - r, u.abs() - 0.3 * r),
            ),
        ]
    )[labels, torch.arange(n)]
    return (0.5 - dist * size).clamp(0, 1)  # anti-aliased edge one pixel wide


def shape_batch(
    n: int, size: int = IMAGE_SIZE, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` RGB images ``(n, 3, size, size)`` in [0, 1] of one shape each, and int64 labels.

    Labels cycle through :data:`SHAPE_CLASSES` (balanced batches); position, size, rotation,
    shape colour, background colour and pixel noise are random.

    >>> images, labels = shape_batch(8, seed=1)
    >>> [SHAPE_CLASSES[i] for i in labels[:4]]
    ['circle', 'square', 'triangle', 'cross']
    >>> bool(images.min() >= 0 and images.max() <= 1)
    True
    """
    g = _generator(seed)
    labels = torch.arange(n) % len(SHAPE_CLASSES)
    mask = _shape_masks(labels, size, g)
    background = 0.4 * torch.rand(n, 3, 1, 1, generator=g)
    colour = 0.5 + 0.5 * torch.rand(n, 3, 1, 1, generator=g)
    images = background + (colour - background) * mask[:, None]
    images = images + 0.05 * torch.randn(images.shape, generator=g)
    return images.clamp(0, 1), labels
