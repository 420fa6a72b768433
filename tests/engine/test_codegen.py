"""Generated Extract / Inspect code, tested by executing it in a fresh namespace."""

from __future__ import annotations

import ast
import sys
import types
import warnings

import pytest
import torch
from support.models import tiny_bert
from torch import nn
from torchvision.models import resnet18

from surgeon_widgets import Extract, Inspect
from surgeon_widgets.engine.cut.codegen import extract_code, find_variable_name, inspect_code
from surgeon_widgets.engine.cut.extract import InputLeakWarning
from surgeon_widgets.engine.cut.surgery import auto_input_key, input_identifier
from surgeon_widgets.engine.naming import normalize_spec


def run(code: str, target: str, **namespace):
    """Execute ``code`` in a fresh namespace holding only ``namespace`` and torch."""
    scope = {"torch": torch, **namespace}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputLeakWarning)
        exec(compile(code, "<generated>", "exec"), scope)
    return scope[target]


def new_inputs(model, node_in, original, **kwargs):
    """Values for a cut's new inputs (keyed as Extract names them), from the whole model."""
    if node_in is None:
        return {}
    pairs = normalize_spec(node_in, "node_in")
    wanted = {name: input_identifier(auto_input_key(name, key)) for name, key in pairs}
    return Extract(model, node_out=wanted, **kwargs)(**original)


def assert_same_cut(model, node_in, node_out, original, options=(), **kwargs):
    """Generated code builds the same Extract as calling it directly, with the same results."""
    options = dict(options)
    name = "example_inputs" if "example_inputs" in kwargs else None
    code = extract_code(node_in, node_out, example_inputs_name=name, **options)
    generated = run(code, "cut_model", model=model, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputLeakWarning)
        direct = Extract(model, node_in, node_out, **options, **kwargs)
    assert generated.code == direct.code
    feed = {**original, **new_inputs(model, node_in, original, **kwargs)}
    args = {k: feed[k] for k in direct.summary["input"]}
    torch.testing.assert_close(generated(**args), direct(**args))


RESNET_CUTS = [
    ("layer1", "layer3", {}),
    ({"layer1.0.conv1": "a", "maxpool": "b"}, {"layer1.0": "o", "layer1.1.relu_1": "p"}, {}),
    ("layer1.0.conv1", "layer1.0", {}),  # leaks x: the cut takes x too
    (None, ("fc", "layer4.1.relu_1"), {"share_modules": True}),
    (["layer3.0.conv1", "layer3.0.downsample.0"], ["layer4.0.add"], {}),
]


def test_generated_code_on_resnet():
    model = resnet18().eval()
    x = {"x": torch.randn(1, 3, 64, 64)}
    for node_in, node_out, options in RESNET_CUTS:  # one test: shared teardown gc is slow
        assert_same_cut(model, node_in, node_out, x, options)


def test_generated_code_on_bert():
    bert = tiny_bert(hidden_size=64, intermediate_size=128)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, -3:] = 0
    inputs = {"input_ids": torch.randint(0, 100, (2, 8)), "attention_mask": mask}
    code = extract_code(node_out="pooler", example_inputs_name="example_inputs")
    assert code.endswith("Extract(model, node_out='pooler', example_inputs=example_inputs)")
    attention = "encoder.layer.0.attention.self.scaled_dot_product_attention"
    for node_in, node_out in [
        ({"encoder.layer.0": "h"}, "encoder.layer.1.output"),
        (None, {attention: "attn", "pooler": "pooled"}),
    ]:
        assert_same_cut(bert, node_in, node_out, inputs, example_inputs=inputs)


ADVERSARIAL = ["c'd", "back\\slash", "écoute", "层", "with space", "0", "x", "tab\tname"]
# torch.fx writes module names into its code unescaped: a quote, a newline or "\\t" breaks
# it ("back\\slash" only works because "\\s" is not an escape); "class" and "self" too.
# Extract renames such attribute targets (our names stay), so these work.
FX_BREAKS = ['a"b', "new\nline", "c:\\temp", "class", "self"]


