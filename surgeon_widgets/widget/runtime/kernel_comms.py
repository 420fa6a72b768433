"""Getting a widget's comm messages while the user's cell runs: subshell, drain, or a note.

An ipykernel reads shell messages on its main thread only between cells, so a click made
while a training cell runs would wait for the cell. Three ways, tried in this order (every
step rests on private ipykernel APIs; each is detected, and a missing one falls back):

``"subshell"`` (ipykernel 7 with kernel subshells)
    The widget makes its own subshell once per kernel process (the shell channel thread's
    subshell manager, scheduled on that thread's io loop) and routes its comm there
    (``Comm._reply_subshell_for``), whatever subshell header the client sent. The comm's
    message callback is called directly, without the ``pre/post_execute`` events that would
    otherwise fire on the subshell thread (jupyterlab#19719, ipykernel#1564). Observers then
    run on the subshell thread and only post to the :class:`~.handover.Handover` inbox.
``"drain"`` (ipykernel 6: a main-thread message queue)
    From the root forward pre-hook (at most every ``DRAIN_INTERVAL``, main thread only, only
    inside a running cell, never while compiling or nested) this widget's pending comm
    messages are handled; every other message goes back to the queue untouched, in order.
    Busy/idle is published around each handled message and busy again for the cell; Ctrl-C
    is held back while a message is handled and re-delivered after. A trace such a message
    needs waits for the cell's end (:meth:`~.handover.Handover.later`), never runs here.
``"note"``
    Today's behaviour: clicks apply when the cell finishes, and the widget says so
    ("clicks made while a cell runs apply when the cell finishes").

Set ``SURGEON_WIDGETS_CLICKS=drain`` or ``=note`` to force a fallback (tests, debugging).
Outside a kernel there is no browser to click in, and :func:`connect` returns ``""``.

>>> connect(object(), None)  # no kernel here
''
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ...engine import guard
from .handover import Handover

__all__ = ["DRAIN_INTERVAL", "MODE_ENV", "connect", "main_loop_scheduler"]

log = logging.getLogger("surgeon_widgets.explorer")
MODE_ENV = "SURGEON_WIDGETS_CLICKS"
DRAIN_INTERVAL = 0.1  # seconds between two drains
SUBSHELL_TIMEOUT = 5.0  # seconds to wait for the shell channel thread to make our subshell

_subshells: dict[int, str | None] = {}  # pid -> our subshell id (None: could not make one)
_cells: dict[int, _Cells] = {}  # id(kernel) -> its cell watch


def connect(widget: Any, handover: Handover | None) -> str:
    """Route ``widget``'s comm so clicks reach it while a cell runs; return the mode used."""
    kernel = _kernel()
    comm = getattr(widget, "comm", None)
    if kernel is None or comm is None or handover is None:
        return ""
    forced = os.environ.get(MODE_ENV, "auto")
    try:
        cells = _watch_cells(kernel)
        if forced == "auto":
            subshell = _own_subshell(kernel)
            if subshell is not None and _route(comm, subshell, kernel, cells):
                return "subshell"
        if forced in ("auto", "drain") and cells is not None:
            drain = _Drain.make(kernel, comm, cells)
            if drain is not None:
                handover.poll = drain
                return "drain"
    except Exception:  # a private API changed shape: today's behaviour, with the note
        log.warning("Explorer: clicks while a cell runs are not available", exc_info=True)
    return "note"


def main_loop_scheduler() -> Callable[[Callable[[], None]], None] | None:
    """``schedule(fn)``: run ``fn`` on the kernel's main io loop (thread-safe); None: no kernel."""
    loop = getattr(_kernel(), "io_loop", None)
    add = getattr(loop, "add_callback", None)
    return add if callable(add) else None


def _kernel() -> Any:
    if "ipykernel" not in sys.modules:
        return None
    try:
        from ipykernel.kernelbase import Kernel
    except ImportError:
        return None
    return Kernel.instance() if Kernel.initialized() else None


