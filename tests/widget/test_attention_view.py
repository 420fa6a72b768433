"""Live attention heatmaps: bounded uint8 payloads, mean of heads, figure, tokens, hook hygiene."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from support.models import TinyAttention, tiny_bert
from torch import nn

from surgeon_widgets.engine.attention.capture import capture_attention, reduce_pattern
from surgeon_widgets.engine.registry import live_hooks
from surgeon_widgets.widget.live.attention import AttentionView
from surgeon_widgets.widget.views.attention_tokens import normalize_tokens
from surgeon_widgets.widget.wire import attention_message


@pytest.fixture
def tiny():
    return TinyAttention(causal=True).eval()


def _view(model, **kwargs):
    sent: list[tuple[dict, list[bytes]]] = []
    return AttentionView(model, lambda c, b: sent.append((c, b)), **kwargs), sent


def test_4096_tokens_payload_is_at_most_256x256_uint8_per_map():
    model = TinyAttention(causal=True).eval()
    view, sent = _view(model)
    try:
        view.sync(["attn"])
        with torch.no_grad():
            model(torch.randn(1, 4096, 4))
        content, buffers = sent[-1]
        assert [i["head"] for i in content["items"]] == ["mean", 0, 1]
        for item in content["items"]:
            assert item["shape"] == [256, 256] and item["full_shape"] == [4096, 4096]
            assert item["dtype"] == "uint8" and "exact" not in item
            assert len(buffers[item["buffer"]]) == 256 * 256
        assert sum(len(b) for b in buffers) == 3 * 256 * 256  # never S x S
        assert view.latest("attn").shape == (1, 2, 4096, 4096)  # full resolution stays here
    finally:
        view.close()


def test_mean_of_heads_matches_capture_attention(tiny):
    x = torch.randn(2, 7, 4)
    view, sent = _view(tiny)
    view.sync(["attn"])
    with torch.no_grad():
        tiny(x)
    view.close()
    with torch.no_grad():
        reference = capture_attention(tiny, x, "attn")["attn"]
    content, buffers = sent[-1]
    mean = content["items"][0]
    assert mean["head"] == "mean" and mean["batch"] == 0 and mean["batches"] == 2
    exact = np.frombuffer(buffers[mean["exact"]["buffer"]], "<f4").reshape(7, 7)
    np.testing.assert_allclose(exact, reference[0].mean(0).numpy(), atol=1e-6)
    values = np.frombuffer(buffers[mean["buffer"]], np.uint8).reshape(7, 7)
    expected = reduce_pattern(reference[0].mean(0)[None])
    np.testing.assert_array_equal(values, expected.values[0].numpy())
    assert mean["hi"] == pytest.approx(expected.scale.item() * 255)
    for head in (0, 1):
        item = content["items"][head + 1]
        got = np.frombuffer(buffers[item["buffer"]], np.uint8).reshape(7, 7)
        np.testing.assert_array_equal(got, reduce_pattern(reference[0, head]).values.numpy())


def test_mean_of_pooled_maps_equals_pooled_mean():
    pattern = torch.softmax(torch.randn(1, 3, 600, 500), -1)
    content, buffers = attention_message("a", pattern, max_size=256)
    mean = content["items"][0]
    decoded = np.frombuffer(buffers[mean["buffer"]], np.uint8).reshape(256, 256) / 255 * mean["hi"]
    pooled = F.adaptive_avg_pool2d(pattern[0].mean(0, keepdim=True), (256, 256))[0].numpy()
    assert np.abs(decoded - pooled).max() <= mean["hi"] / 255


def test_batch_selection_resends_from_the_kept_pattern(tiny):
    view, sent = _view(tiny)
    view.sync(["attn"])
    with torch.no_grad():
        tiny(torch.randn(3, 5, 4))
    view.on_msg({"type": "attention_batch", "layer": "attn", "batch": 2})
    assert {i["batch"] for i in sent[-1][0]["items"]} == {2}
    with pytest.raises(ValueError, match=r"batch item 5 out of range 0\.\.2"):
        view.select_batch("attn", 5)
    view.close()


def test_tokens_ride_on_the_mean_item_when_they_fit(tiny):
    view, sent = _view(tiny)
    view.sync(["attn"])
    view.set_tokens(normalize_tokens(["a", "b", "c"]))
    with torch.no_grad():
        tiny(torch.randn(1, 3, 4))
    items = sent[-1][0]["items"]
    assert items[0]["tokens_q"] == items[0]["tokens_k"] == ["a", "b", "c"]
    assert "tokens_q" not in items[1]
    view.set_tokens(normalize_tokens(["a", "b"]))  # wrong length: no labels, resent at once
    assert "tokens_q" not in sent[-1][0]["items"][0]
    view.close()


def test_throttle_skips_recording_when_not_due(tiny):
    calls = []

    def due(layer):
        calls.append(layer)
        return len(calls) % 2 == 1, len(calls) - 1

    view, sent = _view(tiny, due=due)
    view.sync(["attn"])
    with torch.no_grad():
        for _ in range(4):
            tiny(torch.randn(1, 3, 4))
    assert [c["items"][0]["step"] for c, _ in sent] == [0, 2]
    view.close()


def test_hooks_removed_on_deselect_and_close(tiny):
    view, _ = _view(tiny)
    view.sync(["attn", "head"])  # "head" is no attention layer: ignored
    assert view.attached == ["attn"]
    assert live_hooks() == [("Explorer attention", "eager_forward", "attn")]
    assert tiny.attn.forward.__class__.__name__ == "EagerForward"
    view.sync([])
    assert live_hooks() == [] and view.latest("attn") is None
    assert "forward" not in tiny.attn.__dict__  # the class's own forward again
    view.sync(["attn"])
    view.close()
    assert live_hooks() == [] and "forward" not in tiny.attn.__dict__
    assert torch._C._len_torch_function_stack() == 0


def test_forward_that_raises_leaves_no_mode_behind(tiny):
    view, _ = _view(tiny)
    view.sync(["attn"])
    with pytest.raises(RuntimeError):
        tiny(torch.randn(1, 3, 5))  # wrong feature size
    assert torch._C._len_torch_function_stack() == 0
    view.close()


class EagerAttention(nn.Module):
    """Softmax by hand, as Hugging Face's ``eager`` attention does."""

    def forward(self, x):
        return torch.softmax(x @ x.transpose(-1, -2), -1) @ x


