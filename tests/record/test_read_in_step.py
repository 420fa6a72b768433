"""One process: small outputs and their gradients read in step() (held, retain_grad) are the
values the hooks saw; outputs edited in place after their hook stay on the hook path."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from surgeon_widgets import Recorder, read_run
from surgeon_widgets.record.intake import HOLD_CALLS

pytestmark = pytest.mark.timeout(60)


def reference(module: nn.Module, outs: list, grads: list):
    """The values of ``module``'s outputs at its hook, and their gradients, step by step."""

    def hook(m, args, out):
        outs.append(out.detach().double().clone())
        if out.requires_grad:
            out.register_hook(lambda g: grads.append(g.detach().double().clone()))

    return module.register_forward_hook(hook)


def assert_series_equal(series, refs):
    assert len(series.values) == len(refs)
    for stats, ref in zip(series.values, refs):
        assert (stats.numel, stats.min, stats.max) == (ref.numel(), ref.min(), ref.max())
        assert stats.mean == pytest.approx(ref.mean().item(), rel=1e-9, abs=1e-15)
        assert stats.std == pytest.approx(ref.std().item(), rel=1e-9, abs=1e-15)
        assert stats.hist.sum() == ref.numel() - int((ref == 0).sum())  # zeros: own bar


def test_held_values_equal_the_hooks_values_and_in_place_edits_stay_at_the_hook(tmp_path):
    # "0"'s output is edited by ReLU(inplace) after its hook: read at the hook (and its gradient
    # by a tensor hook); "2" and "4" are read in step(): outputs held, gradients retained
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(inplace=True), nn.Linear(16, 16), nn.Tanh(),
                          nn.Linear(16, 3))  # fmt: skip
    refs = {name: ([], []) for name in ("0", "2", "4")}
    handles = [reference(model.get_submodule(n), *refs[n]) for n in refs]
    with Recorder(model, tmp_path, layers=list(refs), every=1) as rec:
        for _ in range(4):
            model(torch.randn(5, 6)).pow(2).sum().backward()
            rec.step()
        read_in_step = {k.layer: rec._intake.in_place_free[k.index] for k in rec.keys
                        if k.kind == "activation"}  # fmt: skip
    for handle in handles:
        handle.remove()
    assert read_in_step == {"0": False, "2": True, "4": True}
    run = read_run(tmp_path)
    for name, (outs, grads) in refs.items():
        stats = run.stats(name)
        assert stats[f"{name}/output"].steps == stats[f"{name}/grad_output"].steps == [0, 1, 2, 3]
        assert_series_equal(stats[f"{name}/output"], outs)
        assert_series_equal(stats[f"{name}/grad_output"], grads)


class AddOne(nn.Module):
    """``x + 1``; in place (editing the layer before it) once ``in_place`` is set."""

    in_place = False

    def forward(self, x):
        return x.add_(1.0) if self.in_place else x + 1.0


def test_a_layer_whose_output_is_edited_in_place_later_warns_and_leaves_that_call_out(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), AddOne(), nn.Linear(8, 2))
    outs, grads = [], []
    handle = reference(model[0], outs, grads)
    with Recorder(model, tmp_path, layers=["0"], every=1) as rec:
        for step in range(4):
            model[1].in_place = step == 2
            model(torch.randn(3, 4)).sum().backward()
            if step == 2:
                with pytest.warns(RuntimeWarning, match="'0' was modified in place after its"):
                    rec.step()
            else:
                rec.step()
    handle.remove()
    stats = read_run(tmp_path).stats("0")
    # steps 0-1 read in step(); step 2's call is left out; step 3 at the hook
    assert stats["0/output"].steps == stats["0/grad_output"].steps == [0, 1, 3]
    assert_series_equal(stats["0/output"], [outs[i] for i in (0, 1, 3)])
    assert_series_equal(stats["0/grad_output"], [grads[i] for i in (0, 1, 3)])


def live_tensor_bytes() -> int:
    """Bytes of every distinct tensor storage alive in this process (what holding keeps)."""
    gc.collect()
    storages = {}
    for obj in gc.get_objects():
        if type(obj) in (torch.Tensor, nn.Parameter) and obj.layout == torch.strided:
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_an_eval_loop_of_200_forwards_at_a_recording_step_holds_a_bounded_number(tmp_path):
    # 12 layers of 16,384-value outputs: holding every call until step() would keep 157 MB alive
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(12)])
    x = torch.randn(1024, 16)
    with Recorder(model, tmp_path, every=1) as rec:
        model(x).sum().backward()  # a training step first: the layers are known to be safe
        rec.step()
        model.eval()
        before, rss = live_tensor_bytes(), resident_bytes()
        with torch.no_grad():
            for _ in range(200):
                model(x)
        held, grown = live_tensor_bytes() - before, resident_bytes() - rss
        assert all(rec._intake.in_place_free[k.index] for k in rec.keys if k.kind == "activation")
        assert len(rec._intake.held) == HOLD_CALLS * 12
        rec.step()
    assert held < 50e6 and grown < 50e6, (held, grown)
    assert held >= HOLD_CALLS * 12 * 1024 * 16 * 4  # what is held is what the count says
    # every call is in the record: those held and those reduced at the hook past the bound
    stats = read_run(tmp_path).stats("5")["5/output"]
    assert stats.steps == [0, 1] and stats.values[1].mode == "eval"
    assert stats.values[1].calls == 200
    with torch.no_grad():  # each eval forward computed the same values
        out = model[:6](x).double()
    assert_series_equal(SimpleNamespace(values=[stats.values[1]]), [torch.cat([out] * 200)])
