"""engine/time_limit.py: a call aborted past its limit, on any thread, with nothing left behind."""

from __future__ import annotations

import builtins
import contextlib
import signal
import threading
import time

import pytest
import torch
from torch.overrides import TorchFunctionMode

from surgeon_widgets.engine.time_limit import TimeLimitExceeded, _ProcessState, call_within


class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def busy(seconds: float) -> int:
    """Pure-Python work (an async exception lands between bytecodes)."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


def test_no_limit_and_in_time_return_the_result():
    assert call_within(None, lambda: 42) == 42
    assert call_within(5.0, lambda: busy(0.01) > 0) is True


def test_past_the_limit_the_call_is_aborted_soon_after():
    started = time.perf_counter()
    with pytest.raises(TimeLimitExceeded, match=r"took longer than the time limit of 0\.2 s"):
        call_within(0.2, lambda: busy(10))
    assert time.perf_counter() - started < 3  # not the 10 s the call wanted


def test_an_except_exception_in_the_call_does_not_swallow_the_abort():
    def stubborn() -> None:
        end = time.perf_counter() + 10
        while time.perf_counter() < end:
            with contextlib.suppress(Exception):  # torch has many; the abort is a BaseException
                busy(0.05)

    with pytest.raises(TimeLimitExceeded):
        call_within(0.1, stubborn)


def test_an_abort_the_call_turns_into_another_error_is_still_the_limit():
    # seen in CI: torch.export's cleanup caught the abort and raised an AssertionError instead
    def converts() -> None:
        try:
            busy(10)
        except BaseException as error:
            raise AssertionError("a half-updated state") from error

    with pytest.raises(TimeLimitExceeded, match=r"time limit of 0\.1 s") as caught:
        call_within(0.1, converts)
    assert isinstance(caught.value.__cause__, AssertionError)
    with pytest.raises(ValueError):  # an error of the call itself, before the limit: as is
        call_within(5.0, lambda: int("x"))


def test_no_abort_lands_after_the_call_returned():
    # calls that end right around their limit: a raise sent late must be dropped, not land here
    outcomes = set()
    for i in range(100):
        try:
            call_within(0.005 * (i % 8), lambda: busy(0.02))
            outcomes.add("returned")
        except TimeLimitExceeded:
            outcomes.add("aborted")
    busy(1.2)  # longer than the re-send interval: a stray raise would land in here
    assert outcomes == {"returned", "aborted"}


def test_works_on_another_thread_and_leaves_sigalrm_alone():
    handler = signal.getsignal(signal.SIGALRM)
    result: list[str] = []

    def worker() -> None:
        try:
            call_within(0.1, lambda: busy(10))
        except TimeLimitExceeded:
            result.append("aborted")

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(5)
    assert result == ["aborted"]
    assert signal.getsignal(signal.SIGALRM) is handler


def test_an_abort_inside_a_restore_is_undone():
    """What a trace swaps and restores in ``finally`` is put back even if the abort lands
    before the restore: here the call swaps and never restores."""
    original_max = builtins.max
    before = _ProcessState.capture()

    def swaps_and_hangs() -> None:
        builtins.max = lambda *a, **k: 0  # as non-strict export's _override_builtin_ops
        PassThrough().__enter__()  # a mode pushed, never popped
        torch.set_grad_enabled(not torch.is_grad_enabled())
        busy(10)

    with pytest.raises(TimeLimitExceeded):
        call_within(0.1, swaps_and_hangs)
    assert builtins.max is original_max
    assert before.differences() == []
