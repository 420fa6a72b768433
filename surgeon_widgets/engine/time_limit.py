"""Run a call under a wall-clock limit, in the calling thread, and abort it past the limit.

Used by :mod:`.tracing` to give up on a dynamic-shape ``torch.export`` that takes too long
(a tiny Swin with symbolic heights and widths: 49 s, against 0.5-0.9 s with static shapes).

Why in-process. A child process was the other choice, and costs more than most traces: spawn
re-imports torch (and transformers) and unpickles the model, seconds on two cores, and the
``ExportedProgram`` must then be bound back to the user's own parameters; fork is unsafe in a
Jupyter kernel, which runs threads. A predictor alone is not a time limit.

How. A timer thread raises :class:`TimeLimitExceeded` in the calling thread through CPython's
``PyThreadState_SetAsyncExc``, so it works on any thread (a kernel subshell too) and leaves
``SIGALRM`` to the user (pytest-timeout, their own alarms). It lands between two bytecodes: a
long C++ call finishes first. It derives from ``BaseException``, so no ``except Exception`` in
torch swallows it, and it is raised again every half second until the call has returned.

What an abort leaves behind, measured (``benchmarks/bench_trace.py`` prints the ratio). Every
``with`` and ``finally`` in torch unwinds; what torch.export does not undo on *any* exception
is the dynamic-dimension markers it sets on the input tensors (``_dynamo_weak_dynamic_indices``
and co., cleared only at the end of a successful export). The next "static" export of the same
tensors then traced symbolic heights and widths again: 88-195 s instead of 0.5-0.9 s, the
"process left slow" seen after a SIGALRM abort. :mod:`.tracing` therefore exports aliases of the
example tensors. Besides, should the abort land inside a restore, :func:`call_within` puts back
the process state a trace swaps (:class:`_ProcessState`).

>>> call_within(5.0, lambda: 1 + 1)
2
>>> import time
>>> call_within(0.05, lambda: time.sleep(0.01) or [time.sleep(0.01) for _ in range(100)])
Traceback (most recent call last):
...
surgeon_widgets.engine.time_limit.TimeLimitExceeded: took longer than the time limit of 0.05 s
"""

from __future__ import annotations

import builtins
import ctypes
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from .torch_internals import MODE_STACKS, TRACE_CONFIGS, ModeStacks

__all__ = ["TimeLimitExceeded", "call_within"]

T = TypeVar("T")
_RESEND = 0.5  # seconds between two raises, should torch swallow one
_POLL = 0.01  # how often the timer looks whether the call has returned


class TimeLimitExceeded(BaseException):
    """The call ran past its time limit and was aborted."""


def call_within(seconds: float | None, call: Callable[[], T]) -> T:
    """``call()``, aborted with :class:`TimeLimitExceeded` after ``seconds`` (``None``: no limit).

    After an abort the process state a trace swaps is as before the call (see the module).
    Where torch lacks what that restore needs (:data:`.torch_internals.MODE_STACKS`), the call
    runs without a limit.
    """
    if seconds is None or not MODE_STACKS.available:
        return call()
    before = _ProcessState.capture()
    watch = _Watch(threading.get_ident(), seconds)
    try:
        try:
            watch.entered = True  # raising before this line would land outside the handlers
            return call()
        finally:
            _disarm(watch)
    except TimeLimitExceeded:
        _disarm(watch)  # done before restoring: no raise may land in the restore
        before.restore()
        raise TimeLimitExceeded(f"took longer than the time limit of {seconds:g} s") from None
    except Exception as error:
        if not watch.fired:
            raise
        # the abort landed in a handler of the call that raised something else instead (seen:
        # an AssertionError out of torch.export's cleanup): it is still the time limit
        before.restore()
        raise TimeLimitExceeded(f"took longer than the time limit of {seconds:g} s") from error


def _disarm(watch: _Watch) -> None:
    """Stop the timer. The one raise it may have sent just before can land in here: retry."""
    while True:
        try:
            watch.disarm()
            return
        except TimeLimitExceeded:
            pass


