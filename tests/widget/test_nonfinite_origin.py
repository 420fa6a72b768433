"""Explorer.nonfinite[0]: the first module, in forward order, whose output went NaN / Inf, and
its step, whatever the throttle skipped and whether or not that module was selected (issue 32
item 1); a non-finite input named as the input; a gradient only when the forward was finite."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from surgeon_widgets.engine.registry import live_hooks
from tests.support.models import tiny_gpt2

BREAK = 7  # the step whose forward first meets the broken weight


class StepTime:
    """The throttle's clock moved on by ``dt`` seconds per step: at the default 10 updates a
    second, a key is due every other step (what it records does not depend on the machine)."""

    def __init__(self, dt: float = 0.06) -> None:  # 1.5: every key is due every step
        self.dt, self.now = dt, 0.0

    def __call__(self) -> float:
        return self.now


def resnet():
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None, num_classes=10)


def train(model, steps, breaks=lambda step: None, clock=None, batch=None):
    """SGD steps of ``model`` on a fixed batch; ``breaks(step)`` runs before step ``step``."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = batch if batch is not None else (torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,)))
    for step in steps:
        breaks(step)
        opt.zero_grad()
        out = model(x)
        nn.functional.cross_entropy(out, y).backward()
        opt.step()
        if clock is not None:
            clock.now += clock.dt


def times_inf(weight: torch.Tensor, at: int):
    def breaks(step: int) -> None:
        if step == at:
            with torch.no_grad():
                weight.mul_(float("inf"))

    return breaks


def test_resnet_the_broken_conv_is_named_though_not_selected_and_its_step_skipped(make):
    model = resnet()
    # the view: a deeper layer and its gradients selected, the default throttle
    ex = make(model, selected=["layer4.1.conv2", "fc"], gradients=True)
    clock = ex._live.throttle.now = StepTime()
    batch = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    recorded = lambda: ex.stats("layer4.1.conv2")["layer4.1.conv2/output"].steps  # noqa: E731
    step = 0
    while step < 3 or recorded()[-1] != step - 1:  # until the step before had a record
        train(model, [step], clock=clock, batch=batch)
        step += 1
        assert step < 100, recorded()
    at = step  # 0.06 s after a record: not due at 10 a second, the throttle skips it
    assert ex.nonfinite == [] and ex._live.nonfinite.found is None
    train(model, range(at, at + 6), times_inf(model.layer3[0].conv1.weight, at), clock, batch)
    assert at not in recorded()  # the old list could not have named the break's step
    first = ex.nonfinite[0]
    assert (first.layer, first.key, first.step) == ("layer3.0.conv1", "layer3.0.conv1/output", at)
    assert first.nans == first.infs == 0  # not selected: no record of that step, no counts
    # the selected layers' own first records, if any came yet, are later (the throttle)
    assert all(n.step >= at for n in ex.nonfinite[1:]), ex.nonfinite
    assert ex.errors == []
    # found: the watch's hooks are gone (the origin never changes), the views' stay
    assert not any(owner.startswith("Explorer non-finite") for owner, _, _ in live_hooks())
    assert ex.hooks  # the selection is still watched


def test_resnet_default_throttle_and_clock(make):
    model = resnet()
    ex = make(model, selected=["layer4.1.conv2"], gradients=True)
    train(model, range(12), times_inf(model.layer3[0].conv1.weight, BREAK))
    first = ex.nonfinite[0]
    assert (first.key, first.step) == ("layer3.0.conv1/output", BREAK)


def test_a_selected_broken_layer_keeps_its_counts(make):
    model = resnet()
    ex = make(model, selected=["layer3.0.conv1"], max_rate=0)  # records every step
    train(model, range(BREAK + 2), times_inf(model.layer3[0].conv1.weight, BREAK))
    first = ex.nonfinite[0]
    assert (first.key, first.step) == ("layer3.0.conv1/output", BREAK)
    assert first.nans + first.infs == first.nans == 4 * 256 * 2 * 2  # every value: ±inf summed


def gpt2_lm():
    torch.manual_seed(0)
    return tiny_gpt2("GPT2LMHeadModel", n_embd=64).train()


