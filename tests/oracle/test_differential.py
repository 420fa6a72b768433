"""Differential tests: surgeon_widgets against surgeon-pytorch 0.0.4, the library it replaces.

Names and values must equal surgeon-pytorch's wherever surgeon-pytorch is not defective
(SEEDS.md, "Known defects"); where it is, our value is checked against an independent oracle
instead (a clone taken by our own hook at the moment the module returns, or an eager
``torch.fx.Interpreter`` run of a plain fx trace that clones every node's value).
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
import surgeon_pytorch as sp
import torch
import torch.nn.functional as F
from support.models import Branchy, SomeModel, SomeModelFn
from torch import fx, nn
from torch.testing import assert_close

from surgeon_widgets import Extract, Inspect, get_layers, get_nodes

torchvision = pytest.importorskip("torchvision")

# ---------------------------------------------------------------------------------------------
# Models (built in fixtures, never at import)


def nested_sequential() -> nn.Module:
    return nn.Sequential(
        nn.Linear(4, 6),
        nn.Sequential(nn.ReLU(), nn.Linear(6, 5), nn.Sequential(nn.Tanh(), nn.Linear(5, 3))),
        nn.Sigmoid(),
    )


class Residual(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.lin(x))


class SharedTwice(nn.Module):
    """A leaf module and a block with functional ops, each called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 4)
        self.shared = nn.Linear(4, 4)
        self.block = Residual(4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = self.shared(h)
        h = self.shared(torch.tanh(h))
        h = self.block(h)
        h = self.block(h)
        return self.out(h)


class FunctionalNames(nn.Module):
    """Functions whose names contain ``_``, which surgeon-pytorch cuts at the last ``_``."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = F.layer_norm(x, (8,))
        q = self.proj(h)
        a = F.scaled_dot_product_attention(q, q, q)
        return F.layer_norm(a + h, (8,))


def _resnet(name: str) -> nn.Module:
    torch.manual_seed(0)
    return getattr(torchvision.models, name)(weights=None).eval()


# name -> (factory, input factory)
MODELS = {
    "some_model": (SomeModel, lambda: torch.randn(2, 5)),
    "some_model_fn": (SomeModelFn, lambda: torch.randn(2, 5)),
    "branchy": (Branchy, lambda: torch.randn(2, 5)),
    "nested_sequential": (nested_sequential, lambda: torch.randn(2, 4)),
    "shared_twice": (SharedTwice, lambda: torch.randn(2, 4)),
    "functional_names": (FunctionalNames, lambda: torch.randn(1, 2, 3, 8)),
    "resnet18": (lambda: _resnet("resnet18"), lambda: torch.randn(1, 3, 64, 64)),
    "resnet50": (lambda: _resnet("resnet50"), lambda: torch.randn(1, 3, 64, 64)),
}
SMALL = [name for name in MODELS if not name.startswith("resnet")]
RESNETS = ["resnet18", "resnet50"]

INPLACE_BUG = (
    "engine bug: Extract returns node values that a later in-place op in the graph "
    "(ResNet's ReLU(inplace=True)) has overwritten when more than one value is returned; "
    "fix: select_outputs should clone selected nodes that have other users"
)


@pytest.fixture(scope="module", params=list(MODELS))
def case(request):
    factory, make_input = MODELS[request.param]
    torch.manual_seed(0)
    model = factory().eval()
    torch.manual_seed(1)
    return request.param, model, make_input()


# ---------------------------------------------------------------------------------------------
# Oracles


_FX_SUFFIX = re.compile(r"_\d+$")


def surgeon_mangles(model: nn.Module) -> list[bool]:
    """For each node get_nodes lists: does surgeon-pytorch mangle its name?

    surgeon-pytorch names a function/method node ``node.name.rsplit('_', 1)[0]``, which is right
    only when the function's own name has no ``_`` (``layer_norm`` -> ``layer``), and an input
    by fx's ``node.name``, which fx renames when the parameter shadows a builtin
    (``input`` -> ``input_1``).
    """
    graph = fx.Tracer().trace(model)
    flags = []
    for node in graph.nodes:
        if node.op in ("get_attr", "output"):
            continue
        own = _FX_SUFFIX.sub("", node.name)
        renamed_input = node.op == "placeholder" and node.name != node.target
        flags.append((node.op in ("call_function", "call_method") and "_" in own) or renamed_input)
    return flags


def comparable_positions(theirs: list[str], mangled: list[bool]) -> list[int]:
    """Positions where surgeon-pytorch's name is unique and not mangled."""
    counts = Counter(theirs)
    return [i for i, name in enumerate(theirs) if counts[name] == 1 and not mangled[i]]


class _Recorder(fx.Interpreter):
    """Runs a plain fx trace eagerly and keeps a clone of each node's value, in graph order."""

    def run_node(self, n: fx.Node):
        value = super().run_node(n)
        if n.op not in ("get_attr", "output"):
            self.values.append(value.clone() if isinstance(value, torch.Tensor) else value)
        return value


@torch.no_grad()
def true_node_values(model: nn.Module, x: torch.Tensor) -> list:
    """The value of every node (in get_nodes order), cloned the moment it is computed."""
    recorder = _Recorder(fx.GraphModule(model, fx.Tracer().trace(model)))
    recorder.values = []
    recorder.run(x)
    return recorder.values


def overwritten_in_place(model: nn.Module) -> set[str]:
    """Names (ours) of nodes whose value is later fed to a module with ``inplace=True``."""
    graph = fx.Tracer().trace(model)
    nodes = [n for n in graph.nodes if n.op not in ("get_attr", "output")]
    modules = dict(model.named_modules())
    found = set()
    for name, node in zip(get_nodes(model), nodes):
        for user in node.users:
            if user.op == "call_module" and getattr(modules[user.target], "inplace", False):
                found.add(name)
    return found


@torch.no_grad()
def true_module_calls(model: nn.Module, x: torch.Tensor) -> dict[str, list]:
    """``{layer: [(clone of output, output tensor, its version), ...]}`` for every call.

    The version lets a test see whether a later in-place op changed the output that
    surgeon-pytorch keeps by reference.
    """
    calls: dict[str, list] = {}
    handles = []
    for name, module in model.named_modules():
        if not name:
            continue

        def hook(mod, args, out, name=name):
            if isinstance(out, torch.Tensor):
                calls.setdefault(name, []).append((out.clone(), out, out._version))

        handles.append(module.register_forward_hook(hook))
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return calls


# ---------------------------------------------------------------------------------------------
# Node names


def test_node_names_equal_surgeon_where_surgeon_is_right(case):
    _, model, _ = case
    ours, theirs = get_nodes(model), sp.get_nodes(model)
    mangled = surgeon_mangles(model)
    assert len(ours) == len(theirs) == len(mangled)
    assert len(set(ours)) == len(ours), "our names must be unique"
    positions = comparable_positions(theirs, mangled)
    assert positions, "nothing to compare"
    assert [ours[i] for i in positions] == [theirs[i] for i in positions]


def test_repeated_names_get_per_owner_suffixes(case):
    """Where surgeon-pytorch repeats a name, ours is that name, then ``_1``, ``_2``, ..."""
    _, model, _ = case
    ours, theirs = get_nodes(model), sp.get_nodes(model)
    mangled = surgeon_mangles(model)
    seen: Counter[str] = Counter()
    counts = Counter(theirs)
    for our, their, bad in zip(ours, theirs, mangled):
        if counts[their] > 1 and not bad:
            k = seen[their]
            assert our == (their if k == 0 else f"{their}_{k}")
            seen[their] += 1


def test_known_repeats_and_mangles_fixed():
    assert get_nodes(SharedTwice()) == [
        "x", "inp", "relu", "shared", "tanh", "shared_1",
        "block.lin", "block.relu", "block.add",
        "block.lin_1", "block.relu_1", "block.add_1", "out",
    ]  # fmt: skip
    theirs = sp.get_nodes(SharedTwice())
    assert theirs.count("shared") == 2 and theirs.count("block.add") == 2
    ours = get_nodes(FunctionalNames())
    assert ours == ["x", "layer_norm", "proj", "scaled_dot_product_attention", "add",
                    "layer_norm_1"]  # fmt: skip
    assert sp.get_nodes(FunctionalNames())[1:4] == ["layer", "proj", "scaled_dot_product"]


def test_input_named_after_forward_parameter():
    assert get_nodes(nested_sequential())[0] == "input"


def test_resnet_shared_relu_names():
    model = _resnet("resnet50")
    ours, theirs = get_nodes(model), sp.get_nodes(model)
    assert theirs.count("layer1.0.relu") == 3
    assert [n for n in ours if n.startswith("layer1.0.relu")] == [
        "layer1.0.relu",
        "layer1.0.relu_1",
        "layer1.0.relu_2",
    ]


# ---------------------------------------------------------------------------------------------
# Inspect


@torch.no_grad()
def test_inspect_equals_surgeon_where_surgeon_is_right(case):
    _, model, x = case
    calls = true_module_calls(model, x)
    layers = [name for name in get_layers(model) if name in calls]
    # every call of every layer, by our naming: relu, relu_1, relu_2, ...
    ours_names = [f"{n}_{k}" if k else n for n in layers for k in range(len(calls[n]))]
    y_ours, ours = Inspect(model, layer=ours_names)(x)
    y_theirs, theirs = sp.Inspect(model, layer=layers)(x)
    assert_close(y_ours, y_theirs)
    ours_by_name = dict(zip(ours_names, ours))
    compared = 0
    for name, their in zip(layers, theirs):
        for k, (truth, _, _) in enumerate(calls[name]):  # ours is right for every call
            assert_close(ours_by_name[f"{name}_{k}" if k else name], truth, rtol=0, atol=0)
        _, tensor, version = calls[name][-1]  # surgeon keeps the last call, by reference
        if tensor._version != version:
            continue  # a later in-place op changed surgeon's value (SEEDS.md defect)
        last = len(calls[name]) - 1
        assert_close(ours_by_name[f"{name}_{last}" if last else name], their)
        compared += 1
    assert compared > 0


@torch.no_grad()
def test_inspect_forms_and_order(case):
    """str / list / tuple / dict forms come back as asked, in the order asked, like surgeon's."""
    _, model, x = case
    calls = true_module_calls(model, x)
    single = [n for n in get_layers(model) if len(calls.get(n, [])) == 1]
    chosen = list(reversed(single))[:4]
    for spec in (chosen[0], chosen, tuple(chosen), {n: f"k{i}" for i, n in enumerate(chosen)}):
        _, ours = Inspect(model, layer=spec)(x)
        theirs = sp.Inspect(model, layer=spec, keep_output=False)(x)
        assert type(ours) is type(theirs)
        if isinstance(spec, dict):
            assert list(ours) == list(spec.values()) == list(theirs)
            for name, value in zip(spec, ours.values()):
                assert_close(value, calls[name][0][0])
        elif isinstance(spec, str):
            assert_close(ours, calls[spec][0][0])
        else:
            for name, value in zip(spec, ours):
                assert_close(value, calls[name][0][0])
    only = Inspect(model, layer=chosen, keep_output=False)(x)
    assert isinstance(only, list) and len(only) == len(chosen)


@torch.no_grad()
@pytest.mark.parametrize("name", RESNETS)
def test_inspect_survives_inplace_ops(name):
    """ResNet's bn2 is overwritten by ``out += identity`` and the in-place ReLU."""
    model = _resnet(name)
    x = torch.randn(1, 3, 64, 64)
    ours = Inspect(model, layer="layer1.0.bn2", keep_output=False)(x)
    theirs = sp.Inspect(model, layer="layer1.0.bn2", keep_output=False)(x)
    assert ours.min() < 0
    assert theirs.min() == 0  # surgeon-pytorch's reference was changed in place
    assert_close(ours, Extract(model, node_out="layer1.0.bn2")(x))


# ---------------------------------------------------------------------------------------------
# Extract


@torch.no_grad()
def test_extract_equals_surgeon_where_surgeon_is_right(case):
    _, model, x = case
    theirs_names = sp.get_nodes(model)
    positions = comparable_positions(theirs_names, surgeon_mangles(model))
    names = [theirs_names[i] for i in positions]
    spec = {n: f"k{i}" for i, n in enumerate(names)}
    ours = Extract(model, node_out=spec)(x)
    theirs = sp.Extract(model, node_out=spec)(x)
    assert list(ours) == list(spec.values())
    assert set(theirs) == set(ours)
    overwritten = overwritten_in_place(model)  # surgeon returns these after the in-place op
    truth = dict(zip(get_nodes(model), true_node_values(model, x)))
    for name, key in spec.items():
        expected = truth[name] if name in overwritten else theirs[key]
        assert_close(ours[key], expected, msg=lambda m, name=name: f"{name}: {m}")


@torch.no_grad()
def test_extract_single_nodes_equal_surgeon(case):
    """One node at a time (no in-place op can reach a single output)."""
    label, model, x = case
    theirs_names = sp.get_nodes(model)
    positions = comparable_positions(theirs_names, surgeon_mangles(model))
    truth = true_node_values(model, x)
    step = 1 if label in SMALL else 25  # keep the ResNets fast
    for i in positions[::step]:
        name = theirs_names[i]
        ours = Extract(model, node_out=name)(x)
        assert_close(ours, truth[i], rtol=0, atol=0)
        if label in SMALL:
            assert_close(ours, sp.Extract(model, node_out=name)(x))


@torch.no_grad()
def test_extract_every_node_equals_eager_value(case):
    """All nodes at once, including those surgeon-pytorch cannot name and those a later
    in-place module overwrites, against the oracle."""
    _, model, x = case
    names = get_nodes(model)
    values = Extract(model, node_out=names)(x)
    for name, ours, truth in zip(names, values, true_node_values(model, x)):
        assert_close(ours, truth, rtol=0, atol=0, msg=lambda m, name=name: f"{name}: {m}")


@torch.no_grad()
@pytest.mark.parametrize("name", RESNETS)
def test_extract_multi_output_inplace(name):
    model = _resnet(name)
    x = torch.randn(1, 3, 64, 64)
    alone = Extract(model, node_out="bn1")(x)
    assert alone.min() < 0
    bn1, _ = Extract(model, node_out=["bn1", "relu"])(x)
    assert_close(bn1, alone)


@torch.no_grad()
def test_extract_keep_output_inplace():
    model = _resnet("resnet18")
    x = torch.randn(1, 3, 64, 64)
    _, bn1 = Extract(model, node_out="bn1", keep_output=True)(x)
    assert bn1.min() < 0


@torch.no_grad()
def test_extract_order_as_asked(case):
    """surgeon-pytorch returns list/tuple outputs in graph order; ours in the order asked."""
    _, model, x = case
    theirs_names = sp.get_nodes(model)
    positions = comparable_positions(theirs_names, surgeon_mangles(model))
    skip = overwritten_in_place(model)
    names = [theirs_names[i] for i in positions if theirs_names[i] not in skip][-4:]
    asked = list(reversed(names))
    truth = dict(zip(get_nodes(model), true_node_values(model, x)))
    for spec in (asked, tuple(asked)):
        ours = Extract(model, node_out=spec)(x)
        theirs = sp.Extract(model, node_out=spec)(x)
        assert type(ours) is type(theirs) is type(spec)
        for n, value in zip(asked, ours):
            assert_close(value, truth[n])
        for n, value in zip(names, theirs):  # graph order
            assert_close(value, truth[n])


CUTS = {
    "some_model_fn": ("layer1", "sigmoid", (2, 3)),
    "nested_sequential": ("1.1", "1.2.1", (2, 5)),
    "shared_twice": ("tanh", "out", (2, 4)),
    "resnet18": ("layer2.1.add", "layer3.1.add", (1, 128, 8, 8)),
    "resnet50": ("layer2.3.add", "layer3.2.add", (1, 512, 8, 8)),
}


@torch.no_grad()
@pytest.mark.parametrize("label", list(CUTS))
def test_extract_node_in_equals_surgeon(label):
    node_in, node_out, shape = CUTS[label]
    factory, _ = MODELS[label]
    torch.manual_seed(0)
    model = factory().eval()
    new_input = torch.randn(*shape)
    ours = Extract(model, node_in=node_in, node_out=node_out)
    theirs = sp.Extract(model, node_in=node_in, node_out=node_out)
    assert_close(ours(new_input), theirs(new_input))
    # surgeon-pytorch keeps every module; ours keeps only what the cut needs
    assert sum(p.numel() for p in ours.parameters()) < sum(p.numel() for p in theirs.parameters())


@torch.no_grad()
def test_summary_equals_surgeon():
    torch.manual_seed(0)
    model = Branchy()
    spec = {"node_in": {"layer1a": "my_input"}, "node_out": {"add": "my_add"}}
    with pytest.warns(UserWarning):  # the cut leaks: layer1b still reads x
        ours = Extract(model, **spec)
    theirs = sp.Extract(model, **spec)
    assert str(ours.summary) == str(theirs.summary)
    assert str(ours.summary) == "{'input': ('x', 'my_input'), 'output': {'my_add': add}}"
    x, mine = torch.randn(1, 5), torch.randn(1, 3)
    assert_close(ours(x=x, my_input=mine), theirs(x=x, my_input=mine))
    assert_close(ours(x=x, my_input=mine)["my_add"], mine + model.layer1b(x))
