"""Explorer.nonfinite: where values first went NaN / Inf, on a real training loop."""

from __future__ import annotations

import json

import torch
from torch import nn


def broken_at(step: int):
    """A small MLP trained with SGD whose second Linear's weights go NaN before forward ``step``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def run(steps: range) -> None:
        for i in steps:
            if i == step:
                with torch.no_grad():
                    model[2].weight.fill_(float("nan"))
            opt.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()

    return model, run


def test_the_first_entry_is_where_values_broke_in_forward_order(make):
    model, run = broken_at(3)
    # selected out of forward order: the list follows the forwards, not the selection
    ex = make(model, selected=["3", "2", "0"], gradients=True, max_rate=0)
    run(range(3))
    assert ex.nonfinite == []
    run(range(3, 6))
    first = ex.nonfinite[0]
    assert (first.layer, first.key, first.step) == ("2", "2/output", 3)
    assert first.nans == 4 * 16 and first.infs == 0  # every value of the batch
    keys = [n.key for n in ex.nonfinite]
    assert keys.index("2/output") < keys.index("3/output")  # layer 3 reads layer 2
    # step 3's backward spreads NaN gradients, SGD makes every weight NaN: layer 0 breaks one
    # step later, and the list still starts where it began
    steps = {n.key: n.step for n in ex.nonfinite}
    assert steps == {"2/output": 3, "3/output": 3, "3/grad_output": 3, "2/grad_output": 3,
                     "0/grad_output": 3, "0/output": 4}  # fmt: skip
    assert keys[:2] == ["2/output", "3/output"] and keys[-1] == "0/output"
    assert len(keys) == len(set(keys))  # one entry per key: its first
    latest = ex.stats("2")["2/output"].latest
    assert latest.nans == latest.numel and latest.mean is None  # all NaN: the view says so
    wire = json.loads(json.dumps(ex.get_state()["nonfinite"]))  # as the comm sends it
    assert wire[0] == ["2", "2/output", 3, 64, 0]


def test_the_first_occurrence_outlives_the_bounded_history(make):
    model, run = broken_at(1)
    ex = make(model, selected=["2"], max_rate=0, gradients=False)  # the output's key alone
    run(range(ex._history.maxlen + 20))
    assert ex.stats("2")["2/output"].steps[0] > 1  # the history moved past the break
    assert [(n.key, n.step) for n in ex.nonfinite] == [("2/output", 1)]
    ex.close()
    assert ex.nonfinite == []  # close() drops the recorded data