class _Cells:
    """Is a cell running, and which execute request is it (to publish busy for it again)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.lock = threading.Lock()
        self.running = True  # the first Explorer is made by a cell
        self.parent = _get_parent(kernel)

    def pre_run_cell(self, *args: Any) -> None:
        with self.lock:
            self.running = True
            self.parent = _get_parent(self.kernel)

    def post_run_cell(self, *args: Any) -> None:
        with self.lock:  # a busy sent for this cell goes out before the kernel's idle
            self.running = False

    def publish(self, state: str, parent: Any = None) -> None:
        kernel = self.kernel
        kernel.session.send(
            kernel.iopub_socket,
            "status",
            {"execution_state": state},
            parent=parent if parent is not None else self.parent,
            ident=kernel._topic("status"),
        )

    def busy_again(self) -> None:
        """Tell clients the cell is still running (after an idle for a handled comm message)."""
        with self.lock:
            if self.running:
                self.publish("busy")


def _get_parent(kernel: Any) -> Any:
    try:
        return kernel.get_parent("shell")
    except TypeError:
        return kernel.get_parent()


def _watch_cells(kernel: Any) -> _Cells | None:
    cells = _cells.get(id(kernel))
    if cells is None:
        events = getattr(getattr(kernel, "shell", None), "events", None)
        if events is None or not hasattr(kernel, "_topic"):
            return None
        cells = _cells[id(kernel)] = _Cells(kernel)
        events.register("pre_run_cell", cells.pre_run_cell)
        events.register("post_run_cell", cells.post_run_cell)
    return cells


def _own_subshell(kernel: Any) -> str | None:
    """Our subshell's id, made once per kernel process on the shell channel thread."""
    pid = os.getpid()
    if pid in _subshells:
        return _subshells[pid]
    thread = getattr(kernel, "shell_channel_thread", None)
    manager = getattr(thread, "_manager", None)  # made at kernel start (the property asserts)
    create = getattr(manager, "_create_subshell", None)
    add_callback = getattr(getattr(thread, "io_loop", None), "add_callback", None)
    if create is None or add_callback is None or not hasattr(manager, "_on_recv_callback"):
        _subshells[pid] = None
        return None
    done = threading.Event()
    made: list[str] = []

    def make() -> None:  # runs on the shell channel thread, as the manager requires
        try:
            made.append(create())
        except Exception:
            log.warning("Explorer: could not make a kernel subshell", exc_info=True)
        finally:
            done.set()

    add_callback(make)
    done.wait(SUBSHELL_TIMEOUT)
    subshell = made[0] if made else None
    if subshell is not None and not _runs_on_its_thread(subshell):
        log.warning("Explorer: the kernel subshell %s runs on no thread named subshell-%s (an "
                    "ipykernel change): clicks made while a cell runs apply when it ends",
                    subshell, subshell)  # fmt: skip
        subshell = None
    _subshells[pid] = subshell
    return subshell


def _runs_on_its_thread(subshell: str) -> bool:
    """The probe of the hand-over's meaning: :func:`_route` tells the subshell's calls by the
    thread's name, so a live thread of that name must exist once the subshell is made."""
    return any(t.name == f"subshell-{subshell}" and t.is_alive() for t in threading.enumerate())


def _route(comm: Any, subshell: str, kernel: Any, cells: _Cells | None) -> bool:
    """Send ``comm``'s messages to ``subshell`` and handle them there without cell events."""
    if not callable(getattr(comm, "_reply_subshell_for", None)) or not hasattr(
        comm, "_msg_callback"
    ):
        return False
    thread_name = f"subshell-{subshell}"
    original = comm.handle_msg

    def handle_msg(msg: dict) -> None:
        if threading.current_thread().name != thread_name:
            original(msg)
            return
        callback = comm._msg_callback
        if callback is not None:
            callback(msg)
        if cells is not None:
            # clients (JupyterLab too) take the "idle" for this message as the kernel's: the
            # cell still runs
            from tornado.ioloop import IOLoop

            IOLoop.current().add_callback(cells.busy_again)  # after the kernel's idle

    comm._reply_subshell_for = lambda data, default: subshell
    comm.handle_msg = handle_msg
    return True