class FakeAttention(nn.Module):
    def forward(self, x):
        return 2 * x


def test_eager_softmax_attention_is_shown_too():
    model = nn.Sequential(EagerAttention())
    view, sent = _view(model)
    view.sync(["0"])
    x = torch.randn(1, 3, 2)
    model(x)
    view.close()
    content, buffers = sent[-1]
    exact = np.frombuffer(buffers[content["items"][0]["exact"]["buffer"]], "<f4").reshape(3, 3)
    np.testing.assert_allclose(
        exact, torch.softmax(x @ x.transpose(-1, -2), -1)[0].numpy(), atol=1e-6
    )


def test_layer_without_attention_call_reports_once():
    model = nn.Sequential(FakeAttention())
    errors: list[str] = []
    view = AttentionView(model, lambda c, b: None, on_error=errors.append)
    view.sync(["0"])
    for _ in range(2):
        model(torch.randn(1, 3, 2))
    view.close()
    assert len(errors) == 1 and "no attention ran in its forward" in errors[0]


def test_transformer_encoder_layers_record_with_the_fast_path_off():
    layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    view, sent = _view(model)
    view.sync(["layers.0.self_attn", "layers.1.self_attn"])
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        out = model(x, src_key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))
    view.close()
    assert {c["items"][0]["layer"] for c, _ in sent} == {"layers.0.self_attn", "layers.1.self_attn"}
    assert out.shape == (2, 5, 8)
    assert torch._C._len_torch_function_stack() == 0


