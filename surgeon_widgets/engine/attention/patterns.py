"""Attention arithmetic: the softmax pattern of one attention call, and its display reduction.

Internal to :mod:`surgeon_widgets.engine.attention.capture`; no hooks here, only tensor maths.

Shapes:

==================  ==========================================================
``query``           ``[batch, heads, queries, head_dim]`` (any leading dims)
``key``             ``[batch, kv_heads, keys, head_dim]``; ``kv_heads`` divides
                    ``heads`` (grouped-query attention, e.g. Llama)
``attn_mask``       broadcastable to ``[batch, heads, queries, keys]``; bool
                    (True = may attend) or float (added to the scores)
pattern             ``[batch, heads, queries, keys]``, rows sum to 1 (0 for a
                    row whose every key is masked)
reduced ``values``  ``uint8 [batch, heads, q', k']`` with ``q', k' <= max_size``
reduced ``scale``   ``float32 [batch, heads]``: ``values * scale`` ~ pooled pattern
==================  ==========================================================
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["ReducedPattern", "reduce_pattern", "sdpa_pattern"]


def sdpa_pattern(
    query: torch.Tensor,
    key: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``softmax(query @ key.T * scale + mask)``: the weights ``scaled_dot_product_attention`` uses.

    Same argument meaning as :func:`torch.nn.functional.scaled_dot_product_attention`
    (dropout is not applied: the pattern is the pre-dropout one). Computed in float32 for
    half-precision inputs, returned in the query's dtype, detached.

    >>> q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    >>> p = sdpa_pattern(q, k, is_causal=True)
    >>> p.shape, bool(p.sum(-1).allclose(torch.ones(1, 2, 3))), p[0, 0, 0].tolist()[1:]
    (torch.Size([1, 2, 3, 3]), True, [0.0, 0.0])
    """
    with torch.no_grad():
        q, k = _upcast(query), _upcast(key)
        if q.dim() >= 3 and k.dim() >= 3 and k.shape[-3] != q.shape[-3]:
            # Grouped-query attention (enable_gqa=True): key head j serves query heads
            # j * group ... (j + 1) * group - 1, as in torch's reference implementation.
            k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
        factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = torch.matmul(q, k.transpose(-2, -1)) * factor
        if is_causal:
            n_q, n_k = scores.shape[-2:]
            causal = torch.ones(n_q, n_k, dtype=torch.bool, device=scores.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                scores = torch.where(attn_mask, scores, float("-inf"))
            else:
                scores = scores + attn_mask.to(scores.dtype)
        probs = torch.softmax(scores, dim=-1)
        # A row with every key masked is NaN after softmax; torch's kernels give 0 there.
        probs = torch.nan_to_num(probs, nan=0.0)
        return probs.to(query.dtype)


def _upcast(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


class ReducedPattern(NamedTuple):
    """A pattern shrunk for display: ``values * scale[..., None, None]`` ~ the pooled pattern.

    Attributes:
        values: ``uint8 [batch, heads, q', k']``, 255 is the largest weight of each map.
        scale: ``float32 [batch, heads]``, the weight one step of ``values`` stands for.
        full_shape: ``(queries, keys)`` before pooling.
    """

    values: torch.Tensor
    scale: torch.Tensor
    full_shape: tuple[int, int]

    def to_float(self) -> torch.Tensor:
        """The pooled pattern as float32 (``values * scale``)."""
        return self.values.float() * self.scale[..., None, None]


def reduce_pattern(pattern: torch.Tensor, max_size: int = 256) -> ReducedPattern:
    """Average-pool each ``[queries, keys]`` map to at most ``max_size`` a side, as uint8.

    Runs on the pattern's device; only the small result needs to leave it.

    >>> p = torch.softmax(torch.randn(1, 2, 600, 600), dim=-1)
    >>> r = reduce_pattern(p)
    >>> r.values.shape, r.values.dtype, r.scale.shape, r.full_shape
    (torch.Size([1, 2, 256, 256]), torch.uint8, torch.Size([1, 2]), (600, 600))
    >>> reduce_pattern(torch.eye(3)[None, None]).values[0, 0].tolist()
    [[255, 0, 0], [0, 255, 0], [0, 0, 255]]
    """
    if max_size < 1:
        raise ValueError(f"max_size must be >= 1, got {max_size}")
    if pattern.dim() < 2:
        raise ValueError(
            f"pattern needs [..., queries, keys] dims, got shape {tuple(pattern.shape)}"
        )
    with torch.no_grad():
        n_q, n_k = pattern.shape[-2:]
        lead = pattern.shape[:-2]
        maps = pattern.detach().float().reshape(-1, n_q, n_k)
        size = (min(n_q, max_size), min(n_k, max_size))
        if size != (n_q, n_k):
            maps = F.adaptive_avg_pool2d(maps, size)
        peak = maps.amax(dim=(-2, -1))
        step = torch.where(peak > 0, peak / 255.0, torch.ones_like(peak))
        values = (maps / step[:, None, None]).round_().clamp_(0, 255).to(torch.uint8)
        return ReducedPattern(values.reshape(*lead, *size), step.reshape(lead), (n_q, n_k))
