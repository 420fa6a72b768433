"""Explorer widget (Python side): tree rows, hook lifecycle, live stats, wire payloads, figures."""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass

import pytest
import torch
import torchvision
import transformers
from matplotlib.figure import Figure
from support.models import SomeModel, SomeModelFn, tiny_bert
from torch import nn

from surgeon_widgets import UnknownNameError, get_layers, get_nodes
from surgeon_widgets.engine.registry import live_hooks
from surgeon_widgets.widget import Explorer
from surgeon_widgets.widget.live.nonfinite import FINITE_IN_FINITE_OUT
from surgeon_widgets.widget.wire import BUDGET


def items(ex: Explorer) -> list[dict]:
    return [it for content, _ in ex.sent if content["type"] == "stats" for it in content["items"]]


def bert(layers: int = 2) -> nn.Module:
    return tiny_bert(hidden_size=64, intermediate_size=128, num_hidden_layers=layers)


def test_rows_are_get_layers_names(make):
    for model in (SomeModel(), torchvision.models.resnet18(), bert()):
        ex = make(model)
        assert [r["name"] for r in ex.rows] == get_layers(model)
        by_name = {r["name"]: r for r in ex.rows}
        for row in ex.rows:
            assert row["kind"] == "module"
            if row["parent"] is not None:
                assert by_name[row["parent"]]["depth"] == row["depth"] - 1
    resnet = {r["name"]: r for r in make(torchvision.models.resnet18()).rows}
    assert resnet["layer1"]["params"] == sum(p.numel() for p in torchvision.models.resnet18()
                                              .layer1.parameters())  # fmt: skip
    assert resnet["layer1"]["children"] == 2 and resnet["fc"]["cls"] == "Linear"


def test_graph_nodes_lazily_nested_under_owner(make):
    model = SomeModelFn()
    ex = make(model)
    assert not ex._tree.traced  # not traced until asked
    ex.show_nodes = True
    names = [r["name"] for r in ex.rows]
    assert set(names) == set(get_layers(model)) | set(get_nodes(model))
    resnet = make(torchvision.models.resnet18(), show_nodes=True)
    rows = {r["name"]: r for r in resnet.rows}
    assert rows["layer1.0.add"]["kind"] == "node" and rows["layer1.0.add"]["parent"] == "layer1.0"
    assert rows["layer1.0.relu_1"]["parent"] == "layer1.0"
    seen: set[str] = set()
    for r in resnet.rows:  # pre-order: parents first
        assert r["parent"] is None or r["parent"] in seen
        seen.add(r["name"])
    ex.show_nodes = False
    assert [r["name"] for r in ex.rows] == get_layers(model)


def test_untraceable_model_reports_nodes_error(make):
    model = bert()
    ex = make(model, show_nodes=True)
    assert "could not trace" in ex.nodes_error
    assert [r["name"] for r in ex.rows] == get_layers(model)


