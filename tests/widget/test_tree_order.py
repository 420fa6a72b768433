"""The tree with graph nodes reads as the model runs (issue 10 §5): under each module its
submodules and its own graph nodes in execution order, inputs first, uncalled modules last.

Real models: torchvision ResNet-18 (torch.fx) and tiny Hugging Face BERT / GPT-2
(torch.export); the Explorer shows exactly what ``tree.merge_rows`` derives.
"""

from __future__ import annotations

import pytest
import torch
import torchvision
from support.models import tiny_bert, tiny_gpt2
from torch import nn

from surgeon_widgets import get_layers, get_nodes
from surgeon_widgets.engine.nodes import execution_order
from surgeon_widgets.widget import Explorer
from surgeon_widgets.widget.views import tree

transformers = pytest.importorskip("transformers")

IDS = torch.randint(0, 99, (2, 8), generator=torch.Generator().manual_seed(0))


def ordered_rows(model: nn.Module, inputs=None) -> list[dict]:
    modules = tree.module_rows(model)
    nodes = tree.node_rows(model, inputs, frozenset(r["name"] for r in modules))
    return tree.merge_rows(modules, nodes, execution_order(model, example_inputs=inputs))


def children(rows: list[dict], parent: str | None) -> list[str]:
    return [r["name"] for r in rows if r["parent"] == parent]


class DefinedOutOfOrder(nn.Module):
    """Defines head, spare, body; runs body, relu, head, add; never calls spare."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)
        self.spare = nn.Sequential(nn.Linear(4, 4))
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x):
        h = self.head(torch.relu(self.body(x)))
        return h + x


@pytest.fixture(scope="module")
def resnet():
    return torchvision.models.resnet18(num_classes=10).eval()


def test_resnet_block_children_in_execution_order(resnet):
    rows = ordered_rows(resnet)
    assert children(rows, "layer1.0") == [
        f"layer1.0.{n}" for n in ("conv1", "bn1", "relu", "conv2", "bn2", "add", "relu_1")
    ]
    assert children(rows, "layer2.0") == [
        f"layer2.0.{n}"
        for n in ("conv1", "bn1", "relu", "conv2", "bn2", "downsample", "add", "relu_1")
    ]
    assert children(rows, None) == [
        "x", "conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
        "avgpool", "flatten", "fc",
    ]  # fmt: skip
    assert sorted(r["name"] for r in rows) == sorted(
        set(get_layers(resnet)) | set(get_nodes(resnet))
    )
    seen: set[str] = set()
    for row in rows:  # still pre-order, depths and child counts consistent
        assert row["parent"] is None or row["parent"] in seen
        assert row["children"] == len(children(rows, row["name"]))
        seen.add(row["name"])


def test_gpt2_block_interleaves_adds_between_modules():
    model = tiny_gpt2()
    rows = ordered_rows(model, {"input_ids": IDS, "use_cache": False})
    assert children(rows, "h.0") == [
        f"h.0.{n}" for n in ("ln_1", "attn", "add", "ln_2", "mlp", "add_1")
    ]
    top = children(rows, None)
    assert top[0] == "input_ids"
    assert (
        top.index("wte") < top.index("wpe") < top.index("drop") < top.index("h") < top.index("ln_f")
    )


def test_bert_layer_and_attention_in_execution_order():
    model = tiny_bert()
    inputs = {"input_ids": IDS, "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    rows = ordered_rows(model, inputs)
    layer = "encoder.layer.0"
    assert children(rows, layer) == [
        f"{layer}.{n}" for n in ("attention", "intermediate", "output")
    ]
    assert children(rows, f"{layer}.attention") == [
        f"{layer}.attention.self",
        f"{layer}.attention.output",
    ]
    attn = [n.rsplit(".", 1)[1] for n in children(rows, f"{layer}.attention.self")]
    # the projections, each followed by its own reshape, then the attention call
    assert attn.index("query") < attn.index("view") < attn.index("key") < attn.index("view_1")
    assert attn.index("value") < attn.index("scaled_dot_product_attention")
    top = children(rows, None)
    assert top[:2] == ["input_ids", "attention_mask"]
    assert top.index("embeddings") < top.index("encoder") < top.index("pooler") == len(top) - 1


def test_uncalled_module_goes_last_in_definition_order():
    model = DefinedOutOfOrder()
    rows = ordered_rows(model)
    assert children(rows, None) == ["x", "body", "relu", "head", "add", "spare"]
    assert children(rows, "body") == ["body.0", "body.1"]
    assert children(rows, "spare") == ["spare.0"]
    assert execution_order(model) == ["x", "body", "body.0", "body.1", "relu", "head", "add"]


def test_explorer_shows_execution_order_only_with_nodes():
    model = DefinedOutOfOrder()
    ex = Explorer(model)
    try:
        assert [r["name"] for r in ex.rows] == get_layers(model)  # definition order, no trace
        ex.show_nodes = True
        assert children(ex.rows, None) == ["x", "body", "relu", "head", "add", "spare"]
        assert ex.rows == ordered_rows(model)  # one rule: the Explorer shows merge_rows' order
        ex.show_nodes = False
        assert [r["name"] for r in ex.rows] == get_layers(model)
    finally:
        ex.close()
