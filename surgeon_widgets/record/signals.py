"""SIGTERM / SIGINT: first a callback (the Recorder marks its run stopped), then what was there.

The handler that was installed before runs next, unchanged: the user's own (a graceful
shutdown keeps working), Python's ``KeyboardInterrupt`` for SIGINT, or the default action
(the process ends by that signal, as it would have without us). An ignored signal stays
ignored. Python runs signal handlers in the main thread only: elsewhere nothing is installed.

>>> import signal
>>> seen = []
>>> uninstall = on_stop_signals(seen.append)
>>> signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
True
>>> uninstall(); signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
True
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["STOP_SIGNALS", "on_stop_signals"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signals(callback: Callable[[int], None]) -> Callable[[], None]:
    """Run ``callback(signum)`` on SIGTERM / SIGINT, then the previous handler; returns an undo.

    The undo puts the previous handlers back where ours is still the installed one (a handler
    installed after ours keeps chaining to it; ours then only passes the signal on).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}
    active = [True]

    def handler(signum: int, frame: Any) -> None:
        try:
            if active[0]:
                callback(signum)
        finally:
            _chain(previous[signum], signum, frame)

    for sig in STOP_SIGNALS:
        old = signal.getsignal(sig)
        if old is signal.SIG_IGN:
            continue
        previous[sig] = old
        signal.signal(sig, handler)

    def undo() -> None:
        active[0] = False
        for sig, old in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, old)

    return undo


def _chain(old: Any, signum: int, frame: Any) -> None:
    if callable(old):
        old(signum, frame)
        return
    # the default action (SIG_DFL, or None: a handler Python did not install): end the process
    # by this signal, so the exit status is the one it would have been without us
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
