"""Cuts through real architectures built from tiny configs (issue 10).

For each model: an Extract called with the model's own example inputs equals Inspect, and a
cut between two blocks takes the hidden states (and the attention mask where one was given)
and nothing else. Blocks are found by class (the first ``ModuleList`` of two or more modules of
one class), never by path. One trace per model is shared by all tests (module-scoped).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from support.models import tiny_bert, tiny_gpt2, tiny_vit
from torch import nn

from surgeon_widgets import Extract, Inspect
from surgeon_widgets.engine.cut.analyze import analyze_cut, suggest_fix
from surgeon_widgets.engine.cut.extract import InputLeakWarning
from surgeon_widgets.engine.tracing import trace

transformers = pytest.importorskip("transformers")

IDS = torch.randint(0, 99, (2, 8), generator=torch.Generator().manual_seed(0))
MASK = torch.ones(2, 8, dtype=torch.long)
PIXELS = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
TEXT = dict(vocab_size=100)


def _bert():
    return tiny_bert(), {"input_ids": IDS, "attention_mask": MASK}


def _gpt2():
    return tiny_gpt2(), {"input_ids": IDS, "use_cache": False}


def _llama():
    c = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                 num_key_value_heads=1, intermediate_size=64, **TEXT)  # fmt: skip
    return transformers.LlamaModel(c), {"input_ids": IDS, "use_cache": False}


def _t5():
    c = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_kv=16,
                              num_heads=2, d_ff=64, **TEXT)  # fmt: skip
    inputs = {"input_ids": IDS, "decoder_input_ids": IDS[:, :4], "use_cache": False}
    return transformers.T5Model(c), inputs


def _bart():
    c = transformers.BartConfig(encoder_layers=2, decoder_layers=2, d_model=32,
                                encoder_attention_heads=2, decoder_attention_heads=2,
                                encoder_ffn_dim=64, decoder_ffn_dim=64, **TEXT)  # fmt: skip
    inputs = {"input_ids": IDS, "decoder_input_ids": IDS[:, :4], "use_cache": False}
    return transformers.BartModel(c), inputs


def _deberta():
    c = transformers.DebertaV2Config(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                     intermediate_size=64, **TEXT)  # fmt: skip
    return transformers.DebertaV2Model(c), {"input_ids": IDS}


def _vit():
    return tiny_vit(), {"pixel_values": PIXELS}


def _swin():
    c = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2, 1],
                                num_heads=[2, 2], window_size=4)  # fmt: skip
    return transformers.SwinModel(c), {"pixel_values": PIXELS}


def _resnet():
    torchvision = pytest.importorskip("torchvision")
    return torchvision.models.resnet18(num_classes=10), {"x": torch.rand(2, 3, 64, 64)}


BUILDERS = {"bert": _bert, "gpt2": _gpt2, "llama": _llama, "t5": _t5, "bart": _bart,
            "deberta_v2": _deberta, "vit": _vit, "swin": _swin, "resnet18": _resnet}  # fmt: skip
MASKED = {"bert"}  # given an attention mask, so a cut between blocks may read it


def blocks(model: nn.Module) -> list[str]:
    """Names of the first innermost run of same-class blocks (a ModuleList or Sequential of >= 2
    with parameters): Swin's blocks inside a stage, not the stages."""
    runs = []
    for name, module in model.named_modules():
        children = list(module.children())
        if (
            isinstance(module, (nn.ModuleList, nn.Sequential))
            and len(children) >= 2
            and len({type(c) for c in children}) == 1
            and sum(p.numel() for p in children[0].parameters()) > 0
        ):
            runs.append(name)
    inner = [r for r in runs if not any(o.startswith(f"{r}.") for o in runs)]
    assert inner, f"no blocks found in {type(model).__name__}"
    count = len(list(model.get_submodule(inner[0]).children()))
    return [f"{inner[0]}.{i}" for i in range(count)]


def first_tensor(value):
    while isinstance(value, (tuple, list)) or hasattr(value, "to_tuple"):  # or a ModelOutput
        value = value[0]
    return value


