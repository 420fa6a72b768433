"""Clicks while a cell runs, against a real kernel driven by jupyter_client (no browser).

The client sends comm messages without a subshell header, as VS Code does. In the default
mode (ipykernel 7: the widget's own subshell) a selection sent while a training
cell runs is applied at a forward of that same cell; queued cells still run after it, in order,
the cell's prints stay in its own output, the kernel reads "busy" until the cell ends, and an
interrupt still lands. ``SURGEON_WIDGETS_CLICKS=note`` checks today's behaviour (applies when
the cell finishes, and the widget says so). With ipykernel 6 in a directory of its own
(``pip install --no-deps --target DIR ipykernel==6.29.5``, ``SURGEON_IPYKERNEL6=DIR``), the drain
fallback runs the same checks on ipykernel 6 (``scripts/setup.sh`` puts it in
``.venv/ipykernel6``, the default).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sys
import time
from pathlib import Path

import pytest
from jupyter_client import KernelManager

REPO = Path(__file__).resolve().parents[2]
IPYKERNEL6 = os.environ.get("SURGEON_IPYKERNEL6", str(Path(sys.prefix) / "ipykernel6"))

SETUP = """\
import json, time, torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer
torch.manual_seed(0)
torch.set_num_threads(1)  # a tiny model on a shared 2-core machine
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ex = Explorer(model, max_rate=0)
display(ex)  # opens its comm: an Explorer never shown has none
import ipykernel
info = {"comm": ex.comm.comm_id, "clicks": ex.clicks, "ipykernel": ipykernel.__version__}
print(json.dumps(info))
"""

LOOP = """\
end = time.monotonic() + {{seconds}}
step = 0
while time.monotonic() < end:
    {body}
    step += 1
    if step % 50 == 0:
        print("tick", step, flush=True)
    time.sleep(0.005)
print("trained", step, ex.selected)
"""  # a cell running ``body`` for ``seconds``; format ``seconds`` after ``body``

TRAIN = LOOP.format(
    body="loss = model(torch.randn(32, 8)).pow(2).mean()\n"
    "    opt.zero_grad(); loss.backward(); opt.step()"
)

FOREVER = """\
while True:
    model(torch.randn(32, 8))
    time.sleep(0.002)
"""


@pytest.fixture(params=["auto", "note", "drain6"])
def kernel(request):
    mode = request.param
    env = kernel_env(mode)
    if mode == "drain6":
        if not (Path(IPYKERNEL6) / "ipykernel").is_dir():
            pytest.skip(f"no ipykernel 6 in {IPYKERNEL6} (scripts/setup.sh puts it there)")
        env["PYTHONPATH"] = f"{IPYKERNEL6}{os.pathsep}{REPO}"
        env["SURGEON_WIDGETS_CLICKS"] = "auto"
    with running_kernel(env) as (km, kc):
        yield mode, km, kc


def kernel_env(clicks: str) -> dict[str, str]:
    """The environment of a test kernel: this checkout's package, ``clicks`` mode, one thread."""
    return {**os.environ, "PYTHONPATH": str(REPO), "SURGEON_WIDGETS_CLICKS": clicks,
            "OMP_NUM_THREADS": "1"}  # fmt: skip


