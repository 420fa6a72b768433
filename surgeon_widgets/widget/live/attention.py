"""Live attention patterns of the selected attention layers, for the Explorer's heatmaps.

While a selected attention layer runs (and an update is due under the Explorer's
``max_rate``), the engine's :class:`~surgeon_widgets.engine.attention.intercept.AttentionRecorder`
records ``softmax(QKᵀ·scale + mask)`` beside the layer's own kernel, as
:func:`~surgeon_widgets.engine.attention.capture.capture_attention` does. The full pattern stays in
Python (:meth:`AttentionView.latest`, for ``attention_figure``); the browser gets, for the
chosen batch item, the mean over heads and every head, each pooled on the model's device by
:func:`~surgeon_widgets.engine.attention.reduce_pattern` to at most ``max_size`` a side, as
uint8: the wire form is :func:`~..wire.attention_message`'s (``js/PROTOCOL.md``, "Attention").
Each update's own time (the recorder's work and the send, not the layer's forward: that is
the user's) goes to the throttle (``note_cost``), which spaces out expensive ones; a
hook that raised reports through :func:`~.failures.failed`.

The recorder is active only inside the selected module's own forward, which
:func:`~.compiled.run_eagerly` wraps: under ``torch.compile`` (the whole model or a block
compiled in place) that forward runs eagerly, a graph break at the module while it is
selected; deselecting puts the class's forward back and dynamo's graph without the break is
used again. Enclosing ``nn.TransformerEncoder`` / ``nn.TransformerEncoderLayer`` get hooks that
keep them off their fused paths (which never call the attention module).

>>> import torch
>>> from torch import nn
>>> model = nn.TransformerEncoderLayer(8, 2, batch_first=True).eval()
>>> sent = []
>>> view = AttentionView(model, lambda content, buffers: sent.append((content, buffers)))
>>> view.sync(["self_attn"])
>>> with torch.no_grad():
...     _ = model(torch.randn(1, 5, 8))
>>> content, buffers = sent[-1]
>>> [(i["head"], i["shape"], len(buffers[i["buffer"]])) for i in content["items"]]
[('mean', [5, 5], 25), (0, [5, 5], 25), (1, [5, 5], 25)]
>>> view.latest("self_attn").shape
torch.Size([1, 2, 5, 5])
>>> view.close()
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from ...engine import guard
from ...engine.attention import attention_layers, nested_fast_path_owners
from ...engine.attention.intercept import AttentionRecorder, PassThroughMode
from ...engine.registry import HookRegistry
from ..runtime.compiled import run_eagerly
from ..views.attention_tokens import Tokens
from ..wire import AttentionMap, Message, attention_update
from .failures import Failure, failed, log_failure

__all__ = ["AttentionView"]

log = logging.getLogger("surgeon_widgets.explorer")
Send = Callable[[dict, list[bytes]], None]
Due = Callable[[str], tuple[bool, int]]


class AttentionView:
    """Hooks that record the attention pattern of selected attention layers and send it.

    Args:
        model: the Explorer's model.
        send: called with ``(content, buffers)`` of each ``attention`` message.
        on_error: called with a message when a selected layer runs no attention.
        due: ``due(layer) -> (update_now, step)``, the Explorer's throttle (``max_rate``);
            default: every forward.
        note_cost: the throttle's ``note_cost((layer, "attention"), seconds)`` after each
            update, so it spaces out expensive ones (a 4,096-token pattern takes seconds on a CPU).
        max_size: side limit of the maps sent to the browser.
        on_failure: called with ``(layer, "attention", error)`` when our hook raised.
        training: ``training() -> bool``, the model's mode in the current forward (the
            Explorer's step clock); each map then says train or eval.
    """

    def __init__(
        self,
        model: nn.Module,
        send: Send,
        on_error: Callable[[str], None] = log.warning,
        due: Due | None = None,
        max_size: int = 256,
        note_cost: Callable[[tuple[str, str], float], None] | None = None,
        on_failure: Failure = log_failure,
        training: Callable[[], bool] | None = None,
    ) -> None:
        self.model = model
        self.training = training
        self.on_failure = on_failure
        self.send = send
        self.on_error = on_error
        counter = itertools.count()
        self.due = due or (lambda _layer: (True, next(counter)))
        self.max_size = max_size
        self.note_cost = note_cost
        self.registry = HookRegistry("Explorer attention")
        self.tokens: Tokens | None = None
        self._layers: list[str] | None = None
        self._attached: list[str] = []
        self._latest: dict[str, torch.Tensor] = {}
        self._steps: dict[str, int] = {}
        self._modes: dict[str, bool] = {}
        self._batch: dict[str, int] = {}
        # torch function modes are per thread: so are the stacks of the modes we pushed
        self._recording: dict[tuple[str, int], list[tuple[Any, list[Any]]]] = {}
        self._warned: set[str] = set()

    @property
    def layers(self) -> list[str]:
        """The model's attention layers (``attention_layers(model)``), computed once."""
        if self._layers is None:
            self._layers = attention_layers(self.model)
        return self._layers

    @property
    def attached(self) -> list[str]:
        return list(self._attached)

    def sync(self, names: Iterable[str]) -> None:
        """Record exactly the attention layers among ``names``; other names are ignored."""
        known = set(self.layers)
        wanted = [n for n in dict.fromkeys(names) if n in known]
        for name in dict.fromkeys([*self._attached, *self._latest]):
            if name not in wanted:
                self.registry.remove(name)
                self._forget(name)
        me = weakref.ref(self)  # hooks must not keep the widget alive
        for name in wanted:
            if name not in self._attached:
                module = self.model.get_submodule(name)
                self.registry.add("eager_forward", name, run_eagerly(module, _around(me, name)))
                for owner in nested_fast_path_owners(self.model, name):
                    self.registry.forward_pre(owner, _pass_start(me, name, owner), name=name)
                    self.registry.forward(owner, _pass_stop(me, name), name=name, always_call=True)
                for owner in _fused_layers(self.model, name):
                    self.registry.forward_pre(owner, _keep_off_fused_path, name=name)
        self._attached = wanted

    def latest(self, layer: str) -> torch.Tensor | None:
        """The full-resolution ``[batch, heads, queries, keys]`` pattern of the last update."""
        return self._latest.get(layer)

    def shown(self, layer: str, batch: int = 0) -> tuple[torch.Tensor, list[str] | None]:
        """``layer``'s latest pattern and the token labels of batch item ``batch`` (else the
        first's, or ``None``); ``KeyError`` unless ``layer`` is selected and ran since."""
        pattern = self._latest.get(layer)
        if pattern is None:
            raise KeyError(
                f"no attention pattern for {layer!r} yet: select one of "
                f"{self.layers[:8]} and run the model"
            )
        tokens = self.tokens
        row = tokens[batch] if tokens and batch < len(tokens) else tokens[0] if tokens else None
        return pattern, row

    def set_tokens(self, tokens: Tokens | None) -> None:
        """Use these labels (one list per batch item) and resend what is shown."""
        self.tokens = tokens
        self.resend()

    def select_batch(self, layer: str, batch: int) -> None:
        """Show batch item ``batch`` of ``layer`` (resent from the kept full pattern)."""
        pattern = self._latest.get(layer)
        if pattern is None:
            return
        if not 0 <= batch < pattern.shape[0]:
            raise ValueError(f"{layer}: batch item {batch} out of range 0..{pattern.shape[0] - 1}")
        self._batch[layer] = batch
        self.resend([layer])

    def maps(self, layers: Iterable[str] | None = None) -> list[AttentionMap]:
        """The latest kept map of ``layers`` (default: all kept), as each is shown."""
        latest = dict(self._latest)  # hooks may add one meanwhile (a static picture's thread)
        names = [n for n in (latest if layers is None else layers) if n in latest]
        rows = self.tokens or []

        def row(batch: int) -> list[str] | None:
            return rows[batch] if batch < len(rows) else rows[0] if rows else None

        return [
            AttentionMap(n, latest[n], self._batch.get(n, 0), self._steps.get(n, 0),
                         self._modes.get(n), row(self._batch.get(n, 0)))
            for n in names
        ]  # fmt: skip

    def message(self, layers: Iterable[str] | None = None) -> Message:
        """One ``attention`` message with the latest maps of ``layers`` (default: all kept)."""
        return attention_update(self.maps(layers), self.tokens, self.max_size)

    def resend(self, layers: Iterable[str] | None = None) -> None:
        content, buffers = self.message(layers)
        if content["items"]:
            self.send(content, buffers)

    def on_msg(self, content: dict) -> None:
        """Messages from the heatmap view: ``{type: "attention_batch", layer, batch}``; a bad
        one goes to ``on_error`` (shown in the notebook, not only the console)."""
        if content.get("type") == "attention_batch":
            try:
                self.select_batch(str(content.get("layer")), int(content.get("batch", 0)))
            except (TypeError, ValueError) as error:
                self.on_error(f"attention batch selection: {error}")

    def park(self) -> None:
        """Take the hooks off, keeping the patterns (the next :meth:`sync` puts them back)."""
        self.registry.remove()
        self._attached = []

    def close(self) -> None:
        """Remove every hook and drop the kept patterns."""
        self.registry.remove()
        me = threading.get_ident()
        for (_, thread), stack in self._recording.items():
            while stack and thread == me:  # closed mid-forward (from a hook) in this thread
                stack.pop()[0].__exit__(None, None, None)
        self._recording.clear()
        self._attached = []
        self._latest.clear()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AttentionView(attached={self._attached!r}, hooks={len(self.registry)})"

    # -- inside the model's forward ---------------------------------------------------------

    def _forget(self, name: str) -> None:
        for key in (self._latest, self._steps, self._batch, self._modes):
            key.pop(name, None)

    def _begin(self, name: str) -> tuple[AttentionRecorder, list[Any]] | None:
        due, step = self.due(name)
        if not due:
            return None
        sink: list[Any] = []
        mode = AttentionRecorder(sink)
        mode.__enter__()
        self._steps[name] = step
        if self.training is not None:
            self._modes[name] = self.training()
        return mode, sink

    def _end(self, name: str, mode: AttentionRecorder, sink: list[Any]) -> None:
        mode.__exit__(None, None, None)  # its own time is in mode.spent
        start = time.perf_counter()
        if not sink:
            if name not in self._warned:
                self._warned.add(name)
                self.on_error(
                    f"{name}: no attention ran in its forward (no F.scaled_dot_product_attention, "
                    "nn.MultiheadAttention or softmax over the last dim), so there is no pattern "
                    "to show; select the module that computes the attention weights"
                )
            return
        self._latest[name] = sink[0]
        self.resend([name])
        if self.note_cost is not None:
            # ours only: the recorder's work inside the forward and at its exit, then the send
            took = mode.spent + time.perf_counter() - start
            self.note_cost((name, "attention"), took)