def test_meta_llama_tree_without_allocating(make):
    config = transformers.LlamaConfig(
        num_hidden_layers=80, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    start = time.perf_counter()
    ex = make(model)
    assert time.perf_counter() - start < 5
    assert 900 < len(ex.rows) < 1200
    assert all(p.is_meta for p in model.parameters())
    top = sum(r["params"] for r in ex.rows if r["depth"] == 0)
    assert 69e9 < top < 72e9  # a 70B model, counted from shapes only


def forward_hooked(model: torch.nn.Module, owner: str = "Explorer") -> set[str]:
    """The modules of ``model`` with a forward hook of ``owner`` (a HookRegistry's)."""
    named = {name for o, kind, name in live_hooks() if o == owner and kind == "forward"}
    return {n for n, m in model.named_modules() if m._forward_hooks and n in named}


def test_select_attaches_only_selected_and_removes(make, from_view):
    model = torchvision.models.resnet18()
    ex = make(model)
    ex.select(["layer1.0.conv1", "fc"])
    assert forward_hooked(model) == {"layer1.0.conv1", "fc"}
    assert {h["name"] for h in ex.hooks} == {"layer1.0.conv1", "fc"}
    # while any layer is selected, live.nonfinite checks every module's output (not ReLUs')
    checked = {n for n, m in model.named_modules() if type(m) not in FINITE_IN_FINITE_OUT}
    assert forward_hooked(model, "Explorer non-finite") == checked
    assert "layer1.0.relu" not in checked and "layer1.0.bn1" in checked
    ex.selected = ["fc"]  # from the front end
    assert forward_hooked(model) == {"fc"}
    from_view(ex, {"type": "remove_all_hooks"})
    assert ex.selected == [] and live_hooks() == [] and ex.hooks == []
    ex.select("fc")
    ex.close()
    assert live_hooks() == []


def test_unknown_and_node_names(make):
    ex = make(SomeModelFn())
    with pytest.raises(UnknownNameError, match="'layer2'"):
        ex.select(["layr2"])
    with pytest.raises(UnknownNameError):
        ex.stats("nope")
    ex.show_nodes = True
    ex.select(["sigmoid", "layer1"])
    assert any("Extract" in e["text"] and "'sigmoid'" in e["text"] for e in ex.errors)
    assert {h["name"] for h in ex.hooks} == {"layer1"}
    resnet = make(torchvision.models.resnet18(), show_nodes=True)
    resnet.select(["layer1.0.relu_1"])  # the second call of a module: no crash, a clear hint
    assert "call 1 of module 'layer1.0.relu'" in resnet.errors[-1]["text"] and resnet.hooks == []


def test_forward_updates_stats_against_reference(make):
    model = SomeModel()
    ex = make(model, max_rate=0)
    ex.select(["layer1", "layer2"])
    x = torch.randn(8, 5)
    x1 = model.layer1.weight.detach() @ x.T
    x1 = x1.T + model.layer1.bias.detach()
    model(x)
    latest = ex.stats("layer1")["layer1/output"].latest
    assert latest.mean == pytest.approx(x1.mean().item(), abs=1e-6)
    assert latest.std == pytest.approx(x1.std().item(), abs=1e-6)
    assert (latest.min, latest.max) == (x1.min().item(), x1.max().item())
    assert latest.shape == (8, 3) and latest.hist.sum() == 24
    assert ex.shapes["layer1"] == {"shape": [8, 3], "dtype": "float32"}
    sent = items(ex)
    assert [it["key"] for it in sent] == ["layer1/output", "layer2/output"]
    assert sent[0]["hist"] == {"buffer": 0, "dtype": "float32", "shape": [64]}
    assert ex.figure("layer1").axes and isinstance(ex.figure("layer1"), Figure)


def test_gradients_when_on(make):
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True), nn.Linear(6, 1))
    ex = make(model, max_rate=0, gradients=True)
    ex.select(["0", "2"])
    x = torch.randn(5, 4)
    model(x).sum().backward()
    h = model[0](x)
    expected = model[2].weight.detach().expand(5, 6) * (h > 0)  # through the in-place ReLU
    got = ex.stats("0")["0/grad_output"].latest
    assert got.mean == pytest.approx(expected.mean().item(), abs=1e-6)
    assert (got.min, got.max) == pytest.approx((expected.min().item(), expected.max().item()))
    assert {h["kind"] for h in ex.hooks} == {"forward", "gradient"}
    ex.gradients = False
    model(x).sum().backward()
    assert ex.stats("0")["0/grad_output"].steps == [0]


def test_resnet_gradients_do_not_break_inplace_relu(make):
    model = torchvision.models.resnet18(num_classes=10)
    ex = make(model, max_rate=0, gradients=True)
    ex.select(["bn1", "layer1.0.bn2", "fc"])
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    assert ex.errors == []
    assert {it["key"] for it in items(ex)} >= {"bn1/output", "bn1/grad_output", "fc/grad_output"}
    assert ex.stats("layer1.0.bn2")["layer1.0.bn2/output"].latest.min < 0  # before in-place ops


@dataclass
class Out:
    logits: torch.Tensor
    extra: torch.Tensor


class Weird(nn.Module):
    """Children whose outputs are ints, bools, empty, NaN, Inf, tuples, dicts and dataclasses."""

    def __init__(self) -> None:
        super().__init__()
        make = {
            "ints": lambda x: x.long(), "bools": lambda x: x > 0, "empty": lambda x: x[:0],
            "nans": lambda x: x * float("nan"), "infs": lambda x: x / 0.0,
            "tup": lambda x: (x, (x + 1, x.half())), "dct": lambda x: {"a": x, "b": x.int()},
            "dc": lambda x: Out(x, x.double()), "none": lambda x: None,
        }  # fmt: skip
        self.parts = nn.ModuleDict({k: Fn(f) for k, f in make.items()})

    def forward(self, x):
        return [part(x) for part in self.parts.values()]


class Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_weird_outputs_are_labelled(make):
    model = Weird()
    ex = make(model, max_rate=0)
    ex.select([f"parts.{k}" for k in model.parts])
    model(torch.tensor([[-1.0, 0.0, 2.0]]))
    assert ex.errors == []
    got = {it["key"]: it for it in items(ex)}
    assert set(got) == {
        "parts.ints/output", "parts.bools/output", "parts.empty/output", "parts.nans/output",
        "parts.infs/output", "parts.tup/output[0]", "parts.tup/output[1][0]",
        "parts.tup/output[1][1]", "parts.dct/a", "parts.dct/b", "parts.dc/logits", "parts.dc/extra",
    }  # fmt: skip
    assert got["parts.ints/output"]["dtype"] == "int64" and got["parts.ints/output"]["max"] == 2
    assert got["parts.bools/output"]["mean"] == pytest.approx(1 / 3)
    assert got["parts.empty/output"]["numel"] == 0 and got["parts.empty/output"]["mean"] is None
    assert got["parts.nans/output"]["nans"] == 3 and got["parts.nans/output"]["mean"] is None
    assert got["parts.infs/output"]["infs"] == 2 and got["parts.infs/output"]["nans"] == 1
    assert got["parts.tup/output[1][1]"]["dtype"] == "float16"
    for content, _ in ex.sent:
        json.dumps(content, allow_nan=False)  # valid JSON for the browser: no NaN / Infinity


def test_hf_model_output_leaves(make):
    model = bert()
    ex = make(model, max_rate=0)
    ex.select(["encoder", "encoder.layer.0.attention.self"])
    ids = torch.randint(0, 100, (2, 7))
    out = model(input_ids=ids)
    keys = {it["key"] for it in items(ex)}
    assert "encoder/last_hidden_state" in keys
    assert any(k.startswith("encoder.layer.0.attention.self/output") for k in keys)
    latest = ex.stats("encoder")["encoder/last_hidden_state"].latest
    assert latest.mean == pytest.approx(out.last_hidden_state.mean().item(), abs=1e-5)


def test_throttle(make):
    model = SomeModel()
    every = make(model, max_rate=0)
    every.select(["layer1"])
    for _ in range(20):
        model(torch.randn(2, 5))
    assert len(items(every)) == 20
    every.close()
    throttled = make(model)  # default: 10 updates a second
    assert throttled.max_rate == 10.0
    throttled.select(["layer1"])
    for _ in range(20):
        model(torch.randn(2, 5))
    sent = items(throttled)
    assert 1 <= len(sent) < 5 and sent[0]["step"] == 0
    with pytest.raises(Exception, match="max_rate"):
        throttled.max_rate = -1


def test_time_budget_slows_expensive_updates(make):
    model = SomeModel()
    ex = make(model, max_rate=1e6)  # the rate alone would allow every forward
    ex._live.throttle.budget = 1e-9  # but no time may be spent: only the first update goes through
    ex.select(["layer1"])
    for _ in range(10):
        model(torch.randn(2, 5))
    assert len(items(ex)) == 1


def test_payload_within_budget_per_layer(make):
    model = bert()
    ex = make(model, max_rate=0)
    ex.select(get_layers(model)[:20])
    model(input_ids=torch.randint(0, 100, (2, 7)), output_attentions=True)
    assert ex.sent
    for content, buffers in ex.sent:
        if content["type"] != "stats":  # attention heatmaps have their own bound (256x256 uint8)
            continue
        per_layer: dict[str, int] = {}
        for it in content["items"]:
            size = len(json.dumps(it)) + len(buffers[it["hist"]["buffer"]])
            per_layer[it["layer"]] = per_layer.get(it["layer"], 0) + size
        assert max(per_layer.values()) <= BUDGET