def test_gpt2_the_broken_projection_is_named(make):
    model = gpt2_lm()
    fc = next(n for n, m in model.named_modules() if n.endswith("h.1.mlp.c_fc"))
    ex = make(model, selected=[fc.replace("h.1", "h.0")])  # another block's layer
    clock = ex._live.throttle.now = StepTime()
    ids = torch.randint(0, 100, (2, 16))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    breaks = times_inf(model.get_submodule(fc).weight, BREAK)
    step = 0
    while not ex.nonfinite:  # the flags are read at the next update the throttle lets through
        breaks(step)
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        clock.now += clock.dt
        step += 1
        assert step < BREAK + 50
    assert step > BREAK
    first = ex.nonfinite[0]
    assert (first.layer, first.key, first.step) == (fc, f"{fc}/output", BREAK)
    assert ex.errors == []


def test_a_nonfinite_input_is_named_as_the_input(make):
    model = resnet()
    ex = make(model, selected=["fc"])
    clock = ex._live.throttle.now = StepTime(1.5)  # the step after the break reads the flags
    good = torch.randn(4, 3, 32, 32)
    bad = good.clone()
    bad[1, 2, 3, 4] = float("nan")
    y = torch.randint(0, 10, (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(BREAK + 3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(bad if step == BREAK else good), y).backward()
        opt.step()
        clock.now += clock.dt
    first = ex.nonfinite[0]
    assert (first.layer, first.key, first.step) == ("", "input", BREAK)


def test_a_gradient_is_named_when_the_forward_was_finite(make):
    model = resnet()
    ex = make(model, selected=["layer1.0.conv1"], gradients=True)
    clock = ex._live.throttle.now = StepTime(1.5)

    def loss(out: torch.Tensor) -> torch.Tensor:
        # from BREAK on: sqrt at 0 is finite, its gradient is not (0 * inf: NaN)
        return (out - out.detach()).pow(2).sum().sqrt() if loss.step >= BREAK else out.mean()

    loss.step = 0
    x = torch.randn(4, 3, 32, 32)
    for step in range(BREAK + 3):  # no optimizer step: the weights stay finite
        loss.step = step
        model.zero_grad()
        value = loss(model(x))
        assert torch.isfinite(value)
        value.backward()
        clock.now += clock.dt
    first = ex.nonfinite[0]
    assert (first.layer, first.key, first.step) == ("", "grad_output", BREAK)
    # no forward output went non-finite: nothing else names an output
    assert not any(n.key.endswith("/output") for n in ex.nonfinite)


def test_a_gradient_broken_inside_the_model_is_named_by_the_next_forward(make):
    class Root(nn.Module):  # sqrt(|x|) at 0: finite, its gradient 0 * inf is NaN
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.abs().sqrt()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4, bias=False), Root(), nn.Linear(4, 2))
    ex = make(model, selected=["2"], max_rate=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    for step in range(5):
        if step == 2:
            with torch.no_grad():
                model[0].weight.zero_()  # its output is 0: the backward alone breaks
        opt.zero_grad()
        out = model(x)
        assert torch.isfinite(out).all() or step > 2
        out.pow(2).mean().backward()
        opt.step()
    # parameters' gradients are not checked (their cost): the NaN weight's output, a step on
    first = ex.nonfinite[0]
    assert (first.layer, first.key, first.step) == ("0", "0/output", 3)


def test_compiled_model_is_checked_in_its_eager_steps(make):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Linear(16, 1))
    run = torch.compile(model, backend="eager")
    ex = make(run, selected=["3"], max_rate=0)  # every step records: runs eagerly
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    breaks = times_inf(model[2].weight, 3)
    for step in range(6):
        breaks(step)
        opt.zero_grad()
        run(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
    first = ex.nonfinite[0]
    assert (first.key, first.step) == ("2/output", 3)


@pytest.mark.parametrize("selected", [[], ["fc"]])
def test_nothing_is_left_behind(make, selected):
    model = resnet()
    ex = make(model, selected=selected)
    train(model, range(2))
    ex.close()
    assert live_hooks() == []
    assert all(not m._forward_hooks for m in model.modules())


def test_a_break_in_the_last_step_is_named_when_the_cell_ends(make):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Linear(16, 1))
    ex = make(model, selected=["3"], max_rate=0)
    model(torch.randn(4, 8))
    with torch.no_grad():
        model[2].weight.fill_(float("inf"))
    model(torch.randn(4, 8))  # the last forward: layer 3's record came before its flags closed
    assert [n.key for n in ex.nonfinite] == ["3/output"]
    ex._cell_ended()  # IPython's post_execute (notebook.on_cell_end)
    assert [(n.key, n.step) for n in ex.nonfinite] == [("2/output", 1), ("3/output", 1)]
