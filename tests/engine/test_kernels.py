"""engine.kernels: inductor-built reductions, in the background, outside dynamo's sight."""

from __future__ import annotations

import logging
import threading
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

from surgeon_widgets.engine import kernels, stats
from surgeon_widgets.engine.kernels import Kernel


def _rows(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([x.sum(1), x.amax(1)])


def _example(dtype: torch.dtype) -> tuple[torch.Tensor]:
    return (torch.ones(3, 5, dtype=dtype),)


def test_a_kernel_builds_in_the_background_and_runs_every_size():
    kernel = Kernel("rows", _rows, _example)
    assert kernel.get(torch.float32) is None  # the first ask starts the build
    assert kernel.wait(torch.float32)
    built = kernel.get(torch.float32)
    for shape in [(2, 7), (40, 4096), (1000, 3)]:  # one build, any size
        x = torch.randn(shape)
        assert torch.allclose(built(x), _rows(x), rtol=1e-5, atol=1e-3)
    assert kernel.get(torch.float64) is None  # per dtype


def test_the_fused_stats_leave_dynamo_and_its_stance_alone():
    """A user's compiled graphs never see the kernel: no graph counted, and a recorded step of
    a compiled model (run under the force_eager stance) still gets the fused pass."""
    kernel = Kernel("tensor_stats", stats._fused_moments, stats._fused_example)
    before = dict(counters["stats"]), dict(counters["graph_break"])
    assert kernel.wait(torch.float32)
    built = kernel.get(torch.float32)
    x = torch.relu(torch.randn(300_000))
    ran = []
    with torch.compiler.set_stance("force_eager"):
        out = built(x)
        compiled = torch.compile(lambda t: ran.append(1) or t * 2)
        compiled(x[:4])  # force_eager runs this eagerly: the stance is on
    assert ran == [1]
    assert (dict(counters["stats"]), dict(counters["graph_break"])) == before
    total, nonzero, l2, lo, hi = out.tolist()
    ref = x.double()
    assert total == pytest.approx(ref.sum().item(), rel=1e-6)
    assert nonzero == int((x != 0).sum()) and (lo, hi) == (x.min().item(), x.max().item())
    assert l2 == pytest.approx(ref.norm().item(), rel=1e-6)


def test_a_kernel_that_cannot_build_warns_once_and_stays_eager():
    def data_dependent(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum() > 0 else x  # a branch on values: no trace can take it

    kernel = Kernel("broken", data_dependent, _example)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert not kernel.wait(torch.float32)
        assert kernel.get(torch.float32) is None and not kernel.wait(torch.float32)
    said = [str(w.message) for w in seen if w.category is RuntimeWarning]
    assert len(said) == 1 and "broken kernel for torch.float32" in said[0]
    assert "eager path" in said[0]


def test_logging_held_by_another_thread_costs_the_build_not_the_process(monkeypatch):
    # a trace aborted between two bytecodes (engine/time_limit.py) can leave logging's module
    # lock held by its thread for good: the build, which logs while it holds dynamo's compile
    # lock, stays eager instead of waiting for it (and torch.compile for the compile lock)
    monkeypatch.setattr(kernels.logging_lock_free, "__defaults__", (0.2,))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with logging._lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    try:
        kernel = Kernel("logging", _rows, _example)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert not kernel.wait(torch.float32, timeout=20)
        said = [str(w.message) for w in seen if w.category is RuntimeWarning]
        assert len(said) == 1 and "logging's module lock is held" in said[0]
    finally:
        release.set()
        holder.join()
    assert kernels.logging_lock_free()


def test_the_build_starts_at_the_after_th_ask():
    kernel = Kernel("late rows", _rows, _example, after=3)

    def building() -> bool:
        return any(t.name == "surgeon_widgets late rows kernel" for t in threading.enumerate())

    assert kernel.get(torch.float32) is None and kernel.get(torch.float32) is None
    assert not building()  # two asks: a short run pays nothing
    assert kernel.get(torch.float32) is None and building()  # the third starts it
    assert kernel.wait(torch.float32) and kernel.get(torch.float32) is not None