class _Drain:
    """Handle this comm's pending messages from the model's root pre-hook (ipykernel 6)."""

    def __init__(self, kernel: Any, comm: Any, cells: _Cells) -> None:
        self.kernel = kernel
        self.comm = comm
        self.cells = cells
        self.next = 0.0
        self.active = False
        self.handled = 0

    @classmethod
    def make(cls, kernel: Any, comm: Any, cells: _Cells) -> _Drain | None:
        needs = (
            getattr(kernel, "msg_queue", None),
            getattr(kernel, "shell_stream", None),
            getattr(kernel, "dispatch_shell", None),
            getattr(kernel, "set_parent", None),
            getattr(kernel, "_publish_status", None),
            getattr(comm, "_msg_callback", None),
        )
        queue = needs[0]
        if any(n is None for n in needs) or not hasattr(queue, "get_nowait"):
            return None
        if getattr(kernel, "shell_channel_thread", None) is not None:
            return None  # ipykernel 7: the main thread has no queue we may read
        return cls(kernel, comm, cells)

    def __call__(self) -> None:
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + DRAIN_INTERVAL
        if (
            self.active
            or not self.cells.running
            or threading.current_thread() is not threading.main_thread()
            or guard.is_internal()
            or guard.tracing()
        ):
            return
        self.active = True
        held: list[int] = []
        try:
            for frames in self._take_mine():
                held += self._handle(frames)
        finally:
            self.active = False
        if held:
            signal.raise_signal(signal.SIGINT)  # the Ctrl-C held back lands in the cell now

    def _take_mine(self) -> list[Any]:
        import zmq

        kernel = self.kernel
        kernel.shell_stream.flush(zmq.POLLIN)  # arrived messages -> the kernel's queue, in order
        queue = kernel.msg_queue
        items = []
        while True:
            try:
                items.append(queue.get_nowait())
            except Exception:  # QueueEmpty (tornado's or asyncio's)
                break
        mine = [item for item in items if self._is_mine(item)]
        for item in items:
            if not any(item is m for m in mine):
                queue.put_nowait(item)  # back to the kernel untouched, in the same order
        return [item[2][0] for item in mine]

    def _is_mine(self, item: Any) -> bool:
        try:
            _, dispatch, args = item
            if dispatch != self.kernel.dispatch_shell or len(args) != 1:
                return False
            session = self.kernel.session
            _, parts = session.feed_identities(args[0], copy=False)
            header = session.unpack(_bytes(parts[1]))
            if header.get("msg_type") != "comm_msg":
                return False
            return session.unpack(_bytes(parts[4])).get("comm_id") == self.comm.comm_id
        except Exception:
            return False

    def _handle(self, frames: Any) -> list[int]:
        """Handle one message as the kernel would, for this comm only; return held signals."""
        kernel, cells = self.kernel, self.cells
        session = kernel.session
        idents, parts = session.feed_identities(frames, copy=False)
        msg = session.deserialize(parts, content=True, copy=False)
        cell_ident = getattr(kernel, "_parent_ident", {}).get("shell", b"")
        cell_parent = _get_parent(kernel)
        held: list[int] = []
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()  # what the cell printed goes to the cell
        kernel.set_parent(idents, msg, channel="shell")
        kernel._publish_status("busy", "shell")
        previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
        try:
            self.comm._msg_callback(msg)
        except Exception:
            log.exception("Explorer: handling a message during the cell failed")
        finally:
            signal.signal(signal.SIGINT, previous)
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
            kernel._publish_status("idle", "shell")
            kernel.set_parent(cell_ident, cell_parent, channel="shell")
            with cells.lock:
                if cells.running:
                    cells.publish("busy", cell_parent)
            self.handled += 1
        return held


def _bytes(part: Any) -> bytes:
    return part.bytes if hasattr(part, "bytes") else bytes(part)
