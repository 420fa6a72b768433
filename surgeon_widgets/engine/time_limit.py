"""Run a call under a deadline that the model checks at its own module boundaries.

Used by :mod:`.tracing` to give up on a dynamic-shape ``torch.export`` that takes too long
(a tiny Swin with symbolic heights and widths: about a minute, against 0.5-0.9 s with static
shapes).

How. For the call, every module of the model gets a forward pre-hook (through a
:class:`.registry.HookRegistry`, removed on every path) that raises :class:`TimeLimitExceeded`,
an ordinary ``Exception``, once the deadline has passed. Non-strict ``torch.export`` runs the
model's Python forward, hooks included, so the abort comes out of a module call: a place where
the model's own code could raise, and where torch's error paths (every ``with`` and
``finally``: the user's real parameters swapped back, modes popped, configs restored) unwind
as for any error in a model. Nothing runs on another thread and nothing is injected. The hook
returns ``None`` and touches no tensor: it adds nothing to the traced graph. Unlike the
package's live hooks it does not ask :func:`.guard.inert` (it must act precisely under a
trace); it acts only in the context that armed it, so the same module called by user code on
another thread is never aborted.

Granularity. The abort comes at the next module call after the deadline: on the tiny Swin,
module calls during a dynamic export are at most a few seconds apart (``benchmarks/
bench_trace.py`` prints the overshoot). Work after the last module call (export's guard and
constraint solving) runs to its end.

What an abort leaves behind: torch.export clears the dynamic-dimension markers it sets on its
input tensors (``_dynamo_weak_dynamic_indices`` and co.) only when it succeeds; left on the
user's tensors, every later "static" export of them traced symbolically (minutes instead of
seconds). :mod:`.tracing` therefore exports aliases of the example tensors.

>>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
>>> call_within(5.0, lambda: model(torch.ones(1, 2)).shape, model=model)
torch.Size([1, 2])
>>> call_within(0.0, lambda: model(torch.ones(1, 2)), model=model)
Traceback (most recent call last):
...
surgeon_widgets.engine.time_limit.TimeLimitExceeded: took longer than the time limit of 0 s
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from typing import Any, TypeVar

from torch import nn

from .registry import HookRegistry

__all__ = ["TimeLimitExceeded", "call_within"]

T = TypeVar("T")


class TimeLimitExceeded(Exception):
    """A call ran past its time limit and was stopped at a module call of the model."""


class _Deadline:
    """One armed limit: the monotonic time past which the model's next module call raises."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + max(seconds, 0.0)
        self.fired = False

    def error(self) -> TimeLimitExceeded:
        return TimeLimitExceeded(f"took longer than the time limit of {self.seconds:g} s")

    def check(self, module: nn.Module, args: Any) -> None:
        # only in the context that armed it: the model may run user code on another thread
        if _ARMED.get() is self and time.monotonic() >= self.at:
            self.fired = True
            raise self.error()


_ARMED: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar(
    "surgeon_widgets_deadline", default=None
)


def call_within(seconds: float | None, call: Callable[[], T], *, model: nn.Module) -> T:
    """``call()``, stopped with :class:`TimeLimitExceeded` at the first module call of ``model``
    after ``seconds`` (``None``: no limit). ``call`` must run ``model`` on this thread."""
    if seconds is None:
        return call()
    deadline = _Deadline(seconds)
    token = _ARMED.set(deadline)
    try:
        with HookRegistry("time limit") as hooks:
            for name, module in model.named_modules():
                hooks.forward_pre(module, deadline.check, name=name, prepend=True)
            return call()
    except TimeLimitExceeded:
        raise
    except Exception as error:
        if not deadline.fired:
            raise
        # the abort was caught on its way out and turned into another error: still the limit
        raise deadline.error() from error
    finally:
        _ARMED.reset(token)