def _key(name: str) -> tuple[str, int]:
    return name, threading.get_ident()


def _skip(hooked: nn.Module, target: weakref.ref[nn.Module], args: Any) -> bool:
    """Return at once: a copy of the module (``Extract``), a trace, our own forward, or a
    compiled region (where the attention module itself runs eagerly, see :func:`_around`)."""
    return hooked is not target() or torch.compiler.is_compiling() or guard.inert(args)


def _around(me: weakref.ref[AttentionView], name: str):
    """The selected attention module's forward, with the recorder active while it is due.

    Set by :func:`~.compiled.run_eagerly`, so under ``torch.compile`` this runs eagerly (a
    graph break at the module: dynamo splits each enclosing frame there) and the recorder sees
    the real attention calls."""

    def around(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        view = me()
        if view is None or guard.inert(args, kwargs):
            return forward(*args, **kwargs)
        recording = _guard(view, name, view._begin)
        if recording is None:
            return forward(*args, **kwargs)
        try:
            output = forward(*args, **kwargs)
        except BaseException:
            recording[0].__exit__(None, None, None)  # the user's error goes on, unrecorded
            raise
        _guard(view, name, lambda n: view._end(n, *recording))
        return output

    return around


def _keep_off_fused_path(_module: nn.Module, _args: Any) -> None:
    """Does nothing: ``nn.TransformerEncoderLayer`` skips its fused kernel (which never calls
    ``self_attn``) while any module in it has a hook."""


def _fused_layers(model: nn.Module, name: str) -> list[nn.Module]:
    parts = name.split(".")
    owners = [model.get_submodule(".".join(parts[:i])) for i in range(len(parts))]
    return [m for m in owners if isinstance(m, nn.TransformerEncoderLayer)]


def _pass_start(me: weakref.ref[AttentionView], name: str, owner: nn.Module):
    """Enclosing ``nn.TransformerEncoder``: keep it off its nested-tensor fast path."""
    target = weakref.ref(owner)

    def hook(hooked: nn.Module, args: Any) -> None:
        view = me()
        if view is not None and not _skip(hooked, target, args):
            mode = PassThroughMode()
            mode.__enter__()
            view._recording.setdefault(_key(f"{name} (owner)"), []).append((mode, []))

    return hook


def _pass_stop(me: weakref.ref[AttentionView], name: str):
    def hook(_module: nn.Module, _args: Any, _output: Any) -> None:
        if torch.compiler.is_compiling():  # traced into nothing (its start hook was skipped)
            return
        view = me()
        stack = view._recording.get(_key(f"{name} (owner)")) if view is not None else None
        if stack:
            stack.pop()[0].__exit__(None, None, None)

    return hook


def _guard(view: AttentionView, name: str, step: Callable[[str], Any]) -> Any:
    try:
        return step(name)
    except Exception as error:  # never break the user's forward
        failed(view.on_failure, name, "attention", error)
    return None
