"""Run a call under a deadline that the model checks at its own module and torch calls.

Used by :mod:`.tracing` to give up on a dynamic-shape ``torch.export`` that takes too long
(a tiny Swin with symbolic heights and widths: about a minute, against 0.5-0.9 s with static
shapes).

How. Past the deadline, :class:`TimeLimitExceeded`, an ordinary ``Exception``, is raised where
the model's own code could raise: by a forward pre-hook at the model's next module call (every
module gets one, through a :class:`.registry.HookRegistry`, removed on every path), and once by
the model's next torch call inside its forward (a ``TorchFunctionMode``, pushed on the calling
thread only). Non-strict ``torch.export`` runs the model's Python forward, hooks and torch calls
included, so torch's error paths unwind as for any error in a model: every ``with`` and
``finally`` (the user's real parameters swapped back, modes popped, configs restored). Nothing
runs on another thread and nothing is injected. The checks return ``None`` and call no op: they
add nothing to the traced graph. Unlike the package's live hooks they do not ask
:func:`.guard.inert` (they must act precisely under a trace); they act only in the context that
armed them, so the same modules called by user code on another thread are never aborted.

Why both. Module calls of a symbolic Swin can be a minute apart on a loaded machine: one
shape computation (a ``view``) can take most of it. Measured on a shared 2-core machine, past
deadlines of 2-40 s: module calls alone stopped that export 1.9-14.7 s late (0.2-21.6 s under
heavier load), module and torch calls 0.03-4.4 s late. Work after the model's forward (export's
guard and constraint solving) runs to its end.

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
from torch.overrides import TorchFunctionMode

from .registry import HookRegistry

__all__ = ["TimeLimitExceeded", "call_within"]

T = TypeVar("T")


class TimeLimitExceeded(Exception):
    """A call ran past its time limit and was stopped at a module or torch call of the model."""


class _Deadline(TorchFunctionMode):
    """One armed limit: past ``at`` (monotonic), the model's next module call raises, and so does
    its next torch call made inside the model's forward (once: torch's cleanup after the abort
    may call torch functions and must run to its end)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.at = time.monotonic() + max(seconds, 0.0)
        self.fired = False
        self.in_forward = 0  # the model's forward is running (root pre-hook .. forward hook)

    def error(self) -> TimeLimitExceeded:
        self.fired = True
        return TimeLimitExceeded(f"took longer than the time limit of {self.seconds:g} s")

    def check(self, module: nn.Module, args: Any) -> None:
        # only in the context that armed it: the model may run user code on another thread
        if _ARMED.get() is self and time.monotonic() >= self.at:
            raise self.error()

    def enter(self, module: nn.Module, args: Any) -> None:
        if _ARMED.get() is self:
            self.in_forward += 1

    def leave(self, module: nn.Module, args: Any, output: Any) -> None:
        if _ARMED.get() is self:  # always called, also when the forward raised
            self.in_forward -= 1

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        # a torch function mode is per thread: this sees only the calling thread's torch calls
        if self.in_forward and not self.fired and time.monotonic() >= self.at:
            raise self.error()
        return func(*args, **(kwargs or {}))


_ARMED: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar(
    "surgeon_widgets_deadline", default=None
)


def call_within(seconds: float | None, call: Callable[[], T], *, model: nn.Module) -> T:
    """``call()``, stopped with :class:`TimeLimitExceeded` at the first module or torch call of
    ``model`` after ``seconds`` (``None``: no limit). ``call`` must run ``model`` on this thread."""
    if seconds is None:
        return call()
    deadline = _Deadline(seconds)
    token = _ARMED.set(deadline)
    try:
        with HookRegistry("time limit") as hooks:
            for name, module in model.named_modules():
                hooks.forward_pre(module, deadline.check, name=name, prepend=True)
            hooks.forward_pre(model, deadline.enter, prepend=True)  # before the check: balanced
            hooks.forward(model, deadline.leave, always_call=True)
            with deadline:
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
