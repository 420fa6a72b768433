"""Models torch.fx cannot trace (Hugging Face transformers 5.x): the torch.export fallback."""

from __future__ import annotations

import pickle

import pytest
import torch
from support.models import tiny_bert, tiny_gpt2, tiny_vit

from surgeon_widgets import Extract, Inspect, TracingError, get_nodes

SMALL = {"hidden_size": 64, "intermediate_size": 128}  # 2 layers, 2 heads (the builders')


@pytest.fixture(scope="module")
def bert():
    return tiny_bert(**SMALL)


def bert_inputs(batch=2, seq=8):
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, -3:] = 0
    return {"input_ids": torch.randint(0, 100, (batch, seq)), "attention_mask": mask}


def test_bert_extract_equals_inspect(bert):
    inputs = bert_inputs()
    cut = Extract(bert, node_out="encoder.layer.1.output", example_inputs=inputs)
    assert cut.method == "export"
    _, expected = Inspect(bert, "encoder.layer.1.output")(**inputs)
    torch.testing.assert_close(cut(**inputs), expected)
    other = bert_inputs(batch=3, seq=12)  # not the example's shapes
    _, expected = Inspect(bert, "encoder.layer.1.output")(**other)
    torch.testing.assert_close(cut(**other), expected)
    assert sum(p.numel() for p in cut.parameters()) < sum(p.numel() for p in bert.parameters())
    torch.testing.assert_close(pickle.loads(pickle.dumps(cut))(**other), expected)


def test_bert_nodes_named_from_module_paths(bert):
    names = get_nodes(bert, example_inputs=bert_inputs())
    assert names[:2] == ["input_ids", "attention_mask"]
    for expected in (
        "embeddings.word_embeddings",
        "encoder.layer.0.attention.self.query",
        "encoder.layer.1.output.LayerNorm",
        "pooler.dense",
    ):
        assert expected in names
    assert len(names) == len(set(names))
    assert any(n.endswith("scaled_dot_product_attention") for n in names)


def test_bert_cut_between_nodes(bert):
    inputs = bert_inputs()
    _, (hidden, out) = Inspect(bert, ["encoder.layer.0", "encoder.layer.1.output"])(**inputs)
    cut = Extract(
        bert,
        node_in={"encoder.layer.0": "h"},
        node_out="encoder.layer.1.output",
        example_inputs=inputs,
    )
    kwargs = {"h": hidden}
    kwargs.update({k: inputs[k] for k in cut.summary["input"] if k in inputs})
    torch.testing.assert_close(cut(**kwargs), out)
    # printed, the summary names the output as asked, not by export's node (layer_norm_4)
    assert (
        repr(cut.summary)
        == "{'input': ('attention_mask', 'h'), 'output': encoder.layer.1.output}"
    )
    both = Extract(bert, node_out={"encoder.layer.1.output": "last", "pooler": "pooled"},
                   example_inputs=inputs)  # fmt: skip
    assert "'output': {'last': encoder.layer.1.output, 'pooled': pooler}" in repr(both.summary)
    assert cut.summary["output"].meta["surgeon_name"] == "encoder.layer.1.output.LayerNorm"


def test_gpt2_without_cache():
    model = tiny_gpt2(n_embd=64)
    ids = torch.randint(0, 100, (2, 8))
    cut = Extract(model, node_out="h.1.mlp", example_inputs={"input_ids": ids, "use_cache": False})
    _, expected = Inspect(model, "h.1.mlp")(input_ids=ids, use_cache=False)
    torch.testing.assert_close(cut(input_ids=ids), expected)


def test_vit():
    model = tiny_vit(**SMALL)
    pixels = torch.rand(2, 3, 32, 32)
    layer = "layers.1.mlp"  # transformers 5.x ViT layout
    cut = Extract(model, node_out=layer, example_inputs=(pixels,))
    _, expected = Inspect(model, layer)(pixels)
    torch.testing.assert_close(cut(pixels), expected)


def test_export_mode_is_fixed(bert):
    cut = Extract(bert, node_out="encoder.layer.0", example_inputs=bert_inputs())
    with pytest.raises(RuntimeError, match="eval mode"):
        cut.train()


def test_without_example_inputs_the_error_says_what_to_do(bert):
    with pytest.raises(TracingError, match="example_inputs") as info:
        get_nodes(bert)
    assert "Inspect" in str(info.value)
