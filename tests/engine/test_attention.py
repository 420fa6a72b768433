"""capture_attention: patterns equal an eager reference, outputs unchanged, hooks always removed."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from support.models import tiny_bert, tiny_gpt2, tiny_vit
from torch import nn

from surgeon_widgets.engine.attention.capture import (
    ReducedPattern,
    attention_layers,
    capture_attention,
    reduce_pattern,
)
from surgeon_widgets.engine.inspect import Inspect
from surgeon_widgets.engine.naming import UnknownNameError
from surgeon_widgets.engine.registry import live_hooks

transformers = pytest.importorskip("transformers")
torchvision = pytest.importorskip("torchvision")

TOL = 1e-5
# the BERT-style configs' shared size: 2 layers of width 64, 4 heads
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


@pytest.fixture(autouse=True)
def _nothing_left_behind():
    yield
    assert live_hooks() == []
    assert torch._C._len_torch_function_stack() == 0


def _no_hooks(model: nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.float() - b.float()).abs().max().item()


# --- models built in fixtures --------------------------------------------------------------


def _hf_pair(build, **config):
    """A default (SDPA) model and an eager twin with the same weights."""
    torch.manual_seed(0)
    sdpa = build(**config)
    eager = build(attn_implementation="eager", **config)
    eager.load_state_dict(sdpa.state_dict())
    assert sdpa.config._attn_implementation == "sdpa"
    assert eager.config._attn_implementation == "eager"
    return sdpa, eager


def _tiny_llama(**config):
    return transformers.LlamaModel(transformers.LlamaConfig(**config)).eval()


@pytest.fixture
def bert():
    return _hf_pair(tiny_bert, **TINY)


@pytest.fixture
def gpt2():
    return _hf_pair(tiny_gpt2, n_embd=64, n_head=4)


@pytest.fixture
def llama():
    return _hf_pair(_tiny_llama, **TINY, num_key_value_heads=2, vocab_size=100)


@pytest.fixture
def hf_vit():
    return _hf_pair(tiny_vit, **TINY)


@pytest.fixture
def tv_vit():
    torch.manual_seed(0)
    return torchvision.models.VisionTransformer(
        image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128
    ).eval()


class TinySDPA(nn.Module):
    """A hand-written attention block calling F.scaled_dot_product_attention."""

    def __init__(self, dim=32, heads=4, kv_heads=4, **sdpa_kwargs):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.sdpa_kwargs = sdpa_kwargs
        self.last_qk = None

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        self.last_qk = (q.detach(), k.detach())
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.sdpa_kwargs)
        return out.transpose(1, 2).reshape(b, n, -1)


def _math_reference(q, k, mask=None, **kwargs):
    """torch's own math kernel returns the weights: an independent oracle.

    The public function turns a bool mask into an additive one before calling this kernel
    (aten ``convert_boolean_attn_mask``), so the test does the same.
    """
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    return torch.ops.aten._scaled_dot_product_attention_math(q, k, k, mask, **kwargs)[1]


# --- Hugging Face models ----------------------------------------------------------------


def _check_hf(pair, inputs, layer_fmt, n_layers=2, out_key="last_hidden_state"):
    sdpa, eager = pair
    layers = [layer_fmt.format(i) for i in range(n_layers)]
    with torch.no_grad():
        plain = getattr(sdpa(**inputs), out_key)
        out, got = capture_attention(sdpa, inputs, layers, keep_output=True)
        ref = eager(**inputs, output_attentions=True).attentions
    assert _max_diff(getattr(out, out_key), plain) <= 1e-6
    for i, name in enumerate(layers):
        assert _max_diff(got[name], ref[i]) <= TOL, name
    assert _no_hooks(sdpa)
    return got


def test_bert_padding_mask(bert):
    ids = torch.randint(1, 100, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 6:] = 0
    got = _check_hf(
        bert, {"input_ids": ids, "attention_mask": mask}, "encoder.layer.{}.attention.self"
    )
    assert got["encoder.layer.0.attention.self"][1, :, :, 6:].abs().max() == 0


def test_bert_without_mask_and_block_name(bert):
    ids = torch.randint(1, 100, (1, 7))
    _check_hf(bert, {"input_ids": ids}, "encoder.layer.{}.attention.self")
    block = capture_attention(bert[0], (ids,), ["encoder.layer.1"])["encoder.layer.1"]
    inner = capture_attention(bert[0], ids, "encoder.layer.1.attention.self")
    assert torch.equal(block, inner["encoder.layer.1.attention.self"])


@pytest.mark.parametrize("padded", [False, True])
def test_gpt2_causal(gpt2, padded):
    ids = torch.randint(1, 100, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    if padded:
        mask[0, 9:] = 0  # right padding: no query row loses every key
    got = _check_hf(gpt2, {"input_ids": ids, "attention_mask": mask}, "h.{}.attn")
    assert got["h.0.attn"].triu(1).abs().max() == 0


@pytest.mark.parametrize("padded", [False, True])
def test_llama_gqa_causal(llama, padded):
    ids = torch.randint(1, 100, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    if padded:
        mask[1, 7:] = 0
    got = _check_hf(llama, {"input_ids": ids, "attention_mask": mask}, "layers.{}.self_attn")
    assert got["layers.1.self_attn"].shape == (2, 4, 9, 9)


def test_hf_vit(hf_vit):
    _check_hf(hf_vit, {"pixel_values": torch.randn(2, 3, 32, 32)}, "layers.{}.attention")


@pytest.mark.parametrize("which", ["bert", "gpt2", "llama"])
def test_models_already_in_eager_mode(which, request):
    _, eager = request.getfixturevalue(which)
    ids = torch.randint(1, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    name = attention_layers(eager)[1]
    with torch.no_grad():
        got = capture_attention(eager, {"input_ids": ids, "attention_mask": mask}, name)
        ref = eager(input_ids=ids, attention_mask=mask, output_attentions=True).attentions[1]
    assert _max_diff(got[name], ref) <= TOL


def test_handwritten_eager_softmax():
    class Eager(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(16, 48)

        def forward(self, x):
            q, k, v = self.qkv(x).view(*x.shape[:2], 3, 2, 8).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / 8**0.5
            probs = scores.softmax(-1)
            weights = torch.softmax(torch.ones(3), 0)  # not a pattern: 1-D
            return (probs @ v).sum() * weights.sum(), probs

    model = _Wrap(Eager()).eval()
    out, got = capture_attention(model, torch.randn(2, 5, 16), "mha", keep_output=True)
    assert torch.equal(got["mha"], out[1])
    got["mha"].zero_()  # captures are copies
    assert out[1].abs().sum() > 0


def test_hf_training_dropout_keeps_rng_and_grad(bert):
    model = bert[0].train()
    model.config.attention_probs_dropout_prob = 0.5
    ids = torch.randint(1, 100, (2, 6))
    torch.manual_seed(3)
    plain = model(input_ids=ids).last_hidden_state
    torch.manual_seed(3)
    out, got = capture_attention(
        model, {"input_ids": ids}, "encoder.layer.0.attention.self", keep_output=True
    )
    assert torch.equal(out.last_hidden_state, plain)
    pattern = got["encoder.layer.0.attention.self"]
    assert not pattern.requires_grad
    assert torch.allclose(pattern.sum(-1), torch.ones(2, 4, 6))
    out.last_hidden_state.sum().backward()
    assert model.embeddings.word_embeddings.weight.grad is not None


def test_inside_another_torch_function_mode(gpt2):
    ids = torch.randint(1, 100, (1, 5))
    expected = capture_attention(gpt2[0], ids, "h.1.attn")["h.1.attn"]
    with torch.device("cpu"):  # itself a TorchFunctionMode
        got = capture_attention(gpt2[0], ids, "h.1.attn")["h.1.attn"]
        assert torch._C._len_torch_function_stack() == 1
    assert torch.equal(got, expected)


def test_only_selected_layers_pass_through_python(gpt2):
    model = gpt2[0]
    depth = {}

    def spy(name):
        def hook(_module, _args):
            depth[name] = torch._C._len_torch_function_stack()

        return hook

    handles = [
        model.get_submodule(n).register_forward_pre_hook(spy(n), prepend=False)
        for n in ("h.0.attn.c_attn", "h.1.attn.c_attn")
    ]
    try:
        capture_attention(model, torch.randint(1, 100, (1, 5)), "h.0.attn")
    finally:
        for handle in handles:
            handle.remove()
    assert depth == {"h.0.attn.c_attn": 1, "h.1.attn.c_attn": 0}


def test_attention_layers_of_hf_models(bert, gpt2, llama):
    assert attention_layers(bert[0]) == [f"encoder.layer.{i}.attention.self" for i in range(2)]
    assert attention_layers(gpt2[0]) == ["h.0.attn", "h.1.attn"]
    assert attention_layers(llama[0]) == ["layers.0.self_attn", "layers.1.self_attn"]


# --- torch.nn ----------------------------------------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("grad", [True, False])
def test_multihead_attention_padding_fast_path(batch_first, grad):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=batch_first).eval()
    x = torch.randn(3, 6, 32) if batch_first else torch.randn(6, 3, 32)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[0, 4:] = True
    args = (x, x, x, pad, False)  # need_weights=False: the fast path returns no weights
    model = _Wrap(mha)
    with torch.set_grad_enabled(grad):
        plain = mha(*args)[0]
        (out, _), got = capture_attention(model, args, "mha", keep_output=True)
        ref = mha(x, x, x, key_padding_mask=pad, need_weights=True, average_attn_weights=False)[1]
    assert _max_diff(out, plain) <= 1e-6
    assert _max_diff(got["mha"], ref) <= TOL
    assert got["mha"][0, :, :, 4:].abs().max() == 0


class _Wrap(nn.Module):
    """Gives a bare module a name (capture_attention needs a named layer)."""

    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, *args):
        return self.mha(*args)


def test_nested_selections_each_see_one_call(tv_vit):
    block = "encoder.layers.encoder_layer_1"
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        got = capture_attention(tv_vit, x, [block, block + ".self_attention"])
        alone = capture_attention(tv_vit, x, block + ".self_attention")
    assert torch.equal(got[block], got[block + ".self_attention"])
    assert torch.equal(got[block], alone[block + ".self_attention"])


def test_multihead_attention_masks_and_unbatched():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, kdim=8, vdim=8, bias=False)
    model = _Wrap(mha).eval()
    q, kv = torch.randn(5, 16), torch.randn(7, 8)
    float_mask = torch.randn(5, 7)
    got = capture_attention(model, (q, kv, kv, None, False, float_mask), "mha")["mha"]
    ref = mha(q, kv, kv, attn_mask=float_mask, average_attn_weights=False)[1]
    assert got.shape == (1, 2, 5, 7)
    assert _max_diff(got[0], ref) <= TOL


def test_multihead_attention_training_dropout_keeps_rng():
    mha = _Wrap(nn.MultiheadAttention(16, 2, dropout=0.5, batch_first=True)).train()
    x = torch.randn(2, 5, 16)
    torch.manual_seed(1)
    plain = mha(x, x, x)[0]
    torch.manual_seed(1)
    (out, _), got = capture_attention(mha, (x, x, x), "mha", keep_output=True)
    assert torch.equal(out, plain)
    assert torch.allclose(got["mha"].sum(-1), torch.ones(2, 2, 5))  # pre-dropout pattern
    out.sum().backward()  # the model's graph is intact


@pytest.fixture
def encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2).eval()


@pytest.mark.parametrize("grad", [True, False])
def test_transformer_encoder_fast_path_with_padding(encoder, grad):
    x = torch.randn(2, 8, 32)
    pad = torch.zeros(2, 8, dtype=torch.bool)
    pad[1, 5:] = True
    names = ["layers.0.self_attn", "layers.1"]
    with torch.set_grad_enabled(grad):
        plain = encoder(x, src_key_padding_mask=pad)
        out, got = capture_attention(
            encoder, {"src": x, "src_key_padding_mask": pad}, names, keep_output=True
        )
    with torch.no_grad():
        refs = []
        h = x
        for layer in encoder.layers:
            refs.append(
                layer.self_attn(h, h, h, key_padding_mask=pad, average_attn_weights=False)[1]
            )
            with torch.enable_grad():  # the slow path, as a plain reference
                h = layer(h, src_key_padding_mask=pad).detach()
    keep = ~pad  # the nested-tensor fast path zeroes padded positions; the slow path does not
    assert _max_diff(out[keep], plain[keep]) <= 1e-5
    assert _max_diff(got["layers.0.self_attn"], refs[0]) <= TOL
    assert _max_diff(got["layers.1"], refs[1]) <= TOL
    assert _no_hooks(encoder)


def test_transformer_encoder_layer_alone_eval_no_grad():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        16, 2, dim_feedforward=32, batch_first=True, norm_first=True
    ).eval()
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        plain = layer(x)
        out, got = capture_attention(layer, x, ["self_attn"], keep_output=True)
        ref = layer.self_attn(*(layer.norm1(x),) * 3, average_attn_weights=False)[1]
    assert _max_diff(out, plain) <= 1e-6
    assert _max_diff(got["self_attn"], ref) <= TOL


def test_torchvision_vit(tv_vit):
    x = torch.randn(2, 3, 64, 64)
    block = "encoder.layers.encoder_layer_{}"
    names = [block.format(i) + ".self_attention" for i in range(2)]
    with torch.no_grad():
        plain = tv_vit(x)
        out, got = capture_attention(tv_vit, x, names, keep_output=True)
        _, normed = Inspect(tv_vit, [block.format(i) + ".ln_1" for i in range(2)])(x)
    assert _max_diff(out, plain) <= 1e-6
    assert attention_layers(tv_vit) == names
    for name, h in zip(names, normed):
        mha = tv_vit.get_submodule(name)
        ref = mha(h, h, h, average_attn_weights=False)[1]
        assert _max_diff(got[name], ref) <= TOL
    assert got[names[0]].shape == (2, 2, 17, 17)


# --- hand-written F.scaled_dot_product_attention ----------------------------------------


def _bool_mask():
    mask = torch.rand(2, 1, 7, 7) > 0.3
    mask[..., 0] = True
    return mask


@pytest.mark.parametrize(
    ("kwargs", "mask"),
    [
        ({}, None),
        ({"is_causal": True}, None),
        ({"scale": 0.3}, "bool"),
        ({}, "float"),
        ({"enable_gqa": True, "kv_heads": 2}, None),
        ({"enable_gqa": True, "kv_heads": 1, "is_causal": True}, None),
    ],
)
def test_handwritten_sdpa(kwargs, mask):
    torch.manual_seed(0)
    kv_heads = kwargs.pop("kv_heads", 4)
    model = nn.Sequential(TinySDPA(kv_heads=kv_heads, **kwargs)).eval()
    x = torch.randn(2, 7, 32)
    m = {"bool": _bool_mask(), "float": torch.randn(2, 4, 7, 7), None: None}[mask]
    plain = model(x) if m is None else model[0](x, m)
    args = x if m is None else (x, m)
    out, got = capture_attention(_Wrap(model[0]), args, {"mha": "0"}, keep_output=True)
    assert torch.equal(out, plain)
    q, k = model[0].last_qk
    ref = _math_reference(q, k, m, **kwargs)
    assert _max_diff(got["0"], ref) <= TOL


# --- names and errors --------------------------------------------------------------------


def test_unknown_layer_lists_attention_layers(bert):
    with pytest.raises(UnknownNameError) as err:
        capture_attention(
            bert[0], torch.ones(1, 4, dtype=torch.long), ["encoder.layer.0.attention.slf"]
        )
    text = str(err.value)
    assert "encoder.layer.0.attention.self" in text
    assert "attention layers of this model" in text
    assert "encoder.layer.1.attention.self" in text
    assert _no_hooks(bert[0])


def test_layer_without_attention_is_a_value_error(bert):
    ids = torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"no attention call.*encoder\.layer\.0\.attention\.self"):
        capture_attention(bert[0], ids, "encoder.layer.0.output")
    with pytest.raises(ValueError, match=r"2 attention calls.*all_calls=True"):
        capture_attention(bert[0], ids, "encoder")
    both = capture_attention(bert[0], ids, "encoder", all_calls=True)["encoder"]
    assert [p.shape for p in both] == [(1, 4, 4, 4)] * 2
    assert _no_hooks(bert[0])


def test_second_call_of_a_shared_module():
    torch.manual_seed(0)

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = TinySDPA()

        def forward(self, x):
            return self.attn(self.attn(x) * 2)

    model = Twice().eval()
    x = torch.randn(1, 5, 32)
    got = capture_attention(model, x, ["attn", "attn_1"])
    every = capture_attention(model, x, "attn", all_calls=True)["attn"]
    assert torch.equal(got["attn"], every[0]) and torch.equal(got["attn_1"], every[1])
    assert not torch.equal(every[0], every[1])
    with pytest.raises(ValueError, match="ran 2 time"):
        capture_attention(model, x, "attn_2")


class Boom(nn.Module):
    def __init__(self, where):
        super().__init__()
        self.attn = TinySDPA()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)
        self.where = where

    def forward(self, x):
        if self.where == "before":
            raise RuntimeError("boom")
        h = self.attn(x)
        h = self.mha(h, h, h, need_weights=False)[0]
        raise RuntimeError("boom")


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("layers", [["attn"], ["attn", "mha"]])
def test_hooks_removed_when_model_raises(where, layers):
    model = Boom(where).eval()
    with pytest.raises(RuntimeError, match="boom"):
        capture_attention(model, torch.randn(1, 4, 32), layers)
    assert live_hooks() == []
    assert _no_hooks(model)
    assert torch._C._len_torch_function_stack() == 0


def test_hooks_removed_when_selected_layer_raises():
    class Bad(TinySDPA):
        def forward(self, x, mask=None):
            super().forward(x, mask)
            raise ValueError("inside")

    model = nn.Sequential(nn.Linear(32, 32), Bad()).eval()
    with pytest.raises(ValueError, match="inside"):
        capture_attention(model, torch.randn(1, 4, 32), "1")
    assert _no_hooks(model) and live_hooks() == []


# --- reduced patterns --------------------------------------------------------------------


def test_reduced_patterns_match_reduce_pattern():
    torch.manual_seed(0)
    model = nn.Sequential(TinySDPA(is_causal=True)).eval()
    x = torch.randn(2, 40, 32)
    full = capture_attention(model, x, "0")["0"]
    small = capture_attention(model, x, "0", full=False, max_size=16)["0"]
    assert isinstance(small, ReducedPattern)
    assert small.values.dtype == torch.uint8 and small.values.shape == (2, 4, 16, 16)
    assert small.full_shape == (40, 40) and small.scale.shape == (2, 4)
    expected = reduce_pattern(full, max_size=16)
    assert torch.equal(small.values, expected.values)
    pooled = F.adaptive_avg_pool2d(full.flatten(0, 1), 16).view(2, 4, 16, 16)
    assert _max_diff(small.to_float(), pooled) <= small.scale.max().item()


def test_reduce_pattern_small_maps_are_not_pooled():
    p = torch.softmax(torch.randn(3, 5, 6), -1)
    r = reduce_pattern(p, max_size=256)
    assert r.values.shape == (3, 5, 6)
    assert (r.values.flatten(1).amax(1) == 255).all()
    with pytest.raises(ValueError, match="max_size"):
        reduce_pattern(p, max_size=0)


def test_other_threads_running_the_model_are_not_recorded():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Identity(), TinySDPA()).eval()
    x = torch.randn(1, 5, 32)
    elsewhere = []

    def run_in_another_thread(_module, _args):
        if threading.current_thread() is not threading.main_thread() or elsewhere:
            return
        worker = threading.Thread(target=lambda: elsewhere.append(model(x)))
        worker.start()
        worker.join()

    handle = model[0].register_forward_pre_hook(run_in_another_thread)
    try:
        got = capture_attention(model, x, "1", all_calls=True)["1"]
    finally:
        handle.remove()
    assert len(got) == 1  # the other thread's call of the same layer is not in it
    assert torch.equal(elsewhere[0], model(x))


def test_half_precision_pattern_is_computed_in_float32():
    torch.manual_seed(0)
    model = nn.Sequential(TinySDPA(is_causal=True)).to(torch.bfloat16).eval()
    x = torch.randn(1, 6, 32, dtype=torch.bfloat16)
    got = capture_attention(model, x, "0")["0"]
    q, k = model[0].last_qk
    ref = _math_reference(q.float(), k.float(), is_causal=True)
    assert got.dtype == torch.bfloat16
    assert _max_diff(got, ref) <= 1e-2


def test_torchvision_maxvit_5d_softmax_is_captured():
    """MaxViT takes its softmax over ``[B, windows, heads, P, P]``: captured, windows folded
    into heads (window-major), equal to the softmax the module computes."""
    maxvit = pytest.importorskip("torchvision.models.maxvit")
    torch.manual_seed(0)
    attention = maxvit.RelativePositionalMultiHeadAttention(32, 16, 16).eval()
    model = nn.Sequential(attention)
    assert attention_layers(model) == ["0"]
    x = torch.randn(2, 3, 16, 32)
    pattern = capture_attention(model, x, "0")["0"]
    batch, windows, tokens, _ = x.shape
    heads, head_dim = attention.n_heads, attention.head_dim
    q, k, _ = attention.to_qkv(x).chunk(3, dim=-1)
    q = q.reshape(batch, windows, tokens, heads, head_dim).permute(0, 1, 3, 2, 4)
    k = k.reshape(batch, windows, tokens, heads, head_dim).permute(0, 1, 3, 2, 4)
    scores = torch.einsum("bghid,bghjd->bghij", q, k * attention.scale_factor)
    expected = (scores + attention.get_relative_positional_bias()).softmax(-1)
    assert pattern.shape == (batch, windows * heads, tokens, tokens)
    torch.testing.assert_close(pattern, expected.reshape(batch, windows * heads, tokens, tokens))