def test_hook_error_is_reported_and_forward_unharmed(make, monkeypatch, caplog):
    model = SomeModel()
    ex = make(model, max_rate=0)
    ex.select(["layer2"])

    def boom(tensor, bins=64):
        raise RuntimeError("reduction exploded")

    monkeypatch.setattr("surgeon_widgets.widget.live.hooks.tensor_stats", boom)
    x = torch.randn(3, 5)
    with caplog.at_level("WARNING"):
        y = model(x)
    torch.testing.assert_close(y, model.layer3(model.layer2(model.layer1(x))))
    # two failures merged: the forward, then layer2 again in the reference computation
    assert [(e["layer"], e["count"]) for e in ex.errors] == [("layer2", 2)]
    assert (
        "layer2: the activation statistics failed (RuntimeError: reduction exploded)"
        in (ex.errors[0]["text"])
    )
    assert "reduction exploded" in caplog.text


def test_hello_snapshot_has_history(make, from_view):
    model = SomeModel()
    ex = make(model, max_rate=0)
    ex.select(["layer3"])
    for _ in range(3):
        model(torch.randn(2, 5))
    from_view(ex, {"type": "hello"})
    content, buffers = ex.sent[-1]
    assert content["type"] == "snapshot"
    assert [it["step"] for it in content["history"]["layer3/output"]] == [0, 1, 2]
    assert content["items"][0]["key"] == "layer3/output"
    assert all(len(b) == 256 for b in buffers)


def test_figure_and_static_fallback(make):
    model = SomeModel()
    ex = make(model, max_rate=0)
    with pytest.raises(ValueError, match="no data for 'layer1' yet"):  # not an empty figure
        ex.figure("layer1")
    ex.select(["layer1"])
    for _ in range(4):
        model(torch.randn(4, 5))
    fig = ex.figure("layer1")
    assert isinstance(fig, Figure) and fig.axes[0].get_xlabel() == "step"
    assert fig._repr_png_().startswith(b"\x89PNG")  # shows when it ends a cell, no pyplot
    bundle = ex._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "image/png" in data and "application/vnd.jupyter.widget-view+json" in data


def test_example_inputs_fill_shapes(make):
    ex = make(torchvision.models.resnet18(), torch.randn(1, 3, 64, 64))
    shape = {"shape": [1, 512, 2, 2], "dtype": "float32"}
    assert ex.shapes["layer4"] == {**shape, "example": shape}
    assert live_hooks() == []
    gc.collect()


def test_payload_bound_is_an_upper_bound():
    from surgeon_widgets.engine.stats import tensor_stats
    from surgeon_widgets.widget.history import Record
    from surgeon_widgets.widget.wire import _bound, payload_size

    values = [torch.randn(3) * 1e-30, torch.randn(2, 3, 4, 5, 6) * 3e38, torch.tensor([-1e-45])]
    for t in values:
        name = "encoder.layer.11.attention.self.dropout" * 2
        record = Record(f"{name}/output[1][0]", name, "output[1][0]", "gradient", 10**12,
                        tensor_stats(t))  # fmt: skip
        assert payload_size(record) <= _bound(record)


def test_unknown_constructor_argument_gets_a_hint():
    with pytest.raises(TypeError, match="did you mean 'max_rate'"):
        Explorer(SomeModel(), max_rates=3)
    with pytest.raises(TypeError, match=r"nn\.Module"):
        Explorer("not a model")


def test_close_removes_hooks_and_leaves_a_closed_view_then_closes_the_comm(make):
    model = SomeModel()
    ex = make(model, max_rate=0)
    ex.select(["layer2"])
    model(torch.randn(2, 5))
    assert ex.stats("layer2") and live_hooks()
    ex._repr_mimebundle_()  # shown (one never shown closes at once: see test_lifetime)
    ex.close()
    assert ex.closed and ex.comm is not None  # the view shows "Explorer closed"
    assert live_hooks() == [] and ex.selected == [] and ex.stats("layer2") == {}
    model(torch.randn(2, 5))
    assert ex.stats("layer2") == {}
    with pytest.raises(RuntimeError, match=r"read-only: Closed: .* Explorer\(model\)"):
        ex.select("layer2")
    ex.close()
    assert ex.comm is None


def test_figure_before_any_data_names_what_to_do(make):
    ex = make(SomeModel(), max_rate=0)
    with pytest.raises(
        ValueError, match=r"no data for 'layer2' yet: select it \(ex.select\('layer2'\)\)"
    ):
        ex.figure("layer2")
    ex.select("layer2")
    with pytest.raises(ValueError, match=r"no data for 'layer2' yet: run a forward"):
        ex.figure("layer2")