@contextlib.contextmanager
def running_kernel(env: dict):
    """A kernel started with ``env`` and a client on its channels, shut down afterwards."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env, extra_arguments=["--HistoryManager.enabled=False"])
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=90)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


class Iopub:
    """Every iopub message with the time it arrived, read as they come."""

    def __init__(self, kc) -> None:
        self.kc = kc
        self.seen: list[tuple[float, dict]] = []

    def read_until(self, done, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not done():
            left = end - time.monotonic()
            assert left > 0, "timed out; last messages: " + repr(
                [m["msg_type"] for _, m in self.seen[-10:]]
            )
            try:
                msg = self.kc.get_iopub_msg(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            self.seen.append((time.monotonic(), msg))

    def idle_for(self, msg_id: str) -> bool:
        return any(
            m["msg_type"] == "status"
            and m["content"]["execution_state"] == "idle"
            and m["parent_header"].get("msg_id") == msg_id
            for _, m in self.seen
        )

    def stdout(self, msg_id: str) -> str:
        return "".join(
            m["content"]["text"]
            for _, m in self.seen
            if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id
        )

    def first(self, pred) -> float | None:
        return next((t for t, m in self.seen if pred(m)), None)


def comm_update(kc, comm_id: str, state: dict) -> float:
    """Send a widget state update as a front end without subshells does; return when."""
    msg = kc.session.msg(
        "comm_msg",
        {"comm_id": comm_id, "data": {"method": "update", "state": state, "buffer_paths": []}},
    )
    assert "subshell_id" not in msg["header"]
    kc.shell_channel.send(msg)
    return time.monotonic()


def stats_of(comm_id: str, layer: str, kind: str = "activation"):
    def pred(m: dict) -> bool:
        data = m["content"].get("data", {}) if m["msg_type"] == "comm_msg" else {}
        content = data.get("content", {}) if data.get("method") == "custom" else {}
        return (
            m["content"].get("comm_id") == comm_id
            and content.get("type") == "stats"
            and any(
                i.get("layer") == layer and i.get("kind") == kind for i in content.get("items", [])
            )
        )

    return pred


def hooks_on(comm_id: str, layer: str):
    def pred(m: dict) -> bool:
        data = m["content"].get("data", {}) if m["msg_type"] == "comm_msg" else {}
        hooks = data.get("state", {}).get("hooks") if data.get("method") == "update" else None
        return m["content"].get("comm_id") == comm_id and any(
            h.get("name") == layer for h in hooks or []
        )

    return pred


def test_click_during_a_cell_applies_at_the_next_forward(kernel):
    mode, km, kc = kernel
    io = Iopub(kc)
    setup = kc.execute(SETUP)
    io.read_until(lambda: io.idle_for(setup), 120)
    info = json.loads(io.stdout(setup).strip().splitlines()[-1])
    comm_id = info["comm"]
    expected = {"auto": "subshell", "note": "note", "drain6": "drain"}[mode]
    assert info["clicks"] == expected, info
    if mode == "drain6":
        assert info["ipykernel"].startswith("6."), info

    train = kc.execute(TRAIN.format(seconds=6))
    io.read_until(lambda: "tick" in io.stdout(train), 30)  # the cell is training now
    clicked = comm_update(kc, comm_id, {"selected": ["2"], "gradients": True})
    queued = kc.execute("print('queued ran', ex.selected)")
    io.read_until(lambda: io.idle_for(queued), 60)

    ended = io.first(
        lambda m: (
            m["msg_type"] == "stream"
            and m["parent_header"].get("msg_id") == train
            and "trained" in m["content"]["text"]
        )
    )
    hooked = io.first(hooks_on(comm_id, "2"))
    stats = io.first(stats_of(comm_id, "2"))
    grads = io.first(stats_of(comm_id, "2", "gradient"))
    assert ended is not None and hooked is not None, io.stdout(train)
    if mode == "note":
        assert hooked > ended  # today's behaviour: applied once the cell finished
        assert stats is None and grads is None  # no forward ran after it
    else:
        assert hooked < ended and stats is not None and stats < ended
        assert grads is not None and grads < ended  # gradients: the same way
        print(f"{mode}: click -> hook {hooked - clicked:.3f} s, -> stats {stats - clicked:.3f} s")
        assert "trained" in io.stdout(train) and "['2']" in io.stdout(train)

    # the queued cell ran after the training cell, and each printed into its own output
    assert io.stdout(queued).startswith("queued ran ['2']")
    assert io.first(lambda m: m["parent_header"].get("msg_id") == queued) > ended
    assert set(io.stdout(train).split()) >= {"tick", "trained"}
    assert "queued" not in io.stdout(train) and "tick" not in io.stdout(queued)

    # the kernel stayed "busy" for the client until the training cell's idle
    states = [
        (t, m["content"]["execution_state"], m["parent_header"].get("msg_id"))
        for t, m in io.seen
        if m["msg_type"] == "status" and clicked <= t <= ended
    ]
    if mode != "note":  # (with the note, nothing is handled until the cell ends)
        assert states, "no status message while the click was handled"
        assert states[-1][1] == "busy", states

    # an interrupt lands in a cell that forwards for ever, also right after a click
    forever = kc.execute(FOREVER)
    io.read_until(
        lambda: any(
            m["msg_type"] == "status" and m["parent_header"].get("msg_id") == forever
            for _, m in io.seen
        ),
        30,
    )
    time.sleep(1.0)
    comm_update(kc, comm_id, {"selected": ["0"]})
    time.sleep(0.3)
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != forever:
        reply = kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    for _ in range(10):  # the kernel aborts requests that arrive just after an error
        after = kc.execute("print('alive', ex.selected)")
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != after:
            reply = kc.get_shell_msg(timeout=30)
        if reply["content"]["status"] != "aborted":
            break
        time.sleep(0.2)
    io.read_until(lambda: io.idle_for(after), 30)
    assert io.stdout(after).startswith("alive ['0']"), io.stdout(after)


NODES_SETUP = """\
import json, threading, time, torch
from torch import nn
from surgeon_widgets.engine import tracing
from surgeon_widgets.widget.explorer import TRACING, Explorer
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ex = Explorer(model, torch.randn(1, 8), max_rate=0)
display(ex)
inside, traced, real = [False], [], tracing._trace_uncached
def spied(*args, **kwargs):  # every real trace: on which thread, inside a forward or not
    traced.append((threading.current_thread().name, inside[0]))
    return real(*args, **kwargs)
