"""What a step is: one forward of the watched model (its root module), shared by every view.

A :class:`StepClock` puts one forward pre-hook on the model the user handed to the Explorer.
Each forward the user runs moves ``step`` on by one and notes ``training`` (train/eval mode);
every layer, gradient and attention map recorded in that forward carries the same step and
mode. Forwards the package runs itself (:func:`~surgeon_widgets.engine.guard.internal`) and
traces (fx, export, fake or meta values) never count.

For a ``torch.compile``'d model the hook sits on the compiled wrapper, outside the compiled
region, so it costs no graph break. (That dynamo notices hooks added after a compile is the
Explorer's :mod:`..runtime.hook_guards` lease, not the clock's: a clock changes no global state.)

Other parts may run code on the model thread at the start of each forward (e.g. trait changes
posted from another thread) with their own root pre-hook; the clock does not depend on order.

>>> import torch
>>> from torch import nn
>>> model = nn.Linear(2, 2)
>>> clock = StepClock(model)
>>> _ = model(torch.ones(1, 2)); _ = model.eval()(torch.ones(1, 2))
>>> clock.step, clock.training
(1, False)
>>> clock.close()
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch import nn

from ...engine import guard
from ...engine.registry import HookRegistry
from ...engine.wrappers import unwrap
from ..runtime.compiled import compile_safe, is_compiled

__all__ = ["StepClock"]


class StepClock:
    """Counts forwards of ``model``: ``step`` is the index of the latest (``-1`` before any).

    Args:
        model: the model as the user calls it (a ``torch.compile`` wrapper stays wrapped).
        attached: start counting now (else at :meth:`attach`).
    """

    def __init__(self, model: nn.Module, attached: bool = True) -> None:
        self.step = -1
        self.model = model
        self.training = unwrap(model).training
        self.compiled = is_compiled(model)
        self.registry = HookRegistry("Explorer steps")
        self._listeners: list[Callable[[int, Any, Any], None]] = []
        if attached:
            self.attach()

    def attach(self, this_forward: bool = False) -> None:
        """Count forwards from now on (the Explorer attaches while any layer is selected).

        ``this_forward``: called from another root pre-hook, in a forward that has begun (a
        hook added now first runs at the next one): count this forward too.
        """
        if len(self.registry):
            return
        self.registry.forward_pre(self.model, _tick(weakref.ref(self)), name="", with_kwargs=True)
        if this_forward:
            self.step += 1
            self.training = unwrap(self.model).training

    def listen(self, listener: Callable[[int, Any, Any], None]) -> None:
        """Call ``listener(step, args, kwargs)`` after each counted forward began (it must
        not raise: the user's forward is running)."""
        self._listeners.append(listener)

    def close(self) -> None:
        """Stop counting (remove the hooks); ``attach()`` resumes."""
        self.registry.remove()

    def __del__(self) -> None:
        self.close()

    def count(self, args: Any, kwargs: Any) -> None:
        """Count a forward of the model called with ``args`` / ``kwargs`` (unless a trace or
        the package's own): for a caller that sees each call itself, instead of the hook."""
        if guard.inert(args, kwargs):
            return
        self.step += 1
        self.training = unwrap(self.model).training
        for listener in self._listeners:
            listener(self.step, args, kwargs)

    def _tick(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        self.count(args, kwargs)


def _tick(me: weakref.ref[StepClock]):
    def observe(module: nn.Module, args: Any, kwargs: Any) -> None:
        clock = me()
        if clock is not None:
            clock._tick(module, args, kwargs)

    return compile_safe(observe)  # eager unless the user compiled a model around this one