def test_gradient_hooks_in_live_hooks_are_the_outputs_waiting_for_a_backward(make):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    ex = make(model, selected=["0", "2"], gradients=True, max_rate=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    waiting = lambda: [n for owner, _, n in live_hooks() if owner == "Explorer gradients"]  # noqa: E731
    for _ in range(40):  # a training loop: each backward takes its forward's gradient hooks
        opt.zero_grad()
        loss = model(torch.randn(3, 4)).sum()
        loss.backward()
        opt.step()
    assert waiting() == []
    assert len(ex.stats("0")["0/grad_output"].steps) == 40
    assert sorted((h["name"], h["kind"]) for h in ex.hooks) == [
        ("0", "forward"), ("0", "gradient"), ("2", "forward"), ("2", "gradient"),
    ]  # fmt: skip
    out = model(torch.randn(3, 4))  # no backward yet: one hook per selected output waits
    assert sorted(waiting()) == ["0", "2"]
    kept = [model(torch.randn(3, 4)) for _ in range(40)]  # an eval loop keeping its outputs
    assert len(waiting()) <= 2 * 16  # bounded per layer (MAX_PENDING_GRAD_HOOKS)
    del out, kept
    gc.collect()
    assert waiting() == []  # freed outputs take their hooks with them


def test_a_meta_forward_says_why_no_statistics_will_come(make):
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    ex = make(model, selected=["0", "1"], max_rate=0)
    assert ex.no_values == {}
    model(torch.ones(2, 4, device="meta"))
    assert set(ex.no_values) == {"0", "1"}
    assert "0 ran on the meta device" in ex.no_values["0"] and "to_empty" in ex.no_values["0"]
    assert ex.stats("0") == {} and ex.nonfinite == []


def view_update(ex: Explorer, **state) -> None:
    """The view changes traits, as a kernel delivers a comm "update" message."""
    ex.open()
    data = {"method": "update", "state": state, "buffer_paths": []}
    ex.comm.handle_msg({"content": {"data": data}, "buffers": []})


def test_a_replaced_explorer_is_read_only_from_its_view_and_from_python(make, from_view):
    from surgeon_widgets.widget.runtime.ownership import CLOSED, REPLACED

    model = SomeModel()
    old = make(model, selected=["layer1"])
    code = old.code
    new = make(model)
    assert (old.read_only, new.read_only) == (REPLACED, "")
    view_update(old, selected=["layer2"])  # clicks in the old view
    view_update(old, node_out={"layer2": "layer2"}, gradients=False)
    assert old.selected == ["layer1"] and old.node_out == {} and old.gradients
    assert old.code == code and old.hooks == []
    assert f"selected cannot change: {REPLACED}" in old.errors[0]["text"]
    with pytest.raises(RuntimeError, match="read-only: Replaced by a newer Explorer"):
        old.select("layer2")
    with pytest.raises(Exception, match="param_layers cannot change"):
        old.param_layers = ["layer1"]
    from_view(old, {"type": "remove_all_hooks"})  # its buttons do nothing either
    assert old.selected == ["layer1"]
    new.select("layer2")  # the newest one is live
    model(torch.randn(2, 5))
    assert new.stats("layer2") and old.stats("layer1") == {}
    old.close()
    assert old.read_only == REPLACED and new.read_only == ""
    new.close()
    assert new.read_only == CLOSED
    with pytest.raises(RuntimeError, match="read-only: Closed"):
        new.select("layer1")


def test_the_tree_shows_the_latest_output_shape_and_keeps_the_examples(make):
    ex = make(SomeModel(), torch.randn(1, 5), selected=["layer2"], max_rate=0)
    example = {"shape": [1, 2], "dtype": "float32"}
    assert ex.shapes["layer2"] == {**example, "example": example}
    ex._model(torch.randn(16, 5))  # training runs another batch size
    assert ex.shapes["layer2"] == {"shape": [16, 2], "dtype": "float32", "example": example}
    assert ex.shapes["layer1"] == {**{"shape": [1, 3], "dtype": "float32"},
                                   "example": {"shape": [1, 3], "dtype": "float32"}}  # fmt: skip