class Named(nn.Module):
    """One linear layer registered under ``name``, then a ReLU and a tail."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.add_module(name, nn.Linear(4, 4))
        self.tail = nn.Linear(4, 2)

    def forward(self, x):
        return self.tail(torch.relu(getattr(self, self.name)(x)))


def check_named(name: str) -> None:
    model = Named(name)
    x = {"x": torch.randn(3, 4)}
    for node_in, node_out in [(None, name), (name, "tail"), ({name: name}, {"tail": name})]:
        assert_same_cut(model, node_in, node_out, x)
    _, expected = Inspect(model, [name, "tail"])(x["x"])
    _, got = run(inspect_code([name, "tail"]), "inspected", model=model)(x["x"])
    torch.testing.assert_close(got, expected)


@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")
def test_adversarial_names():
    for name in ADVERSARIAL:
        check_named(name)


@pytest.mark.parametrize("name", FX_BREAKS)
def test_names_fx_cannot_write(name):
    check_named(name)
    cut = Extract(Named(name), node_out=name)
    assert cut.summary["output"].meta["surgeon_name"] == name  # our name, not fx's


def test_names_round_trip_through_the_code():
    for name in [*ADVERSARIAL, *FX_BREAKS, "'''", '"""', "\\", "\x00"]:
        for code, keyword in [
            (extract_code(node_in={name: name}, node_out=[name]), "node_out"),
            (inspect_code({name: name}), "layer"),
        ]:
            call = ast.parse(code).body[-1].value
            value = next(k.value for k in call.keywords if k.arg == keyword)
            assert ast.literal_eval(value) in ([name], {name: name}), (name, code)


def test_inspect_code_runs():
    model = nn.Sequential(nn.Linear(5, 3), nn.ReLU())
    code = inspect_code({"0": "lin", "1": "act"}, model_name="net", keep_output=False)
    assert code.splitlines()[0] == "from surgeon_widgets import Inspect"
    inspected = run(code, "inspected", net=model)
    x = torch.randn(2, 5)
    torch.testing.assert_close(inspected(x)["act"], torch.relu(model[0](x)))


def test_long_calls_are_wrapped():
    names = [f"encoder.layer.{i}.output.dense" for i in range(2)]
    code = extract_code(node_out=names, example_inputs_name="inputs")
    assert max(len(line) for line in code.splitlines()) <= 100
    assert code.endswith("    example_inputs=inputs,\n)")


def test_bad_arguments_rejected():
    with pytest.raises(ValueError, match="model_name must be a Python variable name"):
        extract_code(node_out="fc", model_name="model; import os")
    with pytest.raises(ValueError, match="example_inputs_name"):
        extract_code(node_out="fc", example_inputs_name="1x")
    with pytest.raises(TypeError, match="did you mean 'keep_output'"):
        extract_code(node_out="fc", keep_outputs=True)
    with pytest.raises(TypeError, match="node_out must be a str, list, tuple or dict"):
        extract_code(node_out=3)
    with pytest.raises(ValueError, match="cannot be written as a Python literal"):
        extract_code(node_out="fc", concrete_args={"x": object()})
    assert extract_code(model_name="self.model") == (
        "from surgeon_widgets import Extract\n\ncut_model = Extract(self.model)"
    )


def test_find_variable_name(monkeypatch):
    model, other = nn.Linear(1, 1), nn.Linear(1, 1)
    namespace = {"_": model, "_5": model, "resnet": model, "m2": model, "m1": model, "o": other}
    assert find_variable_name(model, namespace) == "m1"  # shortest, then most recent
    assert find_variable_name(nn.ReLU(), namespace) == "model"
    globals()["net_for_test"] = model  # neither the caller's globals nor IPython are searched
    shell = types.SimpleNamespace(user_ns={"my_model": model})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    try:
        assert find_variable_name(model, {}) == "model"
        assert find_variable_name(model, shell.user_ns) == "my_model"
        with pytest.raises(TypeError):
            find_variable_name(model)  # type: ignore[call-arg]  # the namespace is required
    finally:
        del globals()["net_for_test"]
