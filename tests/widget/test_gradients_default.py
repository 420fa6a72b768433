"""Issue 32 §5: ``Explorer(model)`` records gradients when a backward runs (on by default), and
eval-only use costs what it cost with ``gradients=False``."""

from __future__ import annotations

import torch
from torch import nn

from surgeon_widgets.engine.registry import live_hooks


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def test_explorer_model_records_gradients_when_a_backward_runs(make):
    model = _model()
    ex = make(model, max_rate=0, selected=["0", "2"])
    assert ex.gradients
    x = torch.randn(4, 8)
    out = model(x)
    out.sum().backward()
    expected = model[2].weight.detach().sum(0).expand(4, 16) * (model[0](x) > 0)
    got = ex.stats("0")["0/grad_output"].latest
    assert got.shape == (4, 16)
    assert abs(got.mean - expected.mean().item()) < 1e-6
    assert ex.stats("2")["2/grad_output"].latest.mean == 1.0  # d(sum)/d(out)


def test_eval_only_adds_no_gradient_hook_and_keeps_the_update_rate(make):
    model = _model().eval()
    on = make(model, selected=["0", "2"])
    throttle = on._live.throttle
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 8))
    assert not [h for h in live_hooks() if h[0] == "Explorer gradients"]
    assert throttle.keys == 2  # the activations alone share the budget, as with gradients off
    assert set(on.stats("0")) == {"0/output"}
    model.train()
    model(torch.randn(4, 8)).sum().backward()  # gradients came: their keys share it too
    assert throttle.keys == 4
    on.gradients = False
    assert throttle.keys == 2


def test_gradient_hooks_go_on_at_twice_max_rate_not_at_every_forward(make):
    model = _model()
    ex = make(model, selected=["0", "2"], max_rate=10)  # a gradient every 0.1 s at most
    now = [0.0]
    ex._live.throttle.now = lambda: now[0]
    waiting = lambda: [n for owner, _, n in live_hooks() if owner == "Explorer gradients"]  # noqa: E731
    kept = [model(torch.randn(4, 8)) for _ in range(40)]  # an eval loop under grad, 0 s long
    assert sorted(waiting()) == ["0", "2"]  # one forward's hooks, not 16 per layer
    del kept
    hooked = []
    for _ in range(12):  # training, a step every 1/32 s: hooks on every other step
        now[0] += 1 / 32
        out = model(torch.randn(4, 8))
        hooked.append(len(waiting()))
        out.sum().backward()
    assert hooked == [0, 2] * 6 and waiting() == []
    # the gradient still comes at its rate: every 0.125 s (the throttle's 0.1 s, at a hook)
    assert ex.stats("0")["0/grad_output"].steps == [41, 45, 49]
