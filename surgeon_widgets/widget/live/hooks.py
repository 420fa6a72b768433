"""Activation and gradient hooks of the selected modules: attach, reduce, report, detach.

Forward hooks go on the selected modules only (through one :class:`HookRegistry`). With
gradients on, each due forward also puts a tensor hook on the output's leaves, which fires
with the gradient of that output during ``backward()``. (Full module backward hooks would
break models that modify a module's output in place, e.g. ResNet's ``ReLU(inplace=True)``
after ``bn1``: "Output 0 of BackwardHookFunction is a view and is being modified inplace".)

A hook that is not due (:class:`~.throttle.Throttle`: ``max_rate`` and the 2% time budget)
returns before any reduction. A hook that raised reports through :func:`~.failures.failed`;
the user's forward and backward go on.

Every hook first checks :func:`~surgeon_widgets.engine.guard.inert`: under fx / export /
functorch / fake tensors and inside the package's own forwards it returns at once, so traces
of the model never contain our ops. It also ignores copies of the hooked module (``Extract``
copies modules, hooks included). Under ``torch.compile`` the hook body runs through
``torch.compiler.disable``: the reduction stays out of the user's graph. The step of a record
is the :class:`~.steps.StepClock`'s (one forward of the watched model), with its train/eval mode.

>>> import torch
>>> from torch import nn
>>> model = nn.Sequential(nn.Linear(2, 2))
>>> got = []
>>> live = LiveHooks(model, got.extend, max_rate=0)
>>> live.sync(["0"], gradients=False)
>>> _ = model(torch.ones(1, 2))
>>> live.close()
>>> [r.key for r in got], len(model[0]._forward_hooks)
(['0/output'], 0)
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from ...engine import guard
from ...engine.registry import HookRegistry
from ...engine.stats import tensor_stats
from ...engine.tensors import iter_tensors
from ..history import Record
from ..runtime.compiled import compile_safe
from .failures import Failure, failed, log_failure
from .steps import StepClock
from .throttle import Throttle

__all__ = ["LiveHooks", "leaf_label", "meta_values"]

MAX_PENDING_GRAD_HOOKS = 16  # per layer: the newest gradient hooks waiting for a backward


def leaf_label(base: str, label: str) -> str:
    """``("output", "")`` -> ``output``; ``"[0]"`` -> ``output[0]``; ``"logits"`` -> ``logits``."""
    if not label:
        return base
    if label.startswith("["):
        return base + label
    return label.lstrip(".")


class LiveHooks:
    """Forward (and gradient) hooks on a set of modules of ``model``, reporting :class:`Record`s.

    Args:
        model: the model whose submodules are hooked (names as in ``get_layers``).
        sink: called with the records of one layer's update (from inside the hook).
        on_failure: called with ``(layer, kind, error)`` when our hook raised.
        max_rate: most updates a second per layer and kind; ``0`` means every call.
        clock: the shared :class:`StepClock` (default: one on ``model``, owned by these hooks).
        throttle: the shared :class:`Throttle` (default: one at ``max_rate``).
        on_meta: called with the layer name when a hooked layer ran on meta tensors.
    """

    def __init__(
        self,
        model: nn.Module,
        sink: Callable[[list[Record]], None],
        on_failure: Failure = log_failure,
        max_rate: float = 10.0,
        clock: StepClock | None = None,
        throttle: Throttle | None = None,
        on_meta: Callable[[str], None] | None = None,
    ) -> None:
        self.model = model
        self.sink = sink
        self.on_failure = on_failure
        self.on_meta = on_meta
        self._own_clock = clock is None
        self.clock = clock if clock is not None else StepClock(model)
        self.throttle = throttle if throttle is not None else Throttle(max_rate)
        self.gradients = False
        self.registry = HookRegistry("Explorer")
        # one-shot tensor hooks of outputs whose backward has not come yet (see watch_gradients)
        self._grad_hooks = HookRegistry("Explorer gradients")
        self._newest: dict[str, deque[Any]] = {}  # per layer: its newest gradient hooks' handles
        self._attached: set[str] = set()
        self._wanted: set[str] = set()
        self._backward: set[str] = set()  # layers whose gradient came: their key shares too
        self._watched_at: dict[str, float] = {}  # per layer: when gradient hooks last went on

    @property
    def attached(self) -> list[str]:
        return sorted(self._attached)

    def sync(self, names: Iterable[str], gradients: bool) -> None:
        """Hook exactly the modules ``names``: attach the new ones, remove the dropped ones."""
        wanted = set(names)
        self.gradients = gradients
        if not gradients:
            self._grad_hooks.remove()
            self._newest.clear()
        for name in (self._attached | set(self._newest)) - wanted:
            self.registry.remove(name)
            self._grad_hooks.remove(name)
            self._newest.pop(name, None)
        self.throttle.keep(lambda k: _layer_of(k[0], wanted) and (gradients or k[1] != "gradient"))
        self._wanted = wanted
        self._backward &= wanted if gradients else set()
        self._share()
        me = weakref.ref(self)  # hooks must not keep the widget alive
        for name in sorted(wanted - self._attached):
            module = self.model.get_submodule(name)
            self.registry.forward(module, _forward_hook(me, name, module), name=name)
        self._attached = wanted

    def _share(self) -> None:
        # gradient keys share the time budget once a backward brought one: eval-only use
        # (gradients on, no backward) keeps the activations' rate of gradients=False
        self.throttle.keys = len(self._wanted) + len(self._backward)

    def backward_seen(self, name: str) -> None:
        """A gradient of layer ``name`` came: from now on its key shares the budget."""
        if name not in self._backward and name in self._wanted:
            self._backward.add(name)
            self._share()

    def park(self, gradients: bool = False) -> None:
        """Take the forward hooks off (the next :meth:`sync` puts them back); ``gradients``:
        the gradient hooks of past forwards too (their backward is done)."""
        self.registry.remove()
        self._attached = set()
        if gradients:
            self._grad_hooks.remove()
            self._newest.clear()

    def close(self) -> None:
        """Remove every hook."""
        self.registry.remove()
        self._grad_hooks.remove()
        self._newest.clear()
        self._attached = set()
        if self._own_clock:
            self.clock.close()

    def __del__(self) -> None:
        self.close()

    def due(self, key: tuple[str, str]) -> tuple[bool, int]:
        """Is an update of ``key`` = ``(name, kind)`` due (the throttle's)? Also the step."""
        return self.throttle.due(key), max(self.clock.step, 0)

    def report(
        self,
        key: tuple[str, str],
        name: str,
        step: int,
        base: str,
        value: Any,
        training: bool | None = None,
    ) -> None:
        """Reduce every tensor leaf of ``value`` (layer ``name``) and hand records to the sink."""
        kind = key[1]
        mode = self.clock.training if training is None else training
        start = time.perf_counter()
        at = self.throttle.now()
        try:
            records = [
                Record(f"{name}/{leaf}", name, leaf, kind, step, tensor_stats(t), mode, at)
                for label, t in iter_tensors(value)
                for leaf in [leaf_label(base, label)]
            ]
            if records:
                self.sink(records)
        except Exception as error:  # never break the user's forward
            failed(self.on_failure, name, kind, error)
        self.throttle.note_cost(key, time.perf_counter() - start)

    def meta(self, name: str) -> None:
        if self.on_meta is not None:
            self.on_meta(name)

    def watch_gradients(self, name: str, output: Any) -> None:
        """Put a one-shot gradient hook on every leaf of ``output`` that will get a gradient.

        Each is removed once its backward ran or its output was freed, so ``live_hooks()``
        lists only the outputs still waiting for a backward (the ``hooks`` trait lists one
        ``gradient`` entry per layer: the promise, not these). With ``max_rate > 0`` a layer
        gets them at most ``2 * max_rate`` times a second (bench_grad_hooks: training 1.70x
        plain CPU instead of 2.18x, an eval loop under grad 2.57x instead of 3.41x, as many
        gradient updates).
        """
        if not torch.is_grad_enabled():
            return
        # a gradient is recorded at most max_rate times a second: hooks on every forward
        # would be wasted (and cost most in an eval loop under grad that never runs a
        # backward); twice that rate, so a gradient due between two is late by half a spacing
        rate = self.throttle.max_rate
        if rate > 0:
            now = self.throttle.now()
            if now - self._watched_at.get(name, -1e18) < 0.5 / rate:
                return
            self._watched_at[name] = now
        # forwards with no backward (outputs kept, e.g. an eval loop under grad) would pile
        # hooks up: a layer keeps its newest ones (a handle already gone is removed as a no-op)
        newest = self._newest.setdefault(name, deque())
        me = weakref.ref(self)
        step, training = max(self.clock.step, 0), self.clock.training  # of this forward
        for label, t in iter_tensors(output):
            if t.requires_grad:
                leaf = leaf_label("grad_output", label)
                hook = _grad_hook(me, name, leaf, step, training)
                newest.append(self._grad_hooks.tensor(t, hook, name=name, once=True))
                if len(newest) > MAX_PENDING_GRAD_HOOKS:
                    self._grad_hooks.discard(newest.popleft())


def _layer_of(key: str, layers: set[str]) -> bool:
    """Is ``key`` (``layer`` or ``layer/leaf``) of one of ``layers``?"""
    return key in layers or any(key.startswith(f"{name}/") for name in layers)


def meta_values(value: Any) -> bool:
    """Does ``value`` hold a meta tensor (outside any trace: a model built on ``meta``)?"""
    return any(t.is_meta for _, t in iter_tensors(value))


def _forward_hook(me: weakref.ref[LiveHooks], name: str, module: nn.Module):
    target = weakref.ref(module)

    def observe(hooked: nn.Module, args: Any, output: Any) -> None:
        live = me()
        if live is None or hooked is not target():
            return
        if guard.inert(output):
            if not guard.is_internal() and not guard.tracing() and meta_values(output):
                live.meta(name)
            return
        try:
            due, step = live.due((name, "activation"))
            if due:
                live.report((name, "activation"), name, step, "output", output)
            if live.gradients:
                live.watch_gradients(name, output)
        except Exception as error:
            failed(live.on_failure, name, "activation", error)

    return compile_safe(observe)


def _grad_hook(me: weakref.ref[LiveHooks], name: str, leaf: str, step: int, training: bool):
    def hook(grad: torch.Tensor) -> None:
        live = me()
        if live is None or not live.gradients or guard.inert(grad):
            return
        try:
            key = (f"{name}/{leaf}", "gradient")
            live.backward_seen(name)
            due, _ = live.due(key)
            if due:
                live.report(key, name, step, leaf, grad, training)
        except Exception as error:
            failed(live.on_failure, name, "gradient", error)

    return hook