class _Watch:
    """A daemon thread that raises :class:`TimeLimitExceeded` in ``thread`` after ``seconds``.

    The watched thread only stores a flag, joins the timer (``Thread.join`` survives an
    exception landing in it, bpo-45274) and drops a pending raise: no lock or event that an
    exception landing mid-way could leave held.
    """

    def __init__(self, thread: int, seconds: float) -> None:
        self._thread = thread
        self._armed = True
        self.entered = False
        self.fired = False  # a raise was sent
        self._deadline = time.monotonic() + max(seconds, 0.0)
        self._timer = threading.Thread(target=self._run, daemon=True,
                                       name="surgeon-widgets-time-limit")  # fmt: skip
        self._timer.start()

    def _run(self) -> None:
        while self._armed and (not self.entered or time.monotonic() < self._deadline):
            time.sleep(min(_POLL, max(self._deadline - time.monotonic(), 0.0)) or _POLL)
        while self._armed:
            self.fired = True
            _raise_in(self._thread, TimeLimitExceeded)
            resend = time.monotonic() + _RESEND
            while self._armed and time.monotonic() < resend:
                time.sleep(_POLL)

    def disarm(self) -> None:
        self._armed = False
        self._timer.join()  # from here on the timer sends nothing
        _raise_in(self._thread, None)  # drop a raise sent but not yet delivered


def _raise_in(thread: int, exception: type[BaseException] | None) -> None:
    set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_async(ctypes.c_ulong(thread), ctypes.py_object(exception) if exception else None)


class _ProcessState:
    """What a trace swaps for the process and must give back: ``builtins.min``/``max`` and
    ``math.pow`` (non-strict export's overrides), the torch function and dispatch mode stacks,
    grad mode, the tracing context, the recursion limit and the dynamo / export / fx configs."""

    def __init__(self, stacks: ModeStacks) -> None:
        self.stacks = stacks
        self.functions = (builtins.min, builtins.max, math.pow)
        self.function_modes = stacks.function_depth()
        self.dispatch_modes = stacks.dispatch_depth()
        self.infra_modes = {key: stacks.get_infra(key) for key in stacks.infra_keys}
        self.grad = torch.is_grad_enabled()
        self.tracing_context = stacks.tracing_context()
        self.recursion_limit = sys.getrecursionlimit()
        self.configs = {
            name: sys.modules[name].get_config_copy() for name in TRACE_CONFIGS
            if hasattr(sys.modules.get(name), "get_config_copy")
        }  # fmt: skip

    @classmethod
    def capture(cls) -> _ProcessState:
        stacks = MODE_STACKS.get()
        if stacks is None:
            raise RuntimeError(f"cannot read torch's mode stacks: {MODE_STACKS.degraded}")
        return cls(stacks)

    def differences(self) -> list[str]:
        """What differs from now (empty: nothing), for tests and the benchmark."""
        now = _ProcessState(self.stacks)
        fields = ("functions", "function_modes", "dispatch_modes", "infra_modes", "grad",
                  "tracing_context", "recursion_limit")  # fmt: skip
        changed = [f for f in fields if getattr(self, f) != getattr(now, f)]
        for name, config in self.configs.items():
            other = now.configs.get(name, {})
            changed += [f"{name}.{k}" for k, v in config.items() if other.get(k) != v]
        return changed

    def restore(self) -> None:
        stacks = self.stacks
        builtins.min, builtins.max, math.pow = self.functions
        while stacks.function_depth() > self.function_modes:
            stacks.pop_function()
        for key, mode in self.infra_modes.items():  # fake, proxy, functional: one slot each
            if stacks.get_infra(key) is not mode:
                stacks.unset_infra(key)
                if mode is not None:
                    stacks.set_infra(mode)
        while stacks.dispatch_depth() > self.dispatch_modes:
            stacks.pop_dispatch()
        torch.set_grad_enabled(self.grad)
        stacks.set_tracing_context(self.tracing_context)
        sys.setrecursionlimit(self.recursion_limit)
        for name, config in self.configs.items():
            module: Any = sys.modules[name]
            now = module.get_config_copy()
            for key, value in config.items():
                if now.get(key) != value:
                    setattr(module, key, value)
