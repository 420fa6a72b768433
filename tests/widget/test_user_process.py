"""Inside the user's process: a long training loop with clicks from another thread and a second
model on a thread of its own raises nowhere, runs no trace inside a forward, and starts no
subprocess nor a thread of ours beyond the still render (issue 31's bars)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest
import torch
from torch import nn

from surgeon_widgets.engine import tracing
from surgeon_widgets.widget.explorer import TRACING, Explorer

STILL = "surgeon-widgets still"  # the one thread of ours an Explorer may start (when shown)


def mlp(width: int = 16, depth: int = 2) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(8, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


@pytest.fixture(autouse=True)
def one_thread():
    """torch on one thread: a loaded 2-core machine runs these loops 40x slower on all cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Thread(threading.Thread):
    """A thread of the test's own: what it raised is kept for the test to check."""

    def __init__(self, target, name: str) -> None:
        super().__init__(target=self._run, name=name, daemon=True)
        self._target_fn = target
        self.errors: list[BaseException] = []

    def _run(self) -> None:
        try:
            self._target_fn()
        except BaseException as error:  # checked by the test
            self.errors.append(error)


def test_2000_steps_with_clicks_and_a_second_model_on_another_thread(loop, monkeypatch):
    torch.manual_seed(0)
    model, other = mlp(), mlp()
    ex = Explorer(model, torch.randn(2, 8), selected=["0", "2"], gradients=True, max_rate=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen: list[tuple[str, bool]] = []  # (thread, inside a forward of the loop) of each trace
    inside = threading.Event()
    real = tracing._trace_uncached

    def spied(*args, **kwargs):
        seen.append((threading.current_thread().name, inside.is_set()))
        return real(*args, **kwargs)

    monkeypatch.setattr(tracing, "_trace_uncached", spied)
    stop = threading.Event()
    other_steps = [0]

    def train_other() -> None:  # an unwatched model the user trains on a thread of their own
        opt_other = torch.optim.SGD(other.parameters(), lr=0.01)
        while not stop.is_set():
            loss = other(torch.randn(8, 8)).pow(2).mean()
            opt_other.zero_grad()
            loss.backward()
            opt_other.step()
            other_steps[0] += 1

    clicks = [
        ("show_nodes", True), ("node_out", {"3": "3"}), ("selected", ["0", "2", "4"]),
        ("show_nodes", False), ("node_in", {"1": "1"}), ("selected", ["2"]), ("node_in", {}),
        ("show_nodes", True), ("selected", ["0", "4"]),
    ]  # fmt: skip

    def click() -> None:  # the browser, through the kernel's subshell (ipywidgets' set_state)
        for name, value in clicks * 3:
            ex.set_state({name: value})
            time.sleep(0.02)

    threads = [Thread(train_other, "user model"), Thread(click, "subshell")]
    for thread in threads:
        thread.start()
    for step in range(2000):
        inside.set()
        loss = model(torch.randn(16, 8)).pow(2).mean()
        inside.clear()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1000:
            threads[1].join(30)  # the clicks are all in; the rest of the loop applies them
    stop.set()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive() and thread.errors == [], (thread.name, thread.errors)
    assert other_steps[0] > 0
    assert seen == [] and TRACING in ex.notes  # no trace while the cell ran
    assert ex.errors == []
    loop.cell_ends()
    assert seen and all(s == ("MainThread", False) for s in seen), seen
    assert any(r["name"] not in ex._tree.layers for r in ex.rows)  # the tree shows the nodes
    assert ex.cut_report["outputs"] == ["3"] and "node_out='3'" in ex.code
    assert TRACING not in ex.notes and ex.selected == ["0", "4"]
    assert {h["name"] for h in ex.hooks} == {"0", "4"}
    ex.close()


def test_200_cpu_steps_start_no_subprocess_and_no_thread_of_ours(monkeypatch):
    started: list[str] = []
    real_start, real_popen = threading.Thread.start, subprocess.Popen.__init__

    def start(self, *args, **kwargs):
        started.append(self.name)
        return real_start(self, *args, **kwargs)

    def popen(self, *args, **kwargs):
        started.append(f"subprocess {args[:1]}")
        return real_popen(self, *args, **kwargs)

    def spawned(what: str, real):
        def spy(*args, **kwargs):
            started.append(what)
            return real(*args, **kwargs)

        return spy

    before = set(threading.enumerate())
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(12)])
    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(os, "posix_spawn", spawned("posix_spawn", os.posix_spawn))
    monkeypatch.setattr(os, "fork", spawned("fork", os.fork))
    ex = Explorer(model, selected=[str(i) for i in range(12)], gradients=True, max_rate=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    for _ in range(200):  # 32,768 values a layer: "large" to engine/stats (not SMALL)
        loss = model(torch.randn(512, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert len(ex.stats("11")["11/grad_output"].steps) == 200  # it recorded every step
    ex.close()
    alive = [t.name for t in threading.enumerate() if t not in before and t.name != STILL]
    assert [name for name in started if name != STILL] == [], started
    assert alive == [], alive