tracing._trace_uncached = spied
print(json.dumps({"comm": ex.comm.comm_id, "clicks": ex.clicks, "rows": len(ex.rows)}))
"""

NODES_TRAIN = LOOP.format(
    body="inside[0] = True; loss = model(torch.randn(32, 8)).pow(2).mean(); inside[0] = False\n"
    "    opt.zero_grad(); loss.backward(); opt.step()\n"
    "    if step % 50 == 0: print('note', TRACING in ex.notes, 'traced', len(traced), flush=True)"
)

NODES_AFTER = """\
print(json.dumps({"traced": traced, "rows": len(ex.rows), "code": ex.code,
                  "outputs": ex.cut_report.get("outputs"), "tracing": TRACING in ex.notes}))
"""


def test_graph_nodes_and_a_cut_clicked_during_a_cell_trace_when_it_ends(kernel):
    """No trace inside the user's forward: the click applies mid-cell, its trace after it."""
    mode, _, kc = kernel
    io = Iopub(kc)
    setup = kc.execute(NODES_SETUP)
    io.read_until(lambda: io.idle_for(setup), 120)
    info = json.loads(io.stdout(setup).strip().splitlines()[-1])
    train = kc.execute(NODES_TRAIN.format(seconds=6))
    io.read_until(lambda: "tick" in io.stdout(train), 30)
    comm_update(kc, info["comm"], {"show_nodes": True, "node_out": {"1": "1"}})
    io.read_until(lambda: io.idle_for(train), 60)
    after = kc.execute(NODES_AFTER)
    io.read_until(lambda: io.idle_for(after), 60)
    report = json.loads(io.stdout(after).strip().splitlines()[-1])
    notes = [line for line in io.stdout(train).splitlines() if line.startswith("note")]
    assert all(line.endswith("traced 0") for line in notes), notes  # nothing while it ran
    if mode != "note":  # the click applied mid-cell: the view said "tracing..." meanwhile
        assert notes[-1] == "note True traced 0", notes
    assert report["traced"] == [["MainThread", False]], report  # once, after the cell
    assert report["rows"] > info["rows"] and report["outputs"] == ["1"], report
    assert "node_out='1'" in report["code"] and not report["tracing"], report


