"""The drain fallback's rules, on a kernel stand-in with real wire messages (jupyter_client).

The whole path on a real ipykernel 6 runs in tests/test_kernel_clicks.py; this checks what
is hard to time there: a Ctrl-C while a message is handled is held back and re-delivered,
other messages go back to the queue untouched and in order, busy/idle is published around
each handled message and busy again for the cell, the cell's parent is restored, and the
drain runs at most every 100 ms, only on the main thread, only in a running cell, never nested.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import zmq
from jupyter_client.session import Session
from tornado.queues import Queue

from surgeon_widgets.widget.runtime.kernel_comms import DRAIN_INTERVAL, _Drain


class Cells:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = True
        self.published: list[tuple[str, str]] = []

    def publish(self, state: str, parent=None) -> None:
        self.published.append((state, parent["header"]["msg_type"]))


class Kernel:
    """What _Drain reads of an ipykernel 6 kernel: its queue, stream, session and parent."""

    shell_channel_thread = None

    def __init__(self) -> None:
        self.session = Session(key=b"secret")
        self.msg_queue: Queue = Queue()
        self.cell = self.session.msg("execute_request", {"code": "train()"})
        self.parent = self.cell
        self.statuses: list[tuple[str, str]] = []
        self.shell_stream = self

    def flush(self, flag=None) -> None:  # ZMQStream.flush: nothing left on the socket
        pass

    def dispatch_shell(self, msg) -> None:  # the kernel's own handler; never called here
        raise AssertionError("the drain must not dispatch")

    def set_parent(self, ident, parent, channel="shell") -> None:
        self.parent = parent

    def get_parent(self, channel="shell"):
        return self.parent

    def _publish_status(self, state: str, channel: str) -> None:
        self.statuses.append((state, self.parent["header"]["msg_type"]))

    def queue(self, msg_type: str, content: dict) -> dict:
        msg = self.session.msg(msg_type, content)
        frames = [zmq.Frame(f) for f in self.session.serialize(msg, ident=[b"client"])]
        self.msg_queue.put_nowait((len(self.msg_queue._queue), self.dispatch_shell, (frames,)))
        return msg

    def queued(self) -> list[str]:
        return [
            self.session.unpack(item[2][0][3].bytes)["msg_id"]
            for item in list(self.msg_queue._queue)
        ]


class Comm:
    comm_id = "mine"

    def __init__(self, on_msg) -> None:
        self._msg_callback = on_msg


def update(selected: list[str]) -> dict:
    return {"comm_id": "mine", "data": {"method": "update", "state": {"selected": selected}}}


@pytest.fixture
def setup():
    kernel, cells, seen = Kernel(), Cells(), []
    drain = _Drain(kernel, Comm(lambda msg: seen.append(msg["content"]["data"])), cells)
    return kernel, cells, drain, seen


def test_handles_only_its_comm_and_returns_the_rest_in_order(setup):
    kernel, cells, drain, seen = setup
    first = kernel.queue("execute_request", {"code": "queued_1"})
    kernel.queue("comm_msg", update(["a"]))
    other = kernel.queue("comm_msg", {"comm_id": "someone else", "data": {}})
    kernel.queue("comm_msg", update(["b"]))
    last = kernel.queue("execute_request", {"code": "queued_2"})
    drain()
    assert [d["state"]["selected"] for d in seen] == [["a"], ["b"]]
    assert kernel.queued() == [m["header"]["msg_id"] for m in (first, other, last)]
    assert kernel.parent is kernel.cell  # the cell's output stays the cell's
    assert kernel.statuses == [("busy", "comm_msg"), ("idle", "comm_msg")] * 2
    assert cells.published == [("busy", "execute_request")] * 2


def test_ctrl_c_while_handling_is_held_back_then_lands(setup):
    kernel, cells, _, _ = setup
    seen = []

    def interrupted(msg) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the user presses "interrupt" right now
        time.sleep(0.05)
        seen.append(msg["content"]["data"]["state"]["selected"])

    drain = _Drain(kernel, Comm(interrupted), cells)
    kernel.queue("comm_msg", update(["a"]))
    kernel.queue("comm_msg", update(["b"]))
    with pytest.raises(KeyboardInterrupt):
        drain()
    assert seen == [["a"], ["b"]]  # both handled whole, then the interrupt was re-delivered
    assert kernel.parent is kernel.cell and kernel.statuses[-1] == ("idle", "comm_msg")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_rate_main_thread_running_cell_and_nesting(setup):
    kernel, cells, drain, seen = setup
    kernel.queue("comm_msg", update(["a"]))
    drain()
    kernel.queue("comm_msg", update(["b"]))
    drain()  # within DRAIN_INTERVAL of the last one: nothing read
    assert len(seen) == 1 and len(kernel.queued()) == 1
    time.sleep(DRAIN_INTERVAL)
    cells.running = False  # between cells the kernel reads its own messages
    drain()
    assert len(seen) == 1
    cells.running = True
    drain.next = 0.0
    thread = threading.Thread(target=drain)
    thread.start()
    thread.join()
    assert len(seen) == 1  # never from another thread
    drain.next, drain.active = 0.0, True  # as if a drain were handling a message already
    drain()
    assert len(seen) == 1
    drain.next, drain.active = 0.0, False
    drain()
    assert len(seen) == 2 and kernel.queued() == []
