"""One process: what a record holds. Histograms that cover each step's values, eval forwards
kept out of training records, parameters of container modules and their gradients, L2."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from surgeon_widgets import Recorder, read_run

pytestmark = pytest.mark.timeout(60)


def values_of(module: nn.Module, store: list):
    return module.register_forward_hook(lambda m, a, out: store.append(out.detach().double()))


def test_drifting_values_fall_inside_every_histogram_the_first_included(tmp_path):
    # the values move by many spreads between records and grow 4x each step: a histogram over
    # edges learnt from an earlier record would miss most of them
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64))
    seen: list = []
    handle = values_of(model[0], seen)
    with Recorder(model, tmp_path, layers=["0"], every=3, gradients=False) as rec:
        for step in range(10):
            x = torch.randn(64, 16) * 4.0**step + 100.0 * step
            model(x).sum().backward()
            rec.step()
    handle.remove()
    series = read_run(tmp_path).stats("0")["0/output"]
    assert series.steps == [0, 3, 6, 9]
    for step, stats in zip(series.steps, series.values):
        values = seen[step].reshape(-1).numpy()
        assert (stats.lo, stats.hi) == (values.min(), values.max())
        assert stats.hist.sum() == (values != 0).sum() and (stats.under, stats.over) == (0, 0)
        # log-spaced buckets put each value within 1/8 of its distance from the centre
        expect, _ = np.histogram(values, bins=64, range=(stats.lo, stats.hi))
        assert np.abs(stats.hist - expect).sum() <= 0.1 * values.size, (step, stats.hist, expect)


def test_a_relus_exact_zeros_leave_its_bins_and_the_rest_keeps_its_shape(tmp_path):
    # about half a ReLU's outputs are exact zeros: shown as their own bar (the share in
    # ``zeros``), counted in no bin, so the bins are the histogram of the other values
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 4), nn.Linear(4, 3))
    with torch.no_grad():  # a dead layer: every output an exact zero
        model[3].weight.zero_(), model[3].bias.zero_()
    seen: dict[str, list] = {"1": [], "2": [], "3": []}
    handles = [values_of(model[int(name)], seen[name]) for name in seen]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with Recorder(model, tmp_path, layers=list(seen), every=1, gradients=False) as rec:
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(128, 16)).pow(2).mean().backward()
            opt.step()
            rec.step()
    for handle in handles:
        handle.remove()
    run = read_run(tmp_path)
    relu, plain, dead = (run.stats(name)[f"{name}/output"] for name in seen)
    assert relu.steps == [0, 1, 2, 3]
    for step, stats in zip(relu.steps, relu.values):
        values = seen["1"][step].reshape(-1).numpy()
        nonzero = values[values != 0]
        assert 0.3 < stats.zeros == 1 - nonzero.size / values.size < 0.7
        assert stats.hist.sum() == nonzero.size and (stats.lo, stats.hi) == (0.0, values.max())
        # against float64 bins of the non-zero values: no spike in the bin the zeros lie in
        expect, _ = np.histogram(nonzero, bins=64, range=(stats.lo, stats.hi))
        assert np.abs(stats.hist - expect).sum() <= 0.1 * nonzero.size, (step, stats.hist, expect)
        assert stats.hist[0] <= 1.5 * expect[0] + 0.01 * nonzero.size, (step, stats.hist, expect)
    for step, stats in zip(plain.steps, plain.values):  # no exact zero: every value binned
        assert stats.zeros == 0 and stats.hist.sum() == seen["2"][step].numel()
    for stats in dead.values:  # all exact zeros: the zero bar holds them, no bin does
        assert (stats.zeros, stats.min, stats.max) == (1.0, 0.0, 0.0) and not stats.hist.any()


def test_eval_forwards_stay_out_of_the_training_record(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    xs = [torch.randn(5, 4) for _ in range(5)]
    outs = [model[0](x).detach().double() for x in xs]
    with Recorder(model, tmp_path, layers=["0"], every=1) as rec:
        # step 0: train, then an eval pass before rec.step()
        model(xs[0]).sum().backward()
        model.eval()
        with torch.no_grad():
            model(xs[1])
        model.train()
        rec.step()
        # step 1: an eval pass first, then training: the eval values leave the record
        model.eval()
        with torch.no_grad():
            model(xs[2])
        model.train()
        model(xs[3]).sum().backward()
        rec.step()
        # step 2: only eval: the record holds it, marked eval
        model.eval()
        with torch.no_grad():
            model(xs[4])
        rec.step()
    stats = read_run(tmp_path).stats("0")
    out, grad = stats["0/output"], stats["0/grad_output"]
    assert out.steps == [0, 1, 2] and grad.steps == [0, 1]
    got = [(s.mode, s.calls, s.eval_calls) for s in out.values]
    assert got == [("train", 1, 1), ("train", 1, 1), ("eval", 1, 0)]
    for s, ref in zip(out.values, [outs[0], outs[3], outs[4]]):
        assert (s.numel, s.min, s.max) == (ref.numel(), ref.min().item(), ref.max().item())
        assert s.mean == pytest.approx(ref.mean().item(), rel=1e-12)
    assert [s.mode for s in grad.values] == ["train", "train"]
    assert "1 eval forward(s) left out" in out.values[0].note


def test_container_parameters_and_their_gradients_with_l2(tmp_path):
    torch.manual_seed(0)
    block = nn.Sequential(OrderedDict(dense=nn.Linear(4, 8), act=nn.ReLU(), out=nn.Linear(8, 2)))
    model = nn.Sequential(OrderedDict(block=block))
    block.out.bias.requires_grad_(False)  # frozen: a value, never a gradient
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    refs = []
    with Recorder(model, tmp_path, layers=["block"], every=1, params=True) as rec:
        for _ in range(2):
            model(torch.randn(6, 4)).pow(2).mean().backward()
            refs.append({n: (p.detach().clone(), None if p.grad is None else p.grad.clone())
                         for n, p in block.named_parameters()})  # fmt: skip
            rec.step()
            opt.step()
            opt.zero_grad()
    run = read_run(tmp_path)
    stats = run.stats("block")
    assert "block/dense.weight" in stats and "block/dense.weight.grad" in stats
    assert "block/out.bias" in stats and "block/out.bias.grad" not in stats
    kinds = {k["key"]: k["kind"] for k in run.keys}
    assert kinds["block/dense.weight.grad"] == "parameter_gradient"
    for name, (value, grad) in refs[-1].items():
        for key, ref in [(f"block/{name}", value), (f"block/{name}.grad", grad)]:
            if ref is None:
                continue
            s = stats[key].latest
            r = ref.double().reshape(-1)
            assert stats[key].steps == [0, 1] and s.numel == r.numel(), key
            assert (s.min, s.max) == (r.min().item(), r.max().item()), key
            assert s.l2 == pytest.approx(torch.linalg.vector_norm(r).item(), rel=1e-12), key
    # outputs and their gradients carry an L2 norm too
    out = stats["block/output"].latest
    assert out.l2 is not None and out.l2 > 0
