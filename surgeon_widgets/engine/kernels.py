"""Reductions compiled once per dtype into one fused CPU loop, built in the background.

A :class:`Kernel` is a function of tensors of any size, traced with symbolic sizes and compiled
by inductor (the door is :data:`~.torch_internals.COMPILE_KERNEL`). The ``after``-th
:meth:`Kernel.get` for a dtype starts its build on a thread of its own (a few seconds of a core,
much of it holding the GIL: short runs, which would not earn it back, never pay it) and until
it is done answers ``None``: the caller runs its eager path meanwhile, and for good where the
compiler is missing or fails (one warning says so). No dynamo frame runs it, so the user's
compiled graphs, their guards and ``torch.compiler.set_stance`` neither see it nor change it.

Example:
    >>> import torch
    >>> double = Kernel("double", lambda x: x * 2, lambda dtype: (torch.ones(5, 3, dtype=dtype),))
    >>> double.wait(torch.float32)
    True
    >>> double.get(torch.float32)(torch.ones(2, 7)).sum().item()
    28.0
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .torch_internals import COMPILE_KERNEL

__all__ = ["Kernel"]


def logging_lock_free(timeout: float = 5.0) -> bool:
    """Can this thread take ``logging``'s module lock (within ``timeout`` seconds)?

    A build traces with ``make_fx``, which logs, while it holds dynamo's compile lock. A trace
    aborted by :mod:`.time_limit` (an exception raised between two bytecodes) can leave that
    lock held by its thread for good, if it lands just after the lock is taken; the build would
    then wait for it forever, and any ``torch.compile`` of that thread for the compile lock.
    Asked first, a held lock costs the build (the eager path stays), not the process.

    >>> logging_lock_free()
    True
    """
    lock = getattr(logging, "_lock", None)  # CPython's; absent elsewhere: nothing to ask
    if lock is None or not hasattr(lock, "acquire"):
        return True
    if not lock.acquire(timeout=timeout):
        return False
    lock.release()
    return True


class Kernel:
    """``fn`` compiled per input dtype for CPU tensors; ``example(dtype)`` gives trace inputs.

    Example inputs should have sizes of 2 or more (sizes 0 and 1 are fixed into the build).
    ``after``: how many asks for a dtype start its build (1: the first).
    """

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        example: Callable[[torch.dtype], tuple[torch.Tensor, ...]],
        after: int = 1,
    ) -> None:
        self.name = name
        self.after = after
        self._fn = fn
        self._example = example
        self._asked: dict[torch.dtype, int] = {}
        self._built: dict[torch.dtype, Callable[..., Any] | None] = {}
        self._building: dict[torch.dtype, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, dtype: torch.dtype) -> Callable[..., Any] | None:
        """The compiled function for inputs of ``dtype``, or ``None`` (not built yet, or no
        compiler here): the ``after``-th ask starts the build."""
        if dtype in self._built or torch.compiler.is_compiling():  # built, or never will be
            return self._built.get(dtype)
        asked = self._asked[dtype] = self._asked.get(dtype, 0) + 1
        if asked >= self.after:
            self._start(dtype)
        return self._built.get(dtype)

    def wait(self, dtype: torch.dtype, timeout: float = 120.0) -> bool:
        """Build for ``dtype`` now (or wait for the build under way); ``True`` if it works."""
        done = self._start(dtype)
        if done is not None:
            done.wait(timeout)
        return self._built.get(dtype) is not None

    def _start(self, dtype: torch.dtype) -> threading.Event | None:
        with self._lock:
            if dtype in self._built or dtype in self._building:
                return self._building.get(dtype)
            compile_kernel = COMPILE_KERNEL.get()  # looked up here: its warning is the caller's
            if compile_kernel is None:
                self._built[dtype] = None
                return None
            done = self._building[dtype] = threading.Event()
        # not a daemon: at exit Python waits for the build (a daemon thread stopped inside the
        # C++ compiler's frames at finalization aborts the process)
        threading.Thread(
            target=self._build, args=(compile_kernel, dtype, done), daemon=False,
            name=f"surgeon_widgets {self.name} kernel",
        ).start()  # fmt: skip
        return done

    def _build(self, compile_kernel: Callable[..., Any], dtype: torch.dtype, done: Any) -> None:
        try:
            if not logging_lock_free():
                raise RuntimeError("logging's module lock is held by another thread")
            with torch.no_grad():
                built = compile_kernel(self._fn, *self._example(dtype))
        except Exception as error:  # no C++ compiler, an inductor bug: the eager path stays
            warnings.warn(
                f"the fused {self.name} kernel for {dtype} could not be built "
                f"({type(error).__name__}: {error}); the slower eager path is used",
                RuntimeWarning,
                stacklevel=1,
            )
            built = None
        with self._lock:
            self._built[dtype] = built
            del self._building[dtype]
        done.set()
