"""LiveHooks' throttle: the rate, the time budget, and the one-second floor bounded by it."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from surgeon_widgets.engine.stats import tensor_stats
from surgeon_widgets.widget.live.hooks import LiveHooks
from surgeon_widgets.widget.live.throttle import MAX_WAIT


class Clock:
    """The throttle's clock (``Throttle.now``), moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def live(clock):
    """Hooks on three layers at the default rate (10 a second) and budget (2%), on ``clock``."""
    hooks = LiveHooks(three_layers(), lambda r: None, print)
    hooks.throttle.now = clock
    hooks.sync(["0", "1", "2"], gradients=False)
    yield hooks
    hooks.close()


def three_layers() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))


def updates(live: LiveHooks, clock: Clock, key: tuple[str, str], seconds: float) -> list[float]:
    """When ``key`` is due over ``seconds``, asked every 10 ms (a forward every 10 ms)."""
    times = []
    start = clock.now
    for tick in range(round(seconds * 100)):
        clock.now = start + tick / 100
        if live.due(key)[0]:
            times.append(tick / 100)
    clock.now = start + seconds
    return times


def every(period: float, count: int):
    """``count`` updates ``period`` apart, each within one 10 ms forward of it (an update late
    by a forward makes the next one due that much sooner)."""

    class Spaced:
        def __eq__(self, times: object) -> bool:
            assert isinstance(times, list)
            gaps = [b - a for a, b in itertools.pairwise(times)]
            ok = all(period - 0.0101 <= g <= period + 0.0101 for g in gaps)
            return len(times) == count and times[0] == 0.0 and ok

        def __repr__(self) -> str:
            return f"{count} updates {period} s apart"

    return Spaced()


def test_rate_and_budget(live, clock):
    # cheap updates: the rate decides (every 100 ms)
    assert updates(live, clock, ("0", "activation"), 0.5) == every(0.1, 5)
    # 2 ms each over 3 layers: 0.002 * 3 / 0.02 = 0.3 s apart
    for name in "012":
        live.throttle.note_cost((name, "activation"), 0.002)
    assert updates(live, clock, ("1", "activation"), 1.0) == every(0.3, 4)


def test_one_second_floor_while_affordable(live, clock):
    # alone it would wait 0.012 * 3 / 0.02 = 1.8 s
    live.throttle.note_cost(("0", "activation"), 0.012)
    live.throttle.note_cost(("1", "activation"), 0.001)
    live.throttle.note_cost(("2", "activation"), 0.001)
    # all three take 14 ms, within 2% of a second: the floor holds
    assert updates(live, clock, ("0", "activation"), 3.0) == every(1, 3)


def test_floor_stretches_to_the_budget_when_every_update_is_expensive(live, clock):
    for name, cost in (("0", 0.05), ("1", 0.03), ("2", 0.02)):  # 100 ms a round: 10%
        live.throttle.note_cost((name, "activation"), cost)
    # each waits at most 0.1 / 0.02 = 5 s (not MAX_WAIT = 1 s); the cheapest its own share
    assert updates(live, clock, ("0", "activation"), 11.0) == every(5, 3)
    assert updates(live, clock, ("2", "activation"), 7.0) == every(3, 3)
    # deselecting the expensive layers forgets their costs: the floor is back
    live.sync(["2"], gradients=False)
    clock.now += 10
    assert updates(live, clock, ("2", "activation"), 2.5) == every(1, 3)


def test_one_slow_update_does_not_hold_every_key_back(live, clock):
    for name in "012":
        for _ in range(4):
            live.throttle.note_cost((name, "activation"), 0.002)
    # an update descheduled for 0.5 s: alone it would stretch every wait to 25 s
    live.throttle.note_cost(("0", "activation"), 0.5)
    assert live.throttle.costs[("0", "activation")] == 0.002  # the median of its last 5
    assert updates(live, clock, ("1", "activation"), 1.0) == every(0.3, 4)
    for _ in range(3):  # an update that stays slow is a real cost
        live.throttle.note_cost(("0", "activation"), 0.5)
    assert live.throttle.costs[("0", "activation")] == 0.5


def test_real_reductions_are_measured_and_spaced():
    model = nn.Sequential(nn.Identity())
    got = []
    live = LiveHooks(model, got.extend, print)
    live.throttle.budget = 1e-9
    live.sync(["0"], gradients=False)
    x = torch.randn(64, 64)
    for _ in range(5):
        model(x)
    assert len(got) == 1 and live.throttle.costs[("0", "activation")] > 0
    assert live.throttle.spacing(("0", "activation")) > MAX_WAIT  # a real cost over no budget
    expected = tensor_stats(x)
    assert got[0].stats.mean == expected.mean and (got[0].stats.hist == expected.hist).all()
    live.close()


def test_updates_late_by_part_of_a_step_make_the_next_one_sooner(live, clock):
    # 3 keys of 14.67 ms over 2%: 2.2 s apart, asked once a 0.5 s step
    for name in "012":
        live.throttle.note_cost((name, "activation"), 0.022 / 1.5)
    key, start, times = ("0", "activation"), clock.now, []
    for tick in range(89):  # 44 s of steps
        clock.now = start + tick * 0.5
        if live.due(key)[0]:
            times.append(tick * 0.5)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert set(gaps) == {2.0, 2.5}  # the step before or after 2.2 s, never a step more
    assert sum(gaps) / len(gaps) == pytest.approx(2.2, abs=0.05)  # the budget's spacing