@pytest.mark.parametrize(
    ("given", "tokenizer", "expected"),
    [
        (["x", "y"], None, [["x", "y"]]),
        ([["x"], ["y"]], None, [["x"], ["y"]]),
        (
            {"input_ids": torch.tensor([[1, 2]])},
            lambda ids: [f"<{i}>" for i in ids],
            [["<1>", "<2>"]],
        ),
        ({"input_ids": [3]}, lambda ids: [str(i) for i in ids], [["3"]]),
        (None, None, None),
    ],
)
def test_normalize_tokens(given, tokenizer, expected):
    assert normalize_tokens(given, tokenizer) == expected


def test_normalize_tokens_uses_a_tokenizer_object_and_explains_ids():
    class Tok:
        def convert_ids_to_tokens(self, ids):
            return [f"t{i}" for i in ids]

    assert normalize_tokens({"input_ids": torch.tensor([5, 6])}, Tok()) == [["t5", "t6"]]
    with pytest.raises(TypeError, match="pass the tokenizer"):
        normalize_tokens({"input_ids": [1, 2]})
    with pytest.raises(TypeError, match="token ids need the tokenizer"):
        normalize_tokens([1, 2])
    with pytest.raises(TypeError, match="list of token strings"):
        normalize_tokens("hello")


# --- through the Explorer ------------------------------------------------------------------


def _attention(ex):
    return [(c, b) for c, b in ex.sent if c["type"] == "attention"]


def test_explorer_selecting_an_attention_layer_sends_heatmaps(make, tiny, from_view):
    ex = make(tiny, max_rate=0)
    ex.select(["attn", "head"])
    assert {"name": "attn", "kind": "attention"} in ex.hooks
    with torch.no_grad():
        tiny(torch.randn(1, 5, 4))
    ((content, _),) = _attention(ex)
    assert [(i["layer"], i["head"]) for i in content["items"]] == [
        ("attn", "mean"),
        ("attn", 0),
        ("attn", 1),
    ]
    assert any(c["type"] == "stats" for c, _ in ex.sent)  # histograms still flow
    ex.sent.clear()
    from_view(ex, {"type": "hello"})  # a new view gets the heatmaps too
    assert [c["type"] for c, _ in ex.sent] == ["snapshot", "attention"]
    from_view(ex, {"type": "attention_batch", "layer": "attn", "batch": 3})
    assert "batch item 3 out of range" in ex.errors[-1]["text"]


def test_explorer_attention_shares_max_rate(make, tiny):
    ex = make(tiny)  # 10 updates a second
    ex.select(["attn"])
    with torch.no_grad():
        for _ in range(20):
            tiny(torch.randn(1, 3, 4))
    assert 1 <= len(_attention(ex)) < 5


def test_explorer_set_tokens_and_attention_figure(make, tiny):
    ex = make(tiny, max_rate=0)
    ex.select(["attn"])
    with pytest.raises(KeyError, match="no attention pattern for 'attn' yet"):
        ex.attention_figure("attn")
    with torch.no_grad():
        tiny(torch.randn(1, 3, 4))
    ex.set_tokens(["I", "like", "tea"])
    mean = _attention(ex)[-1][0]["items"][0]
    assert mean["tokens_q"] == ["I", "like", "tea"]
    vocab = {1: "I", 2: "like", 3: "tea"}
    ex.set_tokens({"input_ids": torch.tensor([[1, 2, 3]])}, lambda ids: [vocab[i] for i in ids])
    assert _attention(ex)[-1][0]["items"][0]["tokens_k"] == ["I", "like", "tea"]
    fig = ex.attention_figure("attn")
    ax = fig.axes[0]
    assert ax.images[0].get_cmap().name == "viridis"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["I", "like", "tea"]
    full = ex._live.attention.latest("attn")
    np.testing.assert_allclose(ax.images[0].get_array(), full[0].mean(0).numpy(), atol=1e-6)
    head1 = ex.attention_figure("attn", head=1)
    np.testing.assert_allclose(head1.axes[0].images[0].get_array(), full[0, 1].numpy())
    with pytest.raises(ValueError, match=r"head must be in 0..1"):
        ex.attention_figure("attn", head=2)


