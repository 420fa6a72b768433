"""Hand trait changes made on another thread over to the thread that runs the model.

A click in the browser can arrive on a kernel subshell thread while the user's training cell
runs on the main thread. Attaching hooks, tracing the model or changing the throttle from
there would race the running forward, so observers of the traits the browser can change run
on the model's thread instead: a change made on another thread is only posted to an inbox,
and the inbox is applied in a forward pre-hook on the root module at the next forward (or on
the kernel's main loop once the cell finishes, whichever comes first). On the main thread a
change applies at once, after anything still pending, so the order of changes is kept.

Traces are not changes: a trace (the tree's graph nodes, the cut's report) can take seconds
and an fx trace patches ``nn.Module.__call__`` for the whole process, so it must never run
inside the user's forward nor on a thread beside the user's code. An observer that needs one
hands it to :meth:`Handover.later`: it runs at once on the main thread between forwards
(the user's own code, or the kernel's main loop), and otherwise waits, named by a key, until
the main thread is free: the kernel's main loop (``schedule``) runs it when the running cell
ends, or right away when the kernel is idle; outside a kernel, the next change made on the
main thread. ``waiting(True)`` / ``waiting(False)`` tell the owner when work starts and stops
waiting (the Explorer shows "tracing..." meanwhile).

The pre-hook is registered only while a change is pending or the drain fallback (see
:mod:`.kernel_comms`) is on, which reads this widget's pending messages from it (about a
microsecond per forward between two drains). It sits on the model as the user calls it (the
``torch.compile`` wrapper, outside the compiled region; made with ``hooked=False``, none: the
owner calls :meth:`Handover.at_forward` from its own stand-in for the model's compiled call,
:mod:`.eager_steps`). Where dynamo traces the root's hooks
anyway (``torch.compile`` applied to the module later, or to a ``torch.nn`` container, whose
hooks dynamo inlines), the hook runs eagerly through ``torch.compiler.disable`` (one graph
break, only while it is registered), so a click still applies at the next forward.

>>> import threading, torch
>>> from torch import nn
>>> model = nn.Linear(2, 2)
>>> seen = []
>>> inbox = Handover(model)
>>> t = threading.Thread(target=inbox.post, args=("selected", seen.append, "x"))
>>> t.start(); t.join()
>>> seen, inbox.pending
([], ['selected'])
>>> _ = model(torch.ones(1, 2))  # the next forward applies it, on this thread
>>> seen, inbox.pending, len(inbox.registry)
(['x'], [], 0)
>>> traced = []
>>> inbox.in_forward = True  # as in the pre-hook: a forward has begun
>>> inbox.later("nodes", lambda: traced.append("nodes"))
>>> inbox.in_forward = False
>>> traced, inbox.waiting_work
([], ['nodes'])
>>> inbox.flush()  # the main thread between forwards (the kernel's loop at the cell's end)
>>> traced, inbox.waiting_work
(['nodes'], [])
>>> inbox.close()
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from torch import nn

from ...engine import guard
from ...engine.registry import HookRegistry
from .compiled import compile_safe

__all__ = ["Handover", "messages_on_model_thread"]

log = logging.getLogger("surgeon_widgets.explorer")


class Handover:
    """An inbox of changes for ``model``'s thread, applied by a root forward pre-hook.

    Args:
        model: the root module; its forward pre-hook applies the inbox.
        schedule: thread-safe ``schedule(fn)`` that runs ``fn`` on the main thread when it is
            free (the kernel's io loop); ``None`` outside a kernel.
        hooked: ``False``: no pre-hook; the owner calls :meth:`at_forward` at each forward.
        waiting: called with ``True`` when work handed to :meth:`later` starts waiting for
            the main thread, ``False`` once none waits (on the thread that changed it).
    """

    def __init__(
        self,
        model: nn.Module,
        schedule: Callable[[Callable[[], None]], None] | None = None,
        hooked: bool = True,
        waiting: Callable[[bool], None] | None = None,
    ) -> None:
        self._inbox: dict[str, tuple[Callable[[Any], None], Any]] = {}
        self._later: dict[str, Callable[[], None]] = {}  # traces waiting for a free main thread
        self._waiting = waiting
        self._lock = threading.Lock()
        self._applying = threading.RLock()  # an applied change may post another
        self._schedule = schedule
        self._model = model
        self._hooked = hooked  # False: the owner calls at_forward() at each forward instead
        self._poll: Callable[[], None] | None = None
        self.registry = HookRegistry("Explorer handover")  # the pre-hook, only while needed
        self.in_forward = False  # applying from the pre-hook: a forward has begun

    @property
    def poll(self) -> Callable[[], None] | None:
        """Called from every forward's pre-hook while set (the drain fallback; rate-limited)."""
        return self._poll

    @poll.setter
    def poll(self, fn: Callable[[], None] | None) -> None:
        self._poll = fn
        self._hook(fn is not None)

    def _hook(self, wanted: bool) -> None:
        if not self._hooked:
            return
        with self._lock:
            if wanted and not len(self.registry):
                self.registry.forward_pre(self._model, _pre_hook(weakref.ref(self)), name="")
            elif not wanted and len(self.registry) and not self._inbox and self._poll is None:
                self.registry.remove()

    @property
    def pending(self) -> list[str]:
        """Keys of the changes waiting for the model's thread, oldest first."""
        with self._lock:
            return list(self._inbox)

    @property
    def waiting_work(self) -> list[str]:
        """Keys of the work handed to :meth:`later` that waits for the main thread."""
        with self._lock:
            return list(self._later)

    def free(self) -> bool:
        """Is this the model's thread between two forwards, where a trace may run now?"""
        return (
            threading.current_thread() is threading.main_thread()
            and not self.in_forward
            and not guard.is_internal()
            and not guard.tracing()
        )

    def later(self, key: str, work: Callable[[], None]) -> None:
        """Run ``work`` (it traces the model) on the main thread between forwards: at once when
        this is one, else when it is free (see the module's docstring); a newer ``key`` replaces
        a waiting one. ``work`` reads the state it needs when it runs, not when it was handed."""
        if self.free():
            with self._lock:
                dropped = self._later.pop(key, None) is not None
            self._run(key, work)
            if dropped:
                self._tell_waiting()
            return
        with self._lock:
            first = not self._later
            self._later.pop(key, None)
            self._later[key] = work
        if first and self._waiting is not None:
            self._waiting(True)
        self._schedule_flush()

    def drop(self, key: str) -> None:
        """Forget the work waiting under ``key`` (no longer needed: the switch went back off)."""
        with self._lock:
            dropped = self._later.pop(key, None) is not None
        if dropped:
            self._tell_waiting()

    def _run(self, key: str, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:
            log.exception("Explorer: %r failed", key)

    def _tell_waiting(self) -> None:
        with self._lock:
            waiting = bool(self._later)
        if not waiting and self._waiting is not None:
            self._waiting(False)

    def _schedule_flush(self) -> None:
        if self._schedule is not None:
            try:
                self._schedule(self.flush)
            except Exception:  # the loop is gone (kernel shutting down): the pre-hook still runs
                log.debug("Explorer: could not schedule the inbox on the main loop", exc_info=True)

    def post(self, key: str | None, apply: Callable[[Any], None], value: Any) -> None:
        """Run ``apply(value)`` on the model's thread; a newer post of ``key`` replaces it.

        ``key=None``: never replaced (a message, not a state).
        """
        if key is None:
            key = f"message {next(_messages)}"
        if threading.current_thread() is threading.main_thread():
            self.flush()
            apply(value)
            return
        with self._lock:
            self._inbox.pop(key, None)  # the newest change of a key goes last, in order
            self._inbox[key] = (apply, value)
        self._hook(True)
        self._schedule_flush()

    def flush(self) -> None:
        """Apply every pending change here, in the order they were posted; then, on the main
        thread between forwards, run the work waiting for it (:meth:`later`)."""
        with self._applying:  # the pre-hook and the main loop never apply at the same time
            while True:
                with self._lock:
                    if not self._inbox:
                        break
                    key = next(iter(self._inbox))
                    apply, value = self._inbox.pop(key)
                try:
                    apply(value)
                except Exception:
                    log.exception("Explorer: applying a change of %r failed", key)
            ran = False
            while self._later and self.free():
                with self._lock:
                    if not self._later:
                        break
                    key = next(iter(self._later))
                    work = self._later.pop(key)
                self._run(key, work)
                ran = True
        self._hook(False)
        if ran:
            self._tell_waiting()

    def at_forward(self) -> None:
        """What the pre-hook does at the start of a forward: the drain, then the inbox. For an
        owner made with ``hooked=False`` that sees each call itself (outside compiled code)."""
        poll = self._poll
        self.in_forward = True
        try:
            if poll is not None and time.monotonic() >= getattr(poll, "next", 0.0):
                poll()  # the drain: due at most every 100 ms; checks the tracers itself
            if self._inbox and not (guard.is_internal() or guard.tracing()):
                self.flush()
        finally:
            self.in_forward = False

    def close(self) -> None:
        """Remove the pre-hook and drop what is pending or waiting."""
        with self._lock:
            self._inbox.clear()
            dropped = bool(self._later)
            self._later.clear()
        self.poll = None
        if dropped:
            self._tell_waiting()


_messages = itertools.count()


def messages_on_model_thread(
    handover: Handover, handler: Callable[[Any, Any, Any], None], at_once: frozenset[str]
) -> Callable[[Any, Any, Any], None]:
    """Wrap a widget's ``on_msg`` handler: message types not in ``at_once`` run on the model's
    thread (they may change hooks or trace the model); ``at_once`` ones (read-only) run here."""

    def handle(widget: Any, content: Any, buffers: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind in at_once:
            handler(widget, content, buffers)
        else:
            handover.post(None, lambda _: handler(widget, content, buffers), None)

    return handle


def _pre_hook(me: weakref.ref[Handover]):
    def hook(module: nn.Module, args: Any) -> None:
        inbox = me()
        if inbox is not None:
            inbox.at_forward()

    return compile_safe(hook)  # under torch.compile: eagerly, never traced into the graph
