"""Intercept attention calls while one module runs, and record their weights beside them.

Internal to :mod:`surgeon_widgets.engine.attention.capture`. An :class:`AttentionRecorder` is a
:class:`torch.overrides.TorchFunctionMode` that :mod:`.attention` pushes in a forward pre-hook
of a selected module and pops in its forward hook, so only that module's calls pass through
Python; every other layer keeps its fused kernels. While it is active:

* :func:`torch.nn.functional.scaled_dot_product_attention` runs unchanged (the model's output
  is bit-for-bit the same) and the recorder computes ``softmax(QKᵀ·scale + mask)`` for the same
  arguments with :func:`.patterns.sdpa_pattern`.
* :func:`torch.nn.functional.multi_head_attention_forward` (``nn.MultiheadAttention``) runs
  unchanged; unless the call already returned per-head weights, the recorder calls it once
  more with ``need_weights=True, average_attn_weights=False, training=False`` and keeps those.
  An active mode also makes ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` leave
  their inference fast path (they check ``torch.overrides.has_torch_function``), so the call
  reaches ``multi_head_attention_forward`` at all.
* Eager attention written out by hand (Hugging Face's ``attn_implementation="eager"``,
  ``scores.softmax(-1)``): when a module call made none of the calls above, the outputs of its
  softmax calls over the last dim of a tensor of 3 or more dims are its patterns (dims between
  the batch and the last two are folded into heads, see ``_as_4d``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..torch_internals import DISABLE_TORCH_FUNCTION
from .patterns import sdpa_pattern

__all__ = ["AttentionRecorder", "PassThroughMode"]

_SDPA = F.scaled_dot_product_attention
_MHA = F.multi_head_attention_forward
_SDPA_PARAMS = (
    "query",
    "key",
    "value",
    "attn_mask",
    "dropout_p",
    "is_causal",
    "scale",
    "enable_gqa",
)
_MHA_SIGNATURE = inspect.signature(F.multi_head_attention_forward)
_SOFTMAX = (F.softmax, torch.softmax, torch.Tensor.softmax, torch.special.softmax)

Pattern = Any  # a tensor, or whatever the recorder's ``reduce`` makes of one


class PassThroughMode(TorchFunctionMode):
    """A mode that changes nothing; being active turns off PyTorch's transformer fast paths.

    ``nn.TransformerEncoder`` turns its input into a nested tensor on the fast path, which the
    slow path of a recorded ``nn.MultiheadAttention`` cannot take; an active mode keeps the
    encoder on its regular path.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class AttentionRecorder(TorchFunctionMode):
    """Append the pattern of every attention call made while active to ``sink``.

    Args:
        sink: list that receives one entry per attention call, in call order.
        reduce: applied to each ``[batch, heads, queries, keys]`` pattern before it is kept
            (e.g. :func:`.patterns.reduce_pattern`); ``None`` keeps the full tensor.

    >>> q = k = v = torch.randn(1, 2, 4, 8)
    >>> found = []
    >>> with AttentionRecorder(found):
    ...     out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> found[0].shape, bool(out.equal(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    (torch.Size([1, 2, 4, 4]), True)
    """

    def __init__(
        self, sink: list[Pattern], reduce: Callable[[torch.Tensor], Pattern] | None = None
    ):
        super().__init__()
        self.sink = sink
        self.reduce = reduce
        self.softmaxes: list[torch.Tensor] = []
        # seconds of our own work while active: every call's time but the model's own calls
        # (what a throttle must charge; the module's forward is the user's, not ours)
        self.spent = 0.0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        start = time.perf_counter()
        kwargs = kwargs or {}
        if func in _SOFTMAX:
            output, theirs = _timed(func, args, kwargs)
            if _is_row_softmax(output, args, kwargs):
                self.softmaxes.append(_as_4d(output.detach().clone()))
        elif func is not _SDPA and func is not _MHA:
            output, theirs = _timed(func, args, kwargs)
        else:
            output, theirs = _timed(func, args, kwargs)
            # Our own arithmetic must not reach other active modes: an outer recorder (a
            # selected block around a selected attention layer) would count the extra call.
            with DISABLE_TORCH_FUNCTION.get()():
                if func is _SDPA:
                    pattern = _sdpa_call_pattern(args, kwargs)
                else:
                    pattern = _mha_call_pattern(func, args, kwargs, output)
                self._keep(pattern)
        self.spent += time.perf_counter() - start - theirs
        return output

    def __exit__(self, *exc: object) -> None:
        start = time.perf_counter()
        super().__exit__(*exc)
        if not self.sink:  # no fused attention call: fall back to eager softmax patterns
            with DISABLE_TORCH_FUNCTION.get()():
                for pattern in self.softmaxes:
                    self._keep(pattern)
        self.softmaxes = []
        self.spent += time.perf_counter() - start

    def _keep(self, pattern: torch.Tensor) -> None:
        self.sink.append(pattern if self.reduce is None else self.reduce(pattern))


def _timed(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict) -> tuple[Any, float]:
    """``func(*args, **kwargs)`` and the seconds it took (the model's call, not ours)."""
    start = time.perf_counter()
    output = func(*args, **kwargs)
    return output, time.perf_counter() - start


def _is_row_softmax(output: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    return (
        isinstance(output, torch.Tensor)
        and output.dim() >= 3
        and isinstance(dim, int)
        and dim % output.dim() == output.dim() - 1
    )


def _as_4d(pattern: torch.Tensor) -> torch.Tensor:
    """``[batch, heads, queries, keys]``: 2-D / 3-D patterns (no head dim) are one head; the
    middle dims of a 5-D or larger one are folded into heads (MaxViT's ``[B, windows, heads,
    P, P]`` -> ``[B, windows * heads, P, P]``, window-major)."""
    while pattern.dim() < 4:
        pattern = pattern.unsqueeze(-3) if pattern.dim() == 3 else pattern.unsqueeze(0)
    if pattern.dim() > 4:
        pattern = pattern.reshape(pattern.shape[0], -1, *pattern.shape[-2:])
    return pattern


def _sdpa_call_pattern(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    call = dict(zip(_SDPA_PARAMS, args))
    call.update(kwargs)
    pattern = sdpa_pattern(
        call["query"],
        call["key"],
        attn_mask=call.get("attn_mask"),
        is_causal=bool(call.get("is_causal", False)),
        scale=call.get("scale"),
        enable_gqa=bool(call.get("enable_gqa", False)),
    )
    return _as_4d(pattern)


def _mha_call_pattern(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
) -> torch.Tensor:
    bound = _MHA_SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    call = bound.arguments
    weights = output[1] if isinstance(output, tuple) else None
    already = (
        call["need_weights"]
        and not call["average_attn_weights"]
        and not (call["training"] and call["dropout_p"] > 0)
    )
    if not already or weights is None:
        call.update(need_weights=True, average_attn_weights=False, training=False)
        with torch.no_grad():
            _, weights = func(**call)
    weights = weights.detach()
    return weights.unsqueeze(0) if weights.dim() == 3 else weights  # unbatched input
