"""Each stats item says how often its key updates (``every``, from the records' times) and how
many values a sampled histogram binned (``sampled``)."""

from __future__ import annotations

import torch
from torch import nn

from surgeon_widgets.engine.stats import SAMPLE


class Clock:
    """The throttle's clock, moved by hand: half a second a training step."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_items_carry_the_update_interval_and_the_sample_size(make, from_view):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 10))  # fmt: skip
    ex = make(model, selected=["0", "4"], gradients=True)
    clock = Clock()
    ex._live.throttle.now = clock
    ex._live.throttle.budget = 1e6  # no time limit: every step is due, the interval is its
    x = torch.randn(4, 3, 64, 64)  # the conv's output: 4 x 16 x 64 x 64 = 2^18 values

    def step() -> list[dict]:
        before = len(ex.sent)
        model(x).square().mean().backward()
        clock.now += 0.5
        return [it for c, _ in ex.sent[before:] if c["type"] == "stats" for it in c["items"]]

    first = step()
    keys = {"0/output", "0/grad_output", "4/output", "4/grad_output"}
    assert {it["key"] for it in first} == keys
    assert all("every" not in it for it in first)  # one record: no interval yet
    for _ in range(3):
        got = step()
    assert {it["key"]: it["every"] for it in got} == dict.fromkeys(keys, 0.5)
    sampled = {it["key"]: it.get("sampled") for it in got}
    assert sampled == {"0/output": SAMPLE, "0/grad_output": SAMPLE,
                       "4/output": None, "4/grad_output": None}  # fmt: skip
    assert ex._history.every("0/output") == 0.5
    # a view that opens later gets the interval with the latest items
    from_view(ex, {"type": "hello"})
    content, _ = ex.sent[-1]
    assert content["type"] == "snapshot"
    assert {it["key"]: it["every"] for it in content["items"]} == dict.fromkeys(keys, 0.5)
    # slower steps: the median of the last 8 intervals follows within a few updates
    for _ in range(5):
        clock.now += 1.5
        got = step()
    assert {it["every"] for it in got} == {2.0}