@pytest.fixture(scope="module", params=list(BUILDERS))
def case(request):
    torch.manual_seed(0)
    model, inputs = BUILDERS[request.param]()
    model.eval()
    traced = trace(model, example_inputs=inputs)  # cached: the tests below reuse it
    return request.param, model, inputs, traced


def test_extract_called_like_the_model_equals_inspect(case):
    name, model, inputs, _ = case
    layer = blocks(model)[-1]
    cut = Extract(model, node_out=layer, example_inputs=inputs)
    with torch.no_grad():
        _, expected = Inspect(model, layer)(**inputs)
        got_kwargs = cut(**inputs)
        got_positional = cut(*inputs.values()) if name in ("resnet18", "vit", "swin") else None
    torch.testing.assert_close(first_tensor(got_kwargs), first_tensor(expected))
    if got_positional is not None:
        torch.testing.assert_close(first_tensor(got_positional), first_tensor(expected))


def test_cut_between_blocks_needs_only_hidden_states(case):
    name, model, inputs, traced = case
    first, second = blocks(model)[:2]
    report = analyze_cut(traced, {first: "h"}, second)
    allowed = {"h", "attention_mask"} if name in MASKED else {"h"}
    if name in ("t5", "bart"):  # the encoder's blocks; position bias / mask come from shapes
        allowed |= {"attention_mask"}
    assert report.valid, report.problems
    assert set(report.inputs) <= allowed, (report.inputs, report.leaks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputLeakWarning)
        cut = Extract(model, {first: "h"}, second, example_inputs=inputs)
    assert cut.summary["input"] == report.inputs
    with torch.no_grad():
        _, (h, expected) = Inspect(model, [first, second])(**inputs)
        got = cut(h=first_tensor(h), **{k: v for k, v in inputs.items() if k != "x"})
    torch.testing.assert_close(first_tensor(got), first_tensor(expected))


def test_suggested_fix_is_valid_and_minimal(case):
    _, model, inputs, traced = case
    names = blocks(model)
    node_in, node_out = {names[0]: "h"}, names[-1]
    fix = suggest_fix(traced, node_in, node_out)
    report = analyze_cut(traced, node_in, node_out)
    if not report.leaks:
        assert fix == [] and report.fix is None
        return
    assert fix is not None and list(report.fix) == fix
    fixed_in = {**node_in, **{n: f"in{i}" for i, n in enumerate(fix)}}
    assert analyze_cut(traced, fixed_in, node_out).leaks == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Extract(model, fixed_in, node_out, example_inputs=inputs)
    for drop in fix:  # minimal: no name can be left out
        fewer = {k: v for k, v in fixed_in.items() if k != drop}
        assert analyze_cut(traced, fewer, node_out).leaks


def test_tree_and_node_list_hide_export_internals(case):
    from surgeon_widgets import get_nodes
    from surgeon_widgets.widget.views.tree import merge_rows, module_rows, node_rows

    _, model, inputs, traced = case
    names = get_nodes(model, example_inputs=inputs)
    assert not [n for n in names if "sym_size" in n or "_assert" in n]
    if traced.method == "export":
        assert any("sym_size" in n for n in get_nodes(model, example_inputs=inputs, internals=True))
    modules = module_rows(model)
    rows = merge_rows(modules, node_rows(model, inputs, frozenset(r["name"] for r in modules)))
    first_inputs = [r["name"] for r in rows[: len(inputs)] if r["cls"] == "input"]
    assert first_inputs and set(first_inputs) <= set(inputs), [r["name"] for r in rows[:4]]
    assert not [r for r in rows if "sym_size" in r["name"]]


# -- decoder-side cuts of encoder-decoders: hidden states in, cross-attention fed ------------

PADDED = torch.ones(2, 8, dtype=torch.long)
PADDED[1, 6:] = 0  # right padding: no query row is fully masked, and the mask matters


def _name_of(model: nn.Module, module: nn.Module) -> str:
    return next(name for name, m in model.named_modules() if m is module)


