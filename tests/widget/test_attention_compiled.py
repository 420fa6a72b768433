"""Issue 9 §5: attention maps of selected layers under torch.compile (whole model or blocks)."""

from __future__ import annotations

import copy
import inspect
import pickle

import pytest
import torch
from support.models import TinyAttention, tiny_bert, tiny_gpt2
from torch import nn

from surgeon_widgets.engine.attention.capture import attention_layers, capture_attention
from surgeon_widgets.engine.registry import live_hooks
from surgeon_widgets.widget.explorer import Explorer
from surgeon_widgets.widget.live.attention import AttentionView
from surgeon_widgets.widget.live.selection import COMPILED, EAGER_STEPS, FULLGRAPH
from surgeon_widgets.widget.runtime.compiled import EagerForward, compiled_parts

transformers = pytest.importorskip("transformers")


def _bert():
    model = tiny_bert(vocab_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0).train()  # fmt: skip
    return model, {"input_ids": torch.randint(0, 64, (2, 8))}


def _gpt2():
    model = tiny_gpt2(n_positions=16, vocab_size=64, resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, use_cache=False).train()  # fmt: skip
    return model, {"input_ids": torch.randint(0, 64, (2, 8))}


def _encoder():
    layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return model, {"src": torch.randn(2, 8, 32)}


MODELS = {"bert": _bert, "gpt2": _gpt2, "encoder": _encoder}


def _compile(model: nn.Module, how: str) -> nn.Module:
    """What the user hands to the Explorer and calls: the wrapper, or the model with its blocks
    (the entries of its layer list, whatever their class) compiled in place."""
    if how == "whole":
        return torch.compile(model)
    (blocks,) = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    for block in blocks:
        block.compile()
    return model


def _output(out):
    return out if isinstance(out, torch.Tensor) else out.last_hidden_state


@pytest.fixture
def fresh_dynamo():
    """Drop dynamo's compiled code after the test, once ``make`` has closed its Explorers."""
    yield
    torch._dynamo.reset()


@pytest.fixture
def explorer(fresh_dynamo, make):
    return make


def _maps(ex: Explorer, layer: str) -> list[dict]:
    """The "mean" item of each attention message sent for ``layer``."""
    return [
        i for c, _ in ex.sent if c["type"] == "attention" for i in c["items"]
        if i["layer"] == layer and i["head"] == "mean"
    ]  # fmt: skip


