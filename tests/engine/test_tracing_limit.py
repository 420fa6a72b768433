"""engine/tracing.py past ``DYNAMIC_TIME_LIMIT``: the dynamic export is aborted, the static
trace is used and says so, the cut works at the traced shapes and refuses others clearly, and
the model and the process are left as they were (the same real parameters, no markers on the
user's tensors, no modes, later traces as fast).
"""

from __future__ import annotations

import builtins
import math
import time
import warnings

import pytest
import torch
import transformers
from support.models import tiny_bert
from torch._subclasses.fake_tensor import FakeTensor

from surgeon_widgets import Extract, Inspect, get_nodes
from surgeon_widgets.engine import tracing
from surgeon_widgets.engine.calling import FixedArgumentError
from surgeon_widgets.engine.cut.analyze import analyze_cut

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def tiny_swin() -> transformers.SwinModel:
    config = transformers.SwinConfig(image_size=64, embed_dim=16, depths=[2, 2], num_heads=[2, 2])
    return transformers.SwinModel(config).eval()


def first(value):
    return value[0] if isinstance(value, (tuple, list)) else value


def layer0(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """What the model's first layer returns, seen by hooks (the oracle)."""
    with torch.no_grad():
        _, out = Inspect(model, "encoder.layer.0")(input_ids=ids)
    return first(out)


def real_state(model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    return {k: (v, v.detach().clone()) for k, v in model.state_dict(keep_vars=True).items()}


def assert_same_state(model: torch.nn.Module, before: dict) -> None:
    """The same tensor objects, real, equal bit for bit."""
    now = model.state_dict(keep_vars=True)
    assert now.keys() == before.keys()
    for key, (tensor, copy) in before.items():
        assert now[key] is tensor and not isinstance(tensor, FakeTensor), key
        assert torch.equal(tensor.detach().view(torch.uint8), copy.view(torch.uint8)), key


def markers(tensor: torch.Tensor) -> list[str]:
    return [name for name in vars(tensor) if name.startswith("_dynamo")]


def static_graph(traced: tracing.Trace) -> bool:
    """Every placeholder's traced size is a plain int (no symbolic dimension)."""
    vals = [n.meta.get("val") for n in traced.graph.nodes if n.op == "placeholder"]
    return all(isinstance(d, int) for v in vals if isinstance(v, torch.Tensor) for d in v.shape)


@pytest.fixture
def limit(monkeypatch):
    def set_limit(seconds: float | None) -> None:
        monkeypatch.setattr(tracing, "DYNAMIC_TIME_LIMIT", seconds)

    return set_limit


def test_past_the_limit_the_static_trace_is_used_and_says_why(limit):
    model, ids = tiny_bert(), torch.randint(0, 100, (1, 16))
    inputs = {"input_ids": ids}
    limit(0.05)  # the tiny BERT's dynamic export takes about a second
    state = real_state(model)
    functions = (builtins.min, builtins.max, math.pow)  # non-strict export swaps these
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cut = Extract(model, node_out="encoder.layer.0", example_inputs=inputs)
    note = cut.note
    assert "static shapes" in note and "took longer than 0.05 s" in note
    assert "tracing.DYNAMIC_TIME_LIMIT" in note and "example's shapes" in note
    traced = tracing.trace(model, example_inputs=inputs)  # the cached trace: same note
    assert traced.note == note and traced.method == "export" and static_graph(traced)
    assert analyze_cut(model, node_out="encoder.layer.0", example_inputs=inputs).note == note

    # nothing left behind: the model's own tensors, no dynamic markers on the user's tensor, no
    # mode, no swapped global
    assert_same_state(model, state)
    assert markers(ids) == []
    assert (builtins.min, builtins.max, math.pow) == functions
    assert torch.is_grad_enabled()
    assert torch._C._len_torch_function_stack() == 0 and torch._C._len_torch_dispatch_stack() == 0

    # the cut works at the traced shape, and refuses another with a clear error
    torch.testing.assert_close(first(cut(input_ids=ids)), layer0(model, ids))
    with pytest.raises(FixedArgumentError, match=r"'input_ids' has shape \(1, 24\)") as error:
        cut(input_ids=torch.randint(0, 100, (1, 24)))
    message = str(error.value)
    assert "fixed to shape (1, 16)" in message and "dimension 1 is 16" in message
    assert "took longer than 0.05 s" in message and "example_inputs=" in message


def test_within_the_limit_the_trace_stays_dynamic_and_fixes_only_size_one(limit):
    model, ids = tiny_bert(), torch.randint(0, 100, (1, 16))
    limit(120.0)
    cut = Extract(model, node_out="encoder.layer.0", example_inputs={"input_ids": ids})
    assert cut.note == ""
    longer = torch.randint(0, 100, (1, 24))
    torch.testing.assert_close(first(cut(input_ids=longer)), layer0(model, longer))  # it varies
    # an example of batch 1 makes torch.export fix the batch: said, not a shape mismatch deep inside
    with pytest.raises(FixedArgumentError, match=r"fixed to shape \(1, \*\).*size 1"):
        cut(input_ids=torch.randint(0, 100, (2, 16)))


def test_an_aborted_dynamic_trace_does_not_slow_later_traces(limit, monkeypatch):
    """Swin with symbolic heights and widths (the slow case: about a minute here) is aborted
    and keeps its own parameters; a static export of the same inputs afterwards takes as long
    as before the abort (before the fix, torch.export's markers left on the input made it
    symbolic: 88-195 s)."""
    model, pixels = tiny_swin(), torch.rand(1, 3, 64, 64)
    inputs = {"pixel_values": pixels}

    def static_export() -> float:  # CPU seconds: a busy machine does not change them much
        started = time.process_time()
        with torch.no_grad():
            tracing._export(model, (), inputs, None)
        return time.process_time() - started

    static_export()  # warm-up: the first export of a process pays for imports and caches
    before = min(static_export(), static_export())
    monkeypatch.setattr(tracing, "_cheap_dims", lambda value: list(range(value.dim())))
    limit(1.0)
    state = real_state(model)
    started = time.process_time()
    traced = tracing.trace(model, example_inputs=inputs)
    took = time.process_time() - started
    assert_same_state(model, state)
    assert "took longer than 1 s" in traced.note and static_graph(traced)
    assert took < 2 + 3 * before + 2  # aborted at a module call past 1 s, then one static trace
    assert markers(pixels) == []
    after = min(static_export(), static_export())
    assert after < 3 * before + 0.5, f"static export {before:.2f} s before, {after:.2f} s after"


def test_the_limit_is_read_at_each_trace_and_none_means_no_limit(limit):
    model, ids = tiny_bert(), torch.randint(0, 100, (1, 8))
    limit(0.0)
    assert "took longer than 0 s" in get_nodes_note(model, ids)
    tracing.clear_trace_cache(model)
    limit(None)
    assert get_nodes_note(model, ids) == ""


def get_nodes_note(model: torch.nn.Module, ids: torch.Tensor) -> str:
    get_nodes(model, example_inputs={"input_ids": ids})  # fills the shared cache
    return tracing.trace(model, example_inputs={"input_ids": ids}).note