def _decoder_blocks(model: nn.Module) -> list[str]:
    decoder = _name_of(model, model.get_decoder())
    lists = [n for n, m in model.named_modules() if n.startswith(f"{decoder}.")
             and isinstance(m, nn.ModuleList)]  # fmt: skip
    return [f"{lists[0]}.{i}" for i in range(len(model.get_submodule(lists[0])))]


@pytest.fixture(scope="module", params=["t5", "bart"])
def seq2seq(request):
    torch.manual_seed(0)
    model, inputs = BUILDERS[request.param]()
    model.eval()
    inputs = {**inputs, "attention_mask": PADDED}
    return model, inputs, trace(model, example_inputs=inputs)


@pytest.mark.parametrize("out", ["block", "decoder"])
def test_decoder_cut_takes_hidden_states_and_the_encoders_output(seq2seq, out):
    model, inputs, traced = seq2seq
    first, second = _decoder_blocks(model)[:2]
    encoder, decoder = _name_of(model, model.get_encoder()), _name_of(model, model.get_decoder())
    node_in = {first: "h", encoder: "enc"}
    node_out = second if out == "block" else decoder
    report = analyze_cut(traced, node_in, node_out)
    assert report.valid and report.leaks == {} and report.fix is None, report
    assert report.inputs == ("attention_mask", "h", "enc")  # the mask for cross-attention
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no leak warning: the mask is simply an input
        cut = Extract(model, node_in, node_out, example_inputs=inputs)
    assert cut.summary["input"] == report.inputs
    with torch.no_grad():
        _, (h, enc, expected) = Inspect(model, [first, encoder, node_out])(**inputs)
        h, enc = first_tensor(h), first_tensor(enc)
        called_like_the_model = cut(**inputs, h=h, enc=enc)
        by_its_inputs = cut(PADDED, h, enc)
        unmasked = cut(torch.ones_like(PADDED), h, enc)
    if out == "decoder":
        assert_close_tensor(expected, model(**inputs).last_hidden_state)
    assert_close_tensor(called_like_the_model, first_tensor(expected))
    assert_close_tensor(by_its_inputs, first_tensor(expected))
    assert not torch.allclose(unmasked, first_tensor(expected), atol=1e-4)  # it reads the mask


def test_decoder_cut_fix_is_the_encoders_output(seq2seq):
    """Without the encoder's output the cut re-runs the encoder from input_ids and the mask: a
    leak of both, and the fix is that output (not an embedding: the encoder's batch-size reads
    come from h, but are no computation from it)."""
    model, _, traced = seq2seq
    first, second = _decoder_blocks(model)[:2]
    report = analyze_cut(traced, {first: "h"}, second)
    assert set(report.leaks) == {"input_ids", "attention_mask"}, report.leaks
    encoder_output = traced.module_outputs[_name_of(model, model.get_encoder())]
    assert report.fix == (encoder_output.meta["surgeon_name"],)
    fixed = analyze_cut(traced, {first: "h", **{n: "enc" for n in report.fix}}, second)
    assert fixed.leaks == {} and fixed.inputs == ("attention_mask", "h", "enc")


def test_decoder_block_extract_called_like_the_model(seq2seq):
    model, inputs, _ = seq2seq
    second = _decoder_blocks(model)[1]
    cut = Extract(model, node_out=second, example_inputs=inputs)
    with torch.no_grad():
        _, expected = Inspect(model, second)(**inputs)
        assert_close_tensor(cut(**inputs), first_tensor(expected))


def assert_close_tensor(got, expected):
    torch.testing.assert_close(first_tensor(got), first_tensor(expected))


