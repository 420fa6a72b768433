"""An Extract is called the way the model is called (issue 10, sections 1-3), and one trace per
model and input signature is shared (section 4)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from surgeon_widgets import Extract, get_nodes
from surgeon_widgets.engine.calling import FixedArgumentError
from surgeon_widgets.engine.cut.analyze import analyze_cut, suggest_fix
from surgeon_widgets.engine.tracing import clear_trace_cache, trace

X, Y = torch.randn(2, 4), torch.randn(2, 4)


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, y, use_cache=False):
        return self.a(x) + self.b(y)


class Flagged(Two):
    """torch.fx cannot trace ``if use_cache``: traced by torch.export, which fixes the flag."""

    def forward(self, x, y, use_cache=False):
        out = self.a(x) + self.b(y)
        return out * 2 if use_cache else out


def test_issue_example_takes_the_models_own_call():
    model = Two()
    cut = Extract(model, node_out="a")
    expected = model.a(X)
    assert cut.summary["input"] == ("x",)
    for got in (cut(X, Y), cut(x=X, y=Y, use_cache=False), cut(X, y=Y), cut(X), cut(x=X)):
        torch.testing.assert_close(got, expected)


def test_cut_reading_the_second_input_takes_the_models_positional_order():
    model = Two()
    cut = Extract(model, node_out="b")
    assert cut.summary["input"] == ("y",)
    torch.testing.assert_close(cut(X, Y), model.b(Y))  # as the model: x first
    torch.testing.assert_close(cut(y=Y), model.b(Y))


def test_new_inputs_keep_the_documented_form_and_ignore_what_the_cut_does_not_read():
    model = Two()
    cut = Extract(model, node_in={"a": "h"}, node_out="add")
    assert cut.summary["input"] == ("y", "h")
    h = torch.randn(2, 4)
    expected = h + model.b(Y)
    torch.testing.assert_close(cut(Y, h), expected)
    torch.testing.assert_close(cut(h=h, y=Y), expected)
    torch.testing.assert_close(cut(h=h, y=Y, x=X, use_cache=False), expected)  # x: not read
    with pytest.raises(TypeError, match=r"unexpected argument 'z'.*in order or by name"):
        cut(h=h, y=Y, z=1)
    with pytest.raises(TypeError, match="missing input"):
        cut(h=h)


def test_fx_mangled_placeholder_name_is_an_alias():
    seq = nn.Sequential(nn.Linear(4, 3))
    cut = Extract(seq, node_out="0")
    torch.testing.assert_close(cut(input_1=X), seq(X))
    torch.testing.assert_close(cut(input=X), seq(X))
    torch.testing.assert_close(cut(X), seq(X))


def test_export_fixed_flag_is_checked_against_the_traced_value():
    model = Flagged().eval()
    example = {"x": X, "y": Y, "use_cache": False}
    cut = Extract(model, node_out="add", example_inputs=example)
    assert cut.method == "export"
    expected = model(X, Y)
    torch.testing.assert_close(cut(X, Y), expected)
    torch.testing.assert_close(cut(**example), expected)
    with pytest.raises(FixedArgumentError, match=r"traced with use_cache=False.*Rebuild it"):
        cut(X, Y, use_cache=True)
    doubled = Extract(model, node_out="mul", example_inputs={**example, "use_cache": True})
    torch.testing.assert_close(doubled(X, Y, use_cache=True), model(X, Y, use_cache=True))


def test_tensor_where_the_trace_had_none_is_an_error():
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, mask=None, flag=True):
            out = self.lin(x)
            out = out if flag else out * 2  # fx cannot trace this: export
            return out if mask is None else out * mask

    model = Masked()
    cut = Extract(model, node_out="lin", example_inputs=(X,))
    with pytest.raises(FixedArgumentError, match="traced with mask=None"):
        cut(X, mask=torch.ones(2, 4))


class SideWrite(nn.Module):
    """``side`` is a temporary written in place and never read: not a side effect."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, flag=True):
        h = self.a(x)
        side = x * 2
        side.add_(1)
        live = h * 1
        live.add_(1)  # read below: must stay
        out = self.b(live)
        return out if flag else out * 2  # fx cannot trace this: export


def test_in_place_write_on_a_temporary_is_not_a_side_effect():
    model = SideWrite().eval()
    traced = trace(model, example_inputs=(X,))
    assert traced.method == "export"
    report = analyze_cut(traced, {"a": "h"}, "b")
    assert report.valid and report.leaks == {} and report.inputs == ("h",), report
    assert suggest_fix(traced, {"a": "h"}, "b") == []
    cut = Extract(model, {"a": "h"}, "b", example_inputs=(X,))
    assert "mul" not in [n.meta.get("surgeon_name") for n in cut.graph.nodes]
    h = model.a(X)
    torch.testing.assert_close(cut(h=h), model.b(h + 1))  # the live write was kept
    torch.testing.assert_close(Extract(model, node_out="b", example_inputs=(X,))(X), model(X))


def test_one_trace_per_model_and_signature():
    model = Two()
    first = trace(model)
    assert trace(model) is first
    assert get_nodes(model) == first.node_names()
    model.a = nn.Linear(4, 4)  # the model changed: traced again
    second = trace(model)
    assert second is not first and trace(model) is second
    model.train(not model.training)
    assert trace(model) is not second
    clear_trace_cache(model)
    assert trace(model) is not second
    flagged = Flagged()
    a = trace(flagged, example_inputs=(X, Y))
    assert trace(flagged, example_inputs=(torch.zeros(2, 4), Y)) is a  # same signature
    assert trace(flagged, example_inputs=(torch.zeros(3, 4), torch.zeros(3, 4))) is not a
    # copies and pickles of a model do not carry the cache; Extracts do not change the trace
    for clone in (copy.deepcopy(flagged), pickle.loads(pickle.dumps(flagged))):
        assert trace(clone, example_inputs=(X, Y)).root is not a.root
    before = a.graph.python_code("self").src
    Extract(flagged, {"a": "h"}, "add", example_inputs=(X, Y))
    assert a.graph.python_code("self").src == before


def test_extract_with_binder_pickles_and_copies():
    model = Flagged().eval()
    cut = Extract(model, node_out="add", example_inputs=(X, Y))
    for clone in (pickle.loads(pickle.dumps(cut)), copy.deepcopy(cut)):
        torch.testing.assert_close(clone(x=X, y=Y), model(X, Y))
        with pytest.raises(FixedArgumentError):
            clone(X, Y, use_cache=True)


def test_fx_in_place_write_on_a_value_read_later_is_kept():
    class Bump(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            h = self.a(x)
            h.add_(1)  # fx: a call_method with no users; the value b reads depends on it
            scratch = x * 2
            scratch.mul_(3)  # written, never read: dropped
            return self.b(h)

    model = Bump()
    cut = Extract(model, node_out="b")
    with torch.no_grad():
        torch.testing.assert_close(cut(X), model(X))
    kept = [n.meta.get("surgeon_name") for n in cut.graph.nodes]
    assert "add_" in kept and "mul" not in kept and "mul_" not in kept, kept


def test_fx_concrete_args_are_fixed_and_renamed_placeholders_map_to_their_parameter():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.out = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x, double=False):
            h = self.lin(x)
            return self.out(h * 2 if double else h)

    model = Net()
    cut = Extract(model, node_out="out", concrete_args={"double": True})  # fx names it double_1
    expected = model(X, double=True)
    for got in (cut(X), cut(X, True), cut(x=X, double=True)):
        torch.testing.assert_close(got, expected)
    with pytest.raises(FixedArgumentError, match="traced with double=True"):
        cut(X, double=False)