COMPILED_SETUP = """\
import gc, json, time, torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))  # dynamo inlines its hooks
ex = Explorer(model, max_rate=0)
compiled = torch.compile(model, backend="eager")  # compiled after the Explorer was made
compiled(torch.randn(32, 8))
display(ex)
print(json.dumps({"comm": ex.comm.comm_id, "clicks": ex.clicks}))
"""

COMPILED_TRAIN = LOOP.format(body="compiled(torch.randn(32, 8))")

AFTER_DEL = """\
import ipywidgets.widgets.widget as W
def hook_count(m):
    return sum(len(x._forward_hooks) + len(x._forward_pre_hooks) for x in m.modules())
def explorers():
    return sum(type(w).__name__ == "Explorer" for w in W._instances.values())
other = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
unseen = Explorer(other, selected=["0", "2"], gradients=True, max_rate=0)
other(torch.randn(4, 8)).sum().backward()
report = {"unseen": hook_count(other), "unseen_comm": unseen.comm is not None}
del unseen
report["unseen_plain_del"] = hook_count(other)
gc.collect()
report["unseen_gc"] = hook_count(other)
report["kept"] = hook_count(model)
del ex
gc.collect()
report.update(after_del=hook_count(model), alive=explorers())
print(json.dumps(report))
[w for w in W._instances.values() if type(w).__name__ == "Explorer"][0].close()
print(json.dumps({"after_close": hook_count(model)}))
"""


def test_click_applies_during_a_compiled_loop_and_del_frees_only_an_explorer_never_shown():
    """Subshell mode: torch.compile(model) trains; a click still lands at its next forward.

    Then what the docs say: ``del ex`` and a collection free an Explorer never shown (it opened
    no comm); a shown one is kept by ipywidgets 8, so its hooks stay until ``close()``.
    """
    with running_kernel(kernel_env("auto")) as (_, kc):
        io = Iopub(kc)
        setup = kc.execute(COMPILED_SETUP)
        io.read_until(lambda: io.idle_for(setup), 180)
        info = json.loads(io.stdout(setup).strip().splitlines()[-1])
        assert info["clicks"] == "subshell", info
        comm_id = info["comm"]
        train = kc.execute(COMPILED_TRAIN.format(seconds=8))
        io.read_until(lambda: "tick" in io.stdout(train), 60)
        comm_update(kc, comm_id, {"selected": ["2"]})
        io.read_until(lambda: io.idle_for(train), 60)
        ended = io.first(
            lambda m: m["msg_type"] == "stream"
            and m["parent_header"].get("msg_id") == train
            and "trained" in m["content"]["text"]
        )
        hooked, stats = io.first(hooks_on(comm_id, "2")), io.first(stats_of(comm_id, "2"))
        assert ended is not None and hooked is not None, io.stdout(train)
        assert hooked < ended and stats is not None and stats < ended  # during the loop
        assert "['2']" in io.stdout(train)

        after = kc.execute(AFTER_DEL)
        io.read_until(lambda: io.idle_for(after), 60)
        lines = [json.loads(line) for line in io.stdout(after).strip().splitlines()]
        report = lines[0]
        print("after del:", report)
        assert report["unseen"] >= 3 and report["unseen_comm"] is False  # 2 layers, the clock
        assert report["unseen_gc"] == 0  # (plain del: traitlets' self-cycles wait for the gc)
        assert report["kept"] >= 2  # layer 2's forward hook and the step clock
        assert report["after_del"] == report["kept"] and report["alive"] == 1
        assert lines[1] == {"after_close": 0}