# -- decoders given an attention mask: the mask is an input of a cut, not a leak ------------


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_decoder_with_mask_cut_between_blocks(name):
    torch.manual_seed(0)
    model, inputs = BUILDERS[name]()
    model.eval()
    inputs = {**inputs, "attention_mask": PADDED}
    first, second = blocks(model)[:2]
    report = analyze_cut(model, {first: "h"}, second, example_inputs=inputs)
    assert report.valid and report.leaks == {} and report.fix is None, report
    assert report.inputs == ("attention_mask", "h")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cut = Extract(model, {first: "h"}, second, example_inputs=inputs)
    with torch.no_grad():
        _, (h, expected) = Inspect(model, [first, second])(**inputs)
        got = cut(**inputs, h=first_tensor(h))
        unmasked = cut(h=first_tensor(h), attention_mask=torch.ones_like(PADDED))
    torch.testing.assert_close(first_tensor(got), first_tensor(expected))
    assert not torch.allclose(first_tensor(unmasked), first_tensor(expected), atol=1e-4)


# -- torchvision MaxViT, the whole model ------------------------------------------------------


@pytest.fixture(scope="module")
def maxvit():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.MaxVit(
        input_size=(64, 64), stem_channels=8, partition_size=2, block_channels=[8, 16],
        block_layers=[1, 1], head_dim=4, stochastic_depth_prob=0.0, num_classes=10,
    ).eval()  # fmt: skip
    return model, torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))


def _reference_patterns(model: nn.Module, x: torch.Tensor, name: str) -> torch.Tensor:
    """softmax(q kᵀ · scale + relative bias) of a RelativePositionalMultiHeadAttention, from
    its ``to_qkv`` output, folded as documented: ``[B, windows * heads, P, P]``."""
    layer = model.get_submodule(name)
    seen = []
    handle = layer.to_qkv.register_forward_hook(lambda m, a, o: seen.append(o))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    qkv = seen[0]
    B, G, P, _ = qkv.shape
    H, DH = layer.n_heads, layer.head_dim
    q, k, _ = (t.reshape(B, G, P, H, DH).permute(0, 1, 3, 2, 4) for t in qkv.chunk(3, dim=-1))
    scores = q @ (k * layer.scale_factor).transpose(-1, -2) + layer.get_relative_positional_bias()
    return scores.softmax(-1).reshape(B, G * H, P, P)


def test_maxvit_attention_layers_are_exactly_what_capture_captures(maxvit):
    from surgeon_widgets import attention_layers, capture_attention, get_layers

    model, x = maxvit
    listed = attention_layers(model)
    classes = {type(model.get_submodule(n)).__name__ for n in listed}
    assert len(listed) == 4 and classes == {"RelativePositionalMultiHeadAttention"}
    with torch.no_grad():
        patterns = capture_attention(model, x, listed)
    # 64 px: stem /2, block 0 /2 -> 16x16 in 2x2 windows (64 windows) x 2 heads; block 1: 16 x 4
    assert [tuple(p.shape) for p in patterns.values()] == [(2, 128, 4, 4)] * 2 + [(2, 64, 4, 4)] * 2
    for name, pattern in patterns.items():
        torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]))
        torch.testing.assert_close(pattern, _reference_patterns(model, x, name))
    # nothing else captures, unless it holds listed layers (a ModuleList is never called)
    names = [n for n in get_layers(model) if not isinstance(model.get_submodule(n), nn.ModuleList)]
    with torch.no_grad():
        found = capture_attention(model, x, names, all_calls=True)  # one forward, every layer
    for name in names:
        holds = [n for n in listed if n == name or n.startswith(f"{name}.")]
        assert len(found[name]) == len(holds), (name, holds)


def test_maxvit_extract_at_a_block_boundary_equals_inspect(maxvit):
    model, x = maxvit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cut = Extract(model, {"blocks.0": "h"}, "blocks.1")
        head = Extract(model, {"blocks.1": "h"}, "classifier")
    assert cut.summary["input"] == ("h",) and head.summary["input"] == ("h",)
    with torch.no_grad():
        out, (h0, h1) = Inspect(model, ["blocks.0", "blocks.1"])(x)
        torch.testing.assert_close(cut(h0), h1)
        torch.testing.assert_close(cut(h=h0), h1)
        torch.testing.assert_close(head(h1), out)
        torch.testing.assert_close(Extract(model, node_out="blocks.0")(x), h0)
