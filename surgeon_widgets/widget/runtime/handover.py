"""Hand trait changes made on another thread over to the thread that runs the model.

A click in the browser can arrive on a kernel subshell thread while the user's training cell
runs on the main thread. Attaching hooks, tracing the model or changing the throttle from
there would race the running forward, so observers of the traits the browser can change run
on the model's thread instead: a change made on another thread is only posted to an inbox,
and the inbox is applied in a forward pre-hook on the root module at the next forward (or on
the kernel's main loop once the cell finishes, whichever comes first). On the main thread a
change applies at once, after anything still pending, so the order of changes is kept.

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
    """

    def __init__(
        self,
        model: nn.Module,
        schedule: Callable[[Callable[[], None]], None] | None = None,
        hooked: bool = True,
    ) -> None:
        self._inbox: dict[str, tuple[Callable[[Any], None], Any]] = {}
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
        if self._schedule is not None:
            try:
                self._schedule(self.flush)
            except Exception:  # the loop is gone (kernel shutting down): the pre-hook still runs
                log.debug("Explorer: could not schedule the inbox on the main loop", exc_info=True)

    def flush(self) -> None:
        """Apply every pending change here, in the order they were posted."""
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
        self._hook(False)

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
        """Remove the pre-hook and drop what is pending."""
        with self._lock:
            self._inbox.clear()
        self.poll = None


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
