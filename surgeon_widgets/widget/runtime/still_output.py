"""The widget's static output kept current: a picture rendered off the model's thread, at most
every ``interval`` seconds (longer when rendering is slow: it takes at most ``COST_SHARE`` of
the wall time), published on the model's thread; and once more when a cell ends.

A saved notebook keeps what the kernel last published for an output. :class:`StillOutput`
renders the static picture and the ``snapshot`` state with ``render`` (a worker thread: the
hooks never wait for matplotlib) and hands the result to ``publish`` on the model's thread at
the next change (or the cell's end), which sets the state and returns the picture's mime
bundle. :meth:`show` writes the widget's output, a marker and the picture's output
(``widget/still_display.py`` says why three); only the picture's, which has this output's
display id, is updated in place (``update_display``), also while a live view is open: the
widget's output is never updated (a JupyterLab view would be drawn again, a new view under
the old one). So a notebook saved while a view is live, or run by nbclient / ``nbconvert
--execute``, carries the last picture.

The worker (thread ``surgeon-widgets still``) is a daemon: exit never waits on it unbounded.
A render still running at exit is given ``JOIN_SECONDS`` (``atexit``) to finish rather than
be stopped inside matplotlib; ``close()`` waits as long.

>>> renders = []
>>> out = StillOutput(lambda: renders.append(1) or len(renders), lambda n: None, threads=False)
>>> out.changed(); out.changed(); out.flush(); renders  # without threads: every change
[1, 1]
"""

from __future__ import annotations

import atexit
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from . import notebook

__all__ = ["COST_SHARE", "JOIN_SECONDS", "REFRESH_SECONDS", "StillOutput"]

REFRESH_SECONDS = 5.0
COST_SHARE = 0.02  # the worker renders at most this share of the wall time
JOIN_SECONDS = 5.0  # the longest close() or the interpreter's exit waits for a running render
_workers: set[threading.Thread] = set()  # renders running now (joined at exit)
Still = TypeVar("Still")


class StillOutput(Generic[Still]):
    """``render() -> Still`` (any thread) and ``publish(Still) -> bundle | None`` (the model's
    thread), refreshed at most every ``interval`` seconds; ``threads=False`` renders in
    :meth:`changed` itself, every time (tests, hosts without threads)."""

    def __init__(
        self,
        render: Callable[[], Still],
        publish: Callable[[Still], Mapping[str, Any] | tuple | None],
        interval: float = REFRESH_SECONDS,
        threads: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.render, self._publish, self.interval, self.threads = render, publish, interval, threads
        self.clock = clock
        self.display_id = uuid.uuid4().hex
        self.shown = False  # a display with our id exists
        self.published = 0  # how many results were published (tests, benchmarks)
        self._dirty = False
        self._started = -float("inf")
        self.cost = 0.0  # seconds the last render took
        self._worker: threading.Thread | None = None
        self._ready: list[Still] = []
        self._undo: Callable[[], None] | None = None
        self._closed = False

    def show(
        self, widget: Mapping[str, Any] | tuple, picture: Mapping[str, Any] | tuple,
        marker: Mapping[str, Any] | None = None,
    ) -> bool:  # fmt: skip
        """Display the ``widget`` bundle, then ``marker`` (if any), then ``picture`` as this
        output (IPython); later results update the picture in place."""
        if not notebook.publish(widget, uuid.uuid4().hex):  # its own id: never updated
            return False
        if marker is not None:
            notebook.publish(marker, uuid.uuid4().hex)
        notebook.publish(picture, self.display_id)
        self.shown = True
        self._started = self.clock()  # a live view has an interval to say hello first
        if self._undo is None:
            self._undo = notebook.on_cell_end(self._cell_ended)
        return True

    def _cell_ended(self) -> None:
        if self.shown:
            self.flush()

    def changed(self) -> None:
        """What ``render`` shows changed (the model's thread): publish a finished render, and
        start the next one when ``interval`` has passed."""
        if self._closed:
            return
        self._dirty = True
        if self._ready:
            self._deliver(self._ready.pop())
        if not self.threads:
            self._dirty = False
            self._deliver(self.render())
            return
        now = self.clock()
        wait = max(self.interval, self.cost / COST_SHARE)
        if now - self._started < wait or self._worker is not None:
            return
        self._started = now
        self._dirty = False
        self._worker = threading.Thread(target=self._run, name="surgeon-widgets still", daemon=True)
        _workers.add(self._worker)
        self._worker.start()

    def flush(self) -> None:
        """Render and publish now if anything changed since the last render (a cell's end)."""
        if self._closed:
            return
        worker = self._worker
        if worker is not None:
            worker.join()
        if self._ready:
            self._deliver(self._ready.pop())
        if self._dirty:
            self._dirty = False
            self._deliver(self.render())

    def close(self) -> None:
        """No more rendering or publishing: a running render is waited for, the cell-end
        callback removed."""
        self._closed = True
        worker = self._worker
        if worker is not None:
            worker.join(JOIN_SECONDS)
        self._ready.clear()
        if self._undo is not None:
            self._undo()
            self._undo = None
        self.shown = False

    def _run(self) -> None:
        start = time.perf_counter()
        try:
            result = self.render()
        except Exception:  # e.g. the selection changed under us: the next change renders again
            self._dirty = True
        else:
            self._ready[:] = [result]
        finally:
            self.cost = time.perf_counter() - start
            self._worker = None
            _workers.discard(threading.current_thread())

    def _deliver(self, result: Still) -> None:
        bundle = self._publish(result)
        self.published += 1
        if bundle is not None and self.shown:
            notebook.publish(bundle, self.display_id, update=True)


@atexit.register
def _join_at_exit(bound: float = JOIN_SECONDS) -> None:
    """Let running renders finish, all of them within ``bound`` seconds."""
    end = time.monotonic() + bound
    for worker in list(_workers):
        worker.join(max(0.0, end - time.monotonic()))