def test_explorer_removes_attention_hooks_on_deselect_and_close(make, tiny, from_view):
    ex = make(tiny, max_rate=0)
    ex.select(["attn"])
    assert ("Explorer attention", "eager_forward", "attn") in live_hooks()
    ex.select(["head"])
    assert all(owner != "Explorer attention" for owner, _, _ in live_hooks())
    assert {"name": "attn", "kind": "attention"} not in ex.hooks
    ex.select(["attn"])
    from_view(ex, {"type": "remove_all_hooks"})
    assert live_hooks() == []
    ex.select(["attn"])
    ex.close()
    assert live_hooks() == []


def test_explorer_feeds_the_update_cost_to_the_shared_throttle(make, tiny):
    ex = make(tiny)
    ex.select(["attn"])
    with torch.no_grad():
        tiny(torch.randn(1, 3, 4))
    assert ex._live.throttle.costs[("attn", "attention")] > 0


def test_bert_with_a_tokenizer_gets_token_labels(make, from_view):
    transformers = pytest.importorskip("transformers")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    tokenizer = transformers.BertTokenizer(vocab={tok: i for i, tok in enumerate(vocab)})
    model = tiny_bert(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                      intermediate_size=32, max_position_embeddings=16)  # fmt: skip
    layer = "encoder.layer.0.attention.self"
    ex = make(model, max_rate=0)
    ex.select([layer])
    enc = tokenizer(["the cat sat", "the cat"], padding=True, return_tensors="pt")
    ex.set_tokens(enc, tokenizer)
    with torch.no_grad():
        model(**enc)
    mean = _attention(ex)[-1][0]["items"][0]
    assert mean["layer"] == layer and mean["batches"] == 2 and mean["heads"] == 2
    assert mean["tokens_q"] == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    from_view(ex, {"type": "attention_batch", "layer": layer, "batch": 1})
    mean = _attention(ex)[-1][0]["items"][0]
    assert mean["batch"] == 1 and mean["tokens_k"] == ["[CLS]", "the", "cat", "[SEP]", "[PAD]"]
    with torch.no_grad():
        reference = capture_attention(model, dict(enc), layer)[layer]
    torch.testing.assert_close(ex._live.attention.latest(layer), reference)
    assert ex.attention_figure(layer, batch=1).axes[0].get_xticklabels()[4].get_text() == "[PAD]"


def test_many_heads_share_the_budget():
    from surgeon_widgets.widget.wire import ATTENTION_BUDGET as BUDGET
    from surgeon_widgets.widget.wire import MIN_HEAD_SIZE

    pattern = torch.softmax(torch.randn(1, 64, 600, 600), -1)
    content, buffers = attention_message("a", pattern)
    mean, *heads = content["items"]
    assert mean["shape"] == [256, 256] and len(heads) == 64
    side = heads[0]["shape"][0]
    assert MIN_HEAD_SIZE <= side < 256 and all(h["shape"] == [side, side] for h in heads)
    assert sum(len(b) for b in buffers) <= BUDGET
    few = attention_message("a", torch.softmax(torch.randn(1, 12, 100, 100), -1))[0]["items"]
    assert all(i["shape"] == [100, 100] and "exact" not in i for i in few)  # too big for float32
    small = attention_message("a", torch.softmax(torch.randn(1, 12, 60, 60), -1))[0]["items"]
    assert all("exact" in i for i in small)


def test_forwards_in_two_threads_keep_their_own_modes(tiny):
    import threading

    view, sent = _view(tiny)
    view.sync(["attn"])
    errors = []

    def run():
        try:
            with torch.no_grad():
                for _ in range(5):
                    tiny(torch.randn(1, 6, 4))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    view.close()
    assert errors == [] and len(sent) == 10
    assert torch._C._len_torch_function_stack() == 0
