"""Attention patterns of chosen layers, also from fused kernels that never compute them.

``capture`` finds attention modules and records their maps, ``intercept`` catches the attention
calls while one module runs, ``patterns`` holds the arithmetic (the softmax of one call, pooled
for display).
"""

from .capture import (
    ReducedPattern,
    attention_layers,
    capture_attention,
    nested_fast_path_owners,
    reduce_pattern,
)

__all__ = [
    "ReducedPattern",
    "attention_layers",
    "capture_attention",
    "nested_fast_path_owners",
    "reduce_pattern",
]
