"""Parameter histograms (``Explorer(..., params=True)``) on a real training loop."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from support.models import tiny_bert, token_inputs
from torch import nn

from surgeon_widgets.engine.registry import live_hooks
from surgeon_widgets.engine.stats import tensor_stats
from surgeon_widgets.widget import Explorer


@pytest.fixture
def training():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    ex = Explorer(model, params=True, max_rate=0, selected=["0", "1"])
    ex.sent = []
    ex.send = lambda content, buffers=None: ex.sent.append((content, buffers or []))
    yield model, ex
    ex.close()
    ex.close()


def same(stats, tensor):
    ref = tensor_stats(tensor)
    assert stats.shape == ref.shape and stats.mean == pytest.approx(ref.mean)
    assert stats.l2 == pytest.approx(ref.l2) and np.array_equal(stats.hist, ref.hist)


def test_weights_move_and_gradients_match_grad_in_a_training_loop(training):
    model, ex = training
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    weights, grads = [], []
    for _ in range(4):
        weights.append(model[0].weight.detach().clone())
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        grads.append(model[0].weight.grad.clone())
        opt.step()
    assert ex.param_layers == ["0"]  # ReLU has no parameters of its own
    assert {h["name"] for h in ex.hooks if h["kind"] == "parameters"} == {"0"}
    series = ex.stats("0")
    assert {k: s.kind for k, s in series.items()} == {
        "0/output": "activation", "0/grad_output": "gradient",  # gradients: on by default
        "0/weight": "weight", "0/bias": "weight",
        "0/weight.grad": "weight grad", "0/bias.grad": "weight grad",
        "0/weight.update": "update", "0/bias.update": "update",
    }  # fmt: skip
    w = series["0/weight"]
    assert w.steps == [0, 1, 2, 3]
    for stats, weight in zip(w.values, weights, strict=True):
        same(stats, weight)  # the histogram moves with the weights
    assert not np.array_equal(w.values[0].hist, w.values[-1].hist)
    g = series["0/weight.grad"]
    assert g.steps == [0, 1, 2, 3]
    for stats, grad in zip(g.values, grads, strict=True):
        same(stats, grad)
    u = series["0/weight.update"]
    assert u.steps == [1, 2, 3]  # the change an optimizer step made, seen at the next forward
    same(u.values[0], weights[1] - weights[0])
    kinds = {it["kind"] for content, _ in ex.sent if content["type"] == "stats"
             for it in content["items"]}  # fmt: skip
    assert kinds == {"activation", "gradient", "weight", "weight grad", "update"}  # one transport


def test_per_layer_switch_and_no_update_without_a_step(training):
    model, ex = training
    ex.param_layers = []  # the panel's switch, off
    assert [h for h in ex.hooks if h["kind"] == "parameters"] == []
    model(torch.randn(2, 8)).sum().backward()
    assert "0/weight" not in ex.stats("0")
    ex.param_layers = ["0"]
    for _ in range(2):  # no optimizer: weights unchanged, so no update record
        model(torch.randn(2, 8)).sum().backward()
    keys = set(ex.stats("0"))
    assert {"0/weight", "0/weight.grad"} <= keys and "0/weight.update" not in keys
    ex.select([])
    assert ex.param_layers == [] and live_hooks() == []


def test_params_off_by_default_and_unknown_argument_hint():
    model = nn.Sequential(nn.Linear(2, 2))
    ex = Explorer(model, selected=["0"], max_rate=0)
    model(torch.ones(1, 2))
    assert set(ex.stats("0")) == {"0/output"} and ex.param_layers == []
    ex.close()
    with pytest.raises(TypeError, match="did you mean 'params'"):
        Explorer(model, param=True)


def test_a_selection_change_writes_hooks_once(training):
    _, ex = training
    writes = []
    ex.observe(lambda change: writes.append(change["new"]), "hooks")
    ex.select(["0", "1", "2"])  # params=True: "2" joins param_layers too
    assert ex.param_layers == ["0", "2"]
    assert len(writes) == 1 and {(h["name"], h["kind"]) for h in writes[0]} == {
        ("0", "forward"), ("1", "forward"), ("2", "forward"),
        ("0", "gradient"), ("1", "gradient"), ("2", "gradient"),  # on by default
        ("0", "parameters"), ("2", "parameters"),
    }  # fmt: skip
    ex.gradients = False
    assert len(writes) == 2 and {"name": "2", "kind": "gradient"} not in writes[1]


def of_class(model: nn.Module, cls: str) -> str:
    return next(name for name, m in model.named_modules() if type(m).__name__ == cls)


def test_a_container_shows_its_childrens_parameters_or_says_where_they_are():
    model = tiny_bert().train()
    out, block = of_class(model, "BertOutput"), of_class(model, "BertLayer")
    dropout = f"{out}.dropout"
    ex = Explorer(model, params=True, max_rate=0, selected=[out, block, dropout])
    assert ex.param_layers == [out]  # BertOutput owns no weight: its dense and LayerNorm's
    assert set(ex.param_notes) == {block, dropout}
    assert ex.param_notes[dropout] == "Dropout has no parameters"
    assert f"'{block}.attention.self'" in ex.param_notes[block]  # where to tick instead
    ex.param_layers = [out, block]  # ticked anyway (from the view): it cannot hold
    assert ex.param_layers == [out]
    model(**token_inputs()).last_hidden_state.sum().backward()
    series = ex.stats(out)
    dense = model.get_submodule(f"{out}.dense")
    same(series[f"{out}/dense.weight"].latest, dense.weight)
    same(series[f"{out}/dense.weight.grad"].latest, dense.weight.grad)
    assert f"{out}/LayerNorm.bias" in series
    assert sorted(ex.stats(block)) == [f"{block}/grad_output", f"{block}/output"]  # no params
    ex.close()


def test_the_note_of_a_box_that_cannot_be_ticked_can_be_followed():
    model = tiny_bert().train()
    block = of_class(model, "BertLayer")
    ex = Explorer(model, max_rate=0, selected=[block])
    note = ex.param_notes[block]
    assert note.startswith("no weights of its own or its children's: select ")
    named = re.findall(r"'([^']+)'", note.split(": select ", 1)[1].split(" in the tree")[0])
    assert named and "parameters" in note.split(" in the tree, then tick ")[1]
    # the hint, followed: select those layers, tick their boxes; the boxes hold
    ex.select([block, *named])
    assert not [n for n in named if n in ex.param_notes]  # their boxes can be ticked
    ex.param_layers = named
    assert ex.param_layers == named
    model(**token_inputs()).last_hidden_state.sum().backward()
    shown = {k.split("/", 1)[0] for n in named for k in ex.stats(n) if k.endswith(".weight")}
    assert shown == set(named)
    # between them they show every weight of the block
    weights = {f"{block}.{n}" for n, _ in model.get_submodule(block).named_parameters()}
    keys = {f"{n}.{k.split('/', 1)[1]}" for n in named for k in ex.stats(n)
            if k.split("/", 1)[1].endswith(("weight", "bias"))}  # fmt: skip
    assert keys == weights
    ex.close()