@pytest.mark.parametrize("how", ["whole", "blocks"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_compiled_attention_layer_records_the_eager_pattern(explorer, kind, how):
    torch._dynamo.reset()
    model, inputs = MODELS[kind]()
    eager = copy.deepcopy(model).eval()
    layer = attention_layers(model)[0]
    module = model.get_submodule(layer)
    handed = _compile(model, how)
    ex = explorer(handed, selected=[layer], max_rate=0)
    assert (EAGER_STEPS if how == "whole" else COMPILED) in ex.notes
    assert {"name": layer, "kind": "attention"} in ex.hooks

    model.train()
    _output(handed(**inputs)).sum().backward()  # a training step through the compiled model
    model.eval()
    with torch.no_grad():
        out = _output(handed(**inputs))
        expected_out = _output(eager(**inputs))
        reference = capture_attention(eager, inputs, layer)[layer]
    torch.testing.assert_close(out, expected_out, rtol=1e-4, atol=1e-5)
    got = ex._live.attention.latest(layer)
    torch.testing.assert_close(got, reference, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.sum(-1), torch.ones(got.shape[:-1]), rtol=0, atol=1e-5)
    maps = _maps(ex, layer)
    assert [(m["step"], m["training"]) for m in maps] == [(0, True), (1, False)]  # one per forward
    assert ex.stats(layer)[next(iter(ex.stats(layer)))].steps == [0, 1]  # histograms still flow
    assert ex.errors == []

    ex.select([])
    assert type(module).forward is not None and "forward" not in module.__dict__
    assert live_hooks() == []
    with torch.no_grad():
        handed(**inputs)
    assert len(_maps(ex, layer)) == 2  # deselected: nothing more is recorded


def test_attention_selected_after_the_first_compiled_forward(explorer):
    """Selected after the compile: the recorded forward runs eagerly and sees the attention."""
    torch._dynamo.reset()
    model, inputs = _bert()
    model.eval()
    compiled = torch.compile(model)
    ex = explorer(compiled, max_rate=0)
    with torch.no_grad():
        compiled(**inputs)
        layers = attention_layers(model)
        ex.select(layers)
        compiled(**inputs)
    assert {m["layer"] for c, _ in ex.sent if c["type"] == "attention" for m in c["items"]} == set(
        layers
    )
    assert all(ex._live.attention.latest(n).shape == (2, 2, 8, 8) for n in layers)


def _breaks(model: nn.Module, inputs: dict) -> tuple[int, int]:
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(**inputs)
    return explained.graph_count, explained.graph_break_count


def test_deselecting_gives_the_graph_back_without_the_break(explorer):
    """Where dynamo traces the selected module (here: a compile of the eager model the
    Explorer watches), the attention wrapper is one graph break, gone once deselected."""
    model, inputs = _bert()
    model.eval()
    plain = _breaks(model, inputs)
    ex = explorer(model, max_rate=0)
    layer = attention_layers(model)[0]
    ex.select([layer])
    ex._live.activations.sync([], False)  # only the attention wrapper: its own cost in graph breaks
    selected = _breaks(model, inputs)
    ex.select([])
    after = _breaks(model, inputs)
    assert plain == (1, 0) and after == plain
    assert selected[1] >= 1 and selected[0] == selected[1] + 1


def test_export_and_fx_with_the_wrapper_installed_match_a_fresh_model(explorer):
    model = TinyAttention(causal=True).eval()
    fresh = copy.deepcopy(model)
    x = torch.randn(1, 5, 4)
    ex = explorer(model, selected=["attn"], max_rate=0)
    assert isinstance(model.attn.forward, EagerForward)
    assert inspect.signature(model.attn.forward) == inspect.signature(fresh.attn.forward)
    for strict in (True, False):
        got = torch.export.export(model, (x,), strict=strict).graph
        want = torch.export.export(fresh, (x,), strict=strict).graph
        assert [(n.op, str(n.target)) for n in got.nodes] == [
            (n.op, str(n.target)) for n in want.nodes
        ]
    fx = torch.fx.symbolic_trace(model).graph
    assert [n.op for n in fx.nodes] == [n.op for n in torch.fx.symbolic_trace(fresh).graph.nodes]
    assert ex._live.attention.latest("attn") is None and ex.errors == []  # traces never record


def test_copies_and_pickles_get_the_plain_forward():
    model = TinyAttention().eval()
    view = AttentionView(model, lambda content, buffers: None)  # the Explorer's live hooks
    view.sync(["attn"])  # are closures, which pickle refuses; the wrapper is not the problem
    x = torch.randn(1, 3, 4)
    try:
        for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            assert not isinstance(other.attn.forward, EagerForward)
            with torch.no_grad():
                other.attn.out.weight.mul_(2)  # the copy computes with its own weights
                h = other.embed(x)
                want = type(other.attn).forward(other.attn, h)
                torch.testing.assert_close(other.attn(h), want, rtol=0, atol=0)
                assert not torch.equal(want, type(model.attn).forward(model.attn, h))
                other(x)
        assert view.latest("attn") is None  # copies never record
        with torch.no_grad():
            model(x)
        assert view.latest("attn") is not None
    finally:
        view.close()


def test_a_compiled_forward_that_raises_leaves_no_mode_behind(explorer):
    torch._dynamo.reset()
    model = TinyAttention().eval()
    compiled = torch.compile(model)
    ex = explorer(compiled, selected=["attn"], max_rate=0)
    with pytest.raises(RuntimeError):
        compiled(torch.randn(1, 3, 5))  # wrong feature size
    assert torch._C._len_torch_function_stack() == 0
    ex.close()
    assert "forward" not in model.attn.__dict__ and live_hooks() == []


def test_blocks_compiled_after_the_explorer_get_the_note(explorer):
    model, _ = _encoder()
    ex = explorer(model)
    assert COMPILED not in ex.notes and compiled_parts(model) == []
    model.layers[1].compile()
    assert compiled_parts(model) == ["layers.1"]
    ex.select(["layers.1.self_attn"])
    assert COMPILED in ex.notes


def test_blocks_compiled_and_run_before_the_explorer_still_report(explorer):
    """dynamo's code from before the Explorer has no guards on hooks: the clock drops it."""
    torch._dynamo.reset()
    model, inputs = _bert()
    model.eval()
    _compile(model, "blocks")
    with torch.no_grad():
        model(**inputs)  # compiled with dynamo's default: hooks not guarded
    layer = attention_layers(model)[0]  # in the first block; a plain layer of the last one:
    (blocks,) = [n for n, m in model.named_modules() if isinstance(m, nn.ModuleList)]
    last = model.get_submodule(blocks)[-1]
    dense = [n for n, m in model.named_modules() if m in set(last.modules())][-1]
    ex = explorer(model, selected=[dense], max_rate=0)
    with torch.no_grad():
        model(**inputs)
        ex.select([dense, layer])
        model(**inputs)
    assert ex.stats(dense)[f"{dense}/output"].steps == [0, 1]
    assert [m["step"] for m in _maps(ex, layer)] == [1]


@pytest.mark.parametrize("how", ["whole", "in_place"])
def test_a_bare_encoder_layer_leaves_its_fused_path_under_compile(explorer, how):
    """Eval + no_grad: nn.TransformerEncoderLayer would run one fused kernel, never self_attn."""
    torch._dynamo.reset()
    layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True).eval()
    eager = copy.deepcopy(layer)
    handed = torch.compile(layer) if how == "whole" else layer
    if how == "in_place":
        layer.compile()
    ex = explorer(handed, selected=["self_attn"], max_rate=0)
    assert EAGER_STEPS in ex.notes  # the root compiled either way: recorded forwards run eagerly
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        out = handed(x)
        reference = capture_attention(eager, x, "self_attn")["self_attn"]
        torch.testing.assert_close(out, eager(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ex._live.attention.latest("self_attn"), reference)
    assert [m["training"] for m in _maps(ex, "self_attn")] == [False]
    ex.close()
    assert "forward" not in layer.self_attn.__dict__ and not layer._forward_pre_hooks


def test_fullgraph_wrapper_records_through_eager_steps(explorer):
    """fullgraph=True allows no graph break; the recorded forwards run eagerly, so no hook ever
    meets the graph and the user's forward keeps running (with hooks in it, it raised)."""
    torch._dynamo.reset()
    model = TinyAttention().eval()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    ex = explorer(compiled, max_rate=0)
    ex.select(["attn", "head"])
    assert {"name": "head", "kind": "forward"} in ex.hooks and ex.errors == []
    assert FULLGRAPH not in [e["text"] for e in ex.errors]
    x = torch.randn(1, 3, 4)
    with torch.no_grad():
        out = compiled(x)
        reference = capture_attention(eager, x, "attn")["attn"]
    torch.testing.assert_close(out, eager(x))
    torch.testing.assert_close(ex._live.attention.latest("attn"), reference)
    torch.testing.assert_close(ex.stats("head")["head/output"].latest.mean, out.mean().item())


def test_fullgraph_block_refuses_only_the_layers_inside_it(explorer):
    """``block.compile(fullgraph=True)``: a hook on the block or inside it would make the
    forward raise ("Skip calling torch.compiler.disable()d function"); the others record."""
    torch._dynamo.reset()
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), nn.Linear(8, 2))
    model[0].compile(fullgraph=True, backend="eager")
    ex = explorer(model, max_rate=0)
    ex.select(["0", "0.0", "1"])
    # gradients are on by default: its gradient hook goes on at the forward (with a backward)
    assert ex.hooks == [{"name": "1", "kind": "forward"}, {"name": "1", "kind": "gradient"}]
    [error] = [e["text"] for e in ex.errors]
    assert error.startswith("0, 0.0: not attached, '0' was compiled with fullgraph=True")
    for _ in range(2):
        model(torch.randn(3, 4)).sum().backward()  # raised with the hook on 0.0
    stats = ex.stats("1")
    assert stats["1/output"].steps == [0, 1] and stats["1/grad_output"].steps == [0, 1]
    assert ex.stats("0.0") == {}
