"""Attention patterns of chosen layers, from models that never compute them.

Modern attention (``F.scaled_dot_product_attention``, Hugging Face's default ``sdpa``
implementation, ``nn.MultiheadAttention``'s fast path) returns no weights. While a selected
layer's forward runs, :func:`capture_attention` intercepts its attention calls and computes
``softmax(QKᵀ·scale + mask)`` for them beside the original kernel, so:

* the model and its config are not changed, and its output is the same;
* only the selected layers pay; every other layer keeps its fused kernel;
* every hook and interception is removed when the call ends, also when the model raises.

Layer names
    A layer is any name from :func:`~surgeon_widgets.engine.inspect.get_layers` whose module
    performs attention while it runs: the attention module itself (what
    :func:`attention_layers` lists, e.g. ``'encoder.layer.0.attention.self'`` for BERT,
    ``'h.0.attn'`` for GPT-2, ``'layers.0.self_attn'`` for Llama,
    ``'encoder.layers.encoder_layer_0.self_attention'`` for torchvision's ViT) or a block
    that contains exactly one attention call (``'encoder.layer.0'``). A module whose call
    runs attention several times needs ``all_calls=True``, or a finer name. ``name_1`` is the
    module's second call in the forward, as in ``Inspect``.

Supported calls: ``F.scaled_dot_product_attention`` (attn_mask bool or float, ``is_causal``,
``scale``, ``enable_gqa`` / fewer key-value heads) and ``F.multi_head_attention_forward``
(``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``, including ``need_weights=False``
and the inference fast path). A module call that makes none of these calls but takes a
softmax over the last dim of a tensor of 3 or more dims (eager attention: Hugging Face's
``attn_implementation="eager"``, hand-written ``scores.softmax(-1)``, torchvision MaxViT's
5-D ``[B, windows, heads, P, P]``) gets those softmax outputs as its patterns, as
``[B, heads, P, P]`` with every dim between the batch and the last two folded into heads
(MaxViT: ``windows * heads``, window-major). Patterns are pre-dropout, detached copies, per head.

Known limits: ``torch.compile``-d modules and kernels called directly
(``torch._native_multi_head_attention``, flash-attention packages) are not seen. Under
``nn.TransformerEncoder``'s nested-tensor fast path (eval, no grad, ``src_key_padding_mask``)
a capture runs the regular path, so padded positions of the output hold computed values
instead of the fast path's zeros; the other positions agree within float rounding. A
Hugging Face grouped-query decode step with one query and a padding mask (``pack_gqa``)
gives ``[batch, kv_heads, group, keys]``; ``.reshape(batch, heads, 1, keys)`` restores it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from torch import nn
from torch.overrides import TorchFunctionMode

from ..inspect import get_layers, resolve_layer
from ..naming import NameSpec, UnknownNameError, normalize_spec
from ..registry import HookRegistry
from .intercept import AttentionRecorder, PassThroughMode
from .patterns import ReducedPattern, reduce_pattern

__all__ = [
    "ReducedPattern",
    "attention_layers",
    "capture_attention",
    "nested_fast_path_owners",
    "reduce_pattern",
]

# ids of the capture states of the capture_attention calls running in this thread / context
_active: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "surgeon_active_attention", default=frozenset()
)


def attention_layers(model: nn.Module) -> list[str]:
    """Names of the modules that look like attention: the innermost whose class name says so.

    ``nn.MultiheadAttention`` and every class with ``Attention`` or ``Attn`` in its name
    count; a match that contains another match (BERT's ``BertAttention`` around
    ``BertSelfAttention``) gives way to the inner one. A module that calls
    ``F.scaled_dot_product_attention`` under another class name works with
    :func:`capture_attention` but is not listed.

    >>> layer = nn.TransformerEncoderLayer(d_model=8, nhead=2)
    >>> attention_layers(nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False))
    ['layers.0.self_attn', 'layers.1.self_attn']
    """
    found = [name for name, module in model.named_modules() if name and _is_attention(module)]
    return [name for name in found if not any(o.startswith(name + ".") for o in found)]


def _is_attention(module: nn.Module) -> bool:
    label = type(module).__name__.lower()
    return isinstance(module, nn.MultiheadAttention) or "attention" in label or "attn" in label


def capture_attention(
    model: nn.Module,
    inputs: Any,
    layers: NameSpec,
    full: bool = True,
    max_size: int = 256,
    all_calls: bool = False,
    keep_output: bool = False,
) -> Any:
    """Run ``model(inputs)`` once and return the attention pattern of each layer in ``layers``.

    Args:
        model: any ``nn.Module``; neither it nor its config is changed.
        inputs: a tensor (``model(x)``), a tuple of positional arguments, or a dict (or
            ``BatchEncoding``) of keyword arguments.
        layers: a layer name, a list / tuple of them, or a dict ``{name: key}`` (see the
            module docstring for what a layer name may be).
        full: ``True`` gives ``tensor[batch, heads, queries, keys]``; ``False`` gives a
            :class:`ReducedPattern` per layer (pooled on the model's device to at most
            ``max_size`` a side, uint8 plus a scale), for display.
        max_size: side limit of reduced patterns.
        all_calls: give a list with one pattern per attention call of the layer (every call
            of the module in this forward) instead of requiring exactly one.
        keep_output: also return the model's output: ``(output, patterns)``.

    Returns:
        ``{key: pattern}`` in the order asked (``key`` is the name, or the dict's value).

    Raises:
        UnknownNameError: a name that is no module of ``model`` (lists its attention layers).
        ValueError: a layer that ran no attention call, or several without ``all_calls``.

    Example:
        >>> layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, batch_first=True).eval()
        >>> with torch.no_grad():
        ...     maps = capture_attention(layer, torch.randn(1, 5, 8), ["self_attn"])
        >>> maps["self_attn"].shape
        torch.Size([1, 2, 5, 5])
        >>> small = capture_attention(layer, torch.randn(1, 300, 8), "self_attn", full=False)
        >>> small["self_attn"].values.shape, small["self_attn"].full_shape
        (torch.Size([1, 2, 256, 256]), (300, 300))
    """
    targets = [(key, *_resolve(model, name)) for name, key in normalize_spec(layers, "layers")]
    state = _CaptureState(None if full else partial(reduce_pattern, max_size=max_size))
    token = _active.set(_active.get() | {id(state)})
    try:
        with HookRegistry("capture_attention") as hooks:
            for module_name in dict.fromkeys(t[2] for t in targets):
                _hook_layer(model, module_name, state, hooks)
            output = _call(model, inputs)
    finally:
        _active.reset(token)
        state.unwind()
    patterns = {
        key: _pick(model, state, name, module_name, index, all_calls)
        for key, name, module_name, index in targets
    }
    return (output, patterns) if keep_output else patterns


def _resolve(model: nn.Module, name: str) -> tuple[str, str, int]:
    try:
        _, module_name, index = resolve_layer(model, name)
    except UnknownNameError:
        raise UnknownNameError(name, get_layers(model), "layer", _attention_hint(model)) from None
    return name, module_name, index


def _attention_hint(model: nn.Module, limit: int = 12) -> str:
    names = attention_layers(model)
    if not names:
        return "this model has no module named like attention; get_layers(model) lists all"
    shown = ", ".join(repr(n) for n in names[:limit])
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return f"attention layers of this model: {shown}{more} (attention_layers(model))"


def _call(model: nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


@dataclass
class _CaptureState:
    """Per-call data: patterns per module call, and the modes this call has pushed."""

    reduce: Any
    calls: dict[str, list[list[Any]]] = field(default_factory=dict)
    pushed: list[TorchFunctionMode] = field(default_factory=list)

    def push(self, mode: TorchFunctionMode) -> None:
        mode.__enter__()
        self.pushed.append(mode)

    def pop(self) -> None:
        if self.pushed:
            self.pushed.pop().__exit__(None, None, None)

    def unwind(self) -> None:
        while self.pushed:
            self.pop()


def _hook_layer(
    model: nn.Module, module_name: str, state: _CaptureState, hooks: HookRegistry
) -> None:
    module = model.get_submodule(module_name)

    def start(_module: nn.Module, _args: Any) -> None:
        if id(state) in _active.get():
            sink = state.calls.setdefault(module_name, [])
            sink.append([])
            state.push(AttentionRecorder(sink[-1], state.reduce))

    hooks.forward_pre(module, start, name=module_name)
    hooks.forward(module, _stopper(state), name=module_name, always_call=True)
    for owner in nested_fast_path_owners(model, module_name):
        hooks.forward_pre(owner, _starter(state, PassThroughMode), name=module_name)
        hooks.forward(owner, _stopper(state), name=module_name, always_call=True)


def _starter(state: _CaptureState, mode_class: type[TorchFunctionMode]):
    def start(_module: nn.Module, _args: Any) -> None:
        if id(state) in _active.get():
            state.push(mode_class())

    return start


def _stopper(state: _CaptureState):
    def stop(_module: nn.Module, _args: Any, _output: Any) -> None:
        if id(state) in _active.get():
            state.pop()

    return stop


def nested_fast_path_owners(model: nn.Module, module_name: str) -> list[nn.Module]:
    """The ``nn.TransformerEncoder`` s enclosing ``module_name`` (the root included).

    Whoever records attention inside one of them keeps a :class:`~.intercept.PassThroughMode`
    active while the encoder runs: on its fast path the encoder turns its input into a nested
    tensor, which the recorded layer's regular path cannot take.

    >>> layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
    >>> model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False))
    >>> [type(m).__name__ for m in nested_fast_path_owners(model, "0.layers.1.self_attn")]
    ['TransformerEncoder']
    """
    parts = module_name.split(".")
    owners = [model.get_submodule(".".join(parts[:i])) for i in range(len(parts))]
    return [m for m in owners if isinstance(m, nn.TransformerEncoder)]


def _pick(
    model: nn.Module, state: _CaptureState, name: str, module_name: str, index: int, all_calls: bool
) -> Any:
    calls = state.calls.get(module_name, [])
    if all_calls:
        return [pattern for call in calls for pattern in call]
    if index >= len(calls):
        raise ValueError(
            f"layer {name!r}: module {module_name!r} ran {len(calls)} time(s) in "
            f"this forward, so call {index} does not exist"
        )
    found = calls[index]
    if len(found) != 1:
        what = "no attention call" if not found else f"{len(found)} attention calls"
        fix = "choose one of them, or pass all_calls=True" if found else "choose an attention layer"
        raise ValueError(
            f"layer {name!r} ran {what} in this forward; {fix}. " + _attention_hint(model)
        )
    return found[0]
