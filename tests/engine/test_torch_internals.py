"""The door to torch's private APIs: each missing one degrades one feature, with a warning.

Every test makes one lookup fail (``entry.find`` replaced; monkeypatch puts it back, and the
next use looks the real one up again), then sees the feature's degraded behaviour and the
warning that names the API and says what degrades.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import fx, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.checkpoint import checkpoint

from surgeon_widgets import Extract, Recorder, read_run
from surgeon_widgets.engine import guard
from surgeon_widgets.engine import torch_internals as door
from surgeon_widgets.engine.attention.intercept import AttentionRecorder
from surgeon_widgets.engine.inspect import snapshot
from surgeon_widgets.engine.tracing import trace

ROOT = Path(__file__).resolve().parents[2]


def _gone() -> None:
    raise AttributeError("renamed in this torch")


@pytest.fixture
def missing(monkeypatch):
    """``missing(entry)``: this torch lacks ``entry``; returns the ``pytest.warns`` to expect."""

    def make(entry: door.Internal) -> pytest.WarningsRecorder:
        monkeypatch.setattr(entry, "find", _gone)
        return pytest.warns(door.TorchInternalWarning, match=f"{entry.name} is missing")

    return make


@pytest.fixture
def drifted(monkeypatch):
    """``drifted(entry, wrong)``: this torch has ``entry`` but it now answers as ``wrong``
    does; returns the ``pytest.warns`` to expect (the probe's)."""

    def make(entry: door.Internal, wrong: object) -> pytest.WarningsRecorder:
        monkeypatch.setattr(entry, "find", lambda: wrong)
        return pytest.warns(door.TorchInternalWarning, match=f"{entry.name} does not mean")

    return make


def test_every_entry_is_found_in_this_torch():
    assert [e.name for e in door.ENTRIES if not e.available] == []


def test_a_missing_entry_warns_once_and_names_what_degrades(missing):
    with missing(door.GRAPH_TASK_ID) as seen:
        assert door.GRAPH_TASK_ID.get() is door.GRAPH_TASK_ID.fallback
        door.GRAPH_TASK_ID.get()  # looked up once: no second warning
    assert len(seen) == 1 and door.GRAPH_TASK_ID.degraded in str(seen[0].message)
    assert not door.GRAPH_TASK_ID.available


def test_fx_tracing_missing_leaves_the_proxy_check(missing):
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append((guard.tracing(), guard.inert(x)))
            return x + 1

    fx.symbolic_trace(Probe())
    with missing(door.FX_TRACING):
        fx.symbolic_trace(Probe())
    assert seen == [(True, True), (False, True)]  # degraded: not seen as tracing; Proxy still


def test_fx_tracing_probe_catches_a_flag_torch_no_longer_sets(drifted):
    """torch sets the flag under another key (or in a ContextVar): ours would read "not
    tracing" forever. The probe sees it at first use; one warning; the Proxy check stays."""
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append((guard.tracing(), guard.inert(x)))
            return x + 1

    renamed = door._thread_flag("torch.fx._symbolic_trace._is_fx_tracing_tls", "gone", False)
    with drifted(door.FX_TRACING, renamed) as said:
        fx.symbolic_trace(Probe())
        fx.symbolic_trace(Probe())
    assert seen == [(False, True), (False, True)] and len(said) == 1
    assert door.FX_TRACING.get() is door.FX_TRACING.fallback


def test_fx_tracing_probe_catches_a_flag_that_reads_another_type(drifted):
    with drifted(door.FX_TRACING, lambda: "tracing"):
        assert not guard.tracing()  # the fallback: never tracing by the flag


def test_fx_tracing_probe_runs_no_trace_and_patches_nothing(monkeypatch):
    """The probe stops fx's tracer before it patches ``nn.Module.__call__`` (process-wide)."""
    calls, original = [], nn.Module.__call__
    real = door._thread_flag("torch.fx._symbolic_trace._is_fx_tracing_tls", "flag", False)

    def flag() -> bool:
        calls.append(nn.Module.__call__ is original)
        return real()

    assert door._probe_fx_tracing(flag) is True
    assert calls and all(calls)  # never read while Module.__call__ was patched


def test_fx_tracing_probe_inside_the_users_trace_waits_for_a_later_use(monkeypatch):
    real = door.FX_TRACING.find
    monkeypatch.setattr(door.FX_TRACING, "find", real)  # looked up afresh
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append((guard.tracing(), door.FX_TRACING.looked_up))
            return x

    fx.symbolic_trace(Probe())  # the first use is inside the user's trace: not decided there
    Probe()(torch.ones(1))  # decided at the next use, outside
    assert seen == [(True, False), (False, True)] and door.FX_TRACING.available


def test_functorch_probe_catches_a_check_that_never_sees_vmap(drifted):
    def probe(x):
        return x * guard.tracing()

    with drifted(door.FUNCTORCH_ACTIVE, lambda: False) as said:
        assert torch.func.vmap(probe)(torch.ones(2, 3)).sum() == 0  # the fallback's answer
        assert torch.func.vmap(probe)(torch.ones(2, 3)).sum() == 0
    assert len(said) == 1 and door.FUNCTORCH_ACTIVE.get() is door.FUNCTORCH_ACTIVE.fallback


@pytest.mark.parametrize(
    ("entry", "wrong"),
    [(door.MAY_HAVE_FAKE_MODE, lambda: False), (door.MAY_BE_WRAPPED, lambda t: False)],
)
def test_cheap_check_probes_catch_a_shortcut_that_hides_fakes(drifted, entry, wrong):
    """A shortcut that answers "surely not" when it should not: the probe drops it, and the
    guard asks torch's full checks (slower, the same answers)."""
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.ones(2))
    with drifted(entry, wrong) as said:
        with FakeTensorMode():
            assert guard.tracing()
        assert guard.inert(fake) and not guard.inert(torch.ones(2))
        doubled = torch.func.vmap(lambda x: x * (1 + guard.inert(x)))(torch.ones(2, 3))
        assert doubled.sum() == 12  # vmap's values are inert too
    assert len(said) == 1 and entry.get() is entry.fallback


def test_lazy_clone_probe_catches_a_clone_that_is_not_a_copy(drifted):
    with drifted(door.LAZY_CLONE, lambda t: t.view_as(t)) as said:  # shares the memory
        t = torch.tensor([-1.0, 2.0])
        kept = snapshot(t)
        t.relu_()
    assert kept.tolist() == [-1.0, 2.0] and len(said) == 1
    assert door.LAZY_CLONE.get() is torch.clone


def test_probes_wait_under_the_users_torch_mode(monkeypatch):
    """Under the user's own mode the probes' ops would be the mode's to see: not run there."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(door.LAZY_CLONE, "find", door.LAZY_CLONE.find)  # looked up afresh
    with Count():
        door.LAZY_CLONE.get()(torch.ones(1))
    assert not door.LAZY_CLONE.looked_up and len(seen) <= 2  # the clone itself, no probe ops
    assert door.LAZY_CLONE.available and door.LAZY_CLONE.looked_up  # probed here, outside


def test_functorch_missing_hooks_see_vmap_as_eager(missing):
    def probe(x):
        return x * guard.tracing()

    assert torch.func.vmap(probe)(torch.ones(2, 3)).sum() == 6
    with missing(door.FUNCTORCH_ACTIVE):
        assert torch.func.vmap(probe)(torch.ones(2, 3)).sum() == 0  # degraded


def test_detect_fake_mode_missing_still_skips_fake_tensors(missing):
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.ones(2))
        assert guard.tracing()
        with missing(door.DETECT_FAKE_MODE):
            assert not guard.tracing()  # degraded: the active mode is not seen
            assert guard.inert(fake)  # the fake value still is


def test_is_fake_missing_fake_tensors_are_not_recognised(missing):
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.ones(2))
    assert guard.inert(fake)
    with missing(door.IS_FAKE):
        assert not guard.inert(fake)  # degraded


@pytest.mark.parametrize("entry", [door.MAY_HAVE_FAKE_MODE, door.MAY_BE_WRAPPED])
def test_the_cheap_checks_missing_give_the_same_answers(missing, entry):
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.ones(2))
    with missing(entry):
        assert not guard.inert(torch.ones(2)) and guard.inert(fake)
        with FakeTensorMode():
            assert guard.tracing()


def test_disable_torch_function_missing_outer_capture_sees_the_extra_call(missing):
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 3, 8)

    def nested() -> tuple[int, int]:
        outer, inner = [], []
        with AttentionRecorder(outer), AttentionRecorder(inner):
            mha(x, x, x, need_weights=False)
        return len(outer), len(inner)

    assert nested() == (1, 1)
    with missing(door.DISABLE_TORCH_FUNCTION):
        assert nested() == (2, 1)  # degraded: the inner recorder's weights call is counted


def test_lazy_clone_missing_snapshots_copy_at_once(missing):
    with missing(door.LAZY_CLONE):
        t = torch.tensor([-1.0, 2.0])
        kept = snapshot(t)
        t.relu_()
    assert kept.tolist() == [-1.0, 2.0]
    assert door.LAZY_CLONE.get() is torch.clone  # degraded: a plain clone


def test_pytree_missing_other_containers_are_leaves(missing):
    Pair = collections.namedtuple("Pair", "a b")
    t = torch.ones(2)
    assert snapshot(Pair(t, t)).a is not t  # torch's pytree knows namedtuples
    with missing(door.PYTREE):
        plain = snapshot((t, {"k": [t]}))
        assert plain[0] is not t and plain[1]["k"][0] is not t and plain[0].equal(t)
        assert snapshot(Pair(t, t)).a is t  # degraded: a namedtuple is one leaf, not cloned


def test_pytree_missing_extract_still_binds_plain_inputs(missing):
    class Branchy(nn.Module):  # control flow on a shape: fx fails, torch.export traces
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x, extra):
            y = self.fc(x)
            return y + extra["bias"] if x.dim() == 2 else y

    model = Branchy()
    x, extra = torch.randn(2, 4), {"bias": torch.randn(4)}
    with missing(door.PYTREE):
        cut = Extract(model, node_out="fc", example_inputs=(x, extra))
        assert torch.equal(cut(x, extra), model.fc(x))


def test_tracer_class_missing_a_pickled_extract_uses_fx_tracer(missing):
    import pickle

    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    with missing(door.TRACER_CLASS):
        cut = Extract(model, node_out="0")
        assert door.tracer_class(cut.graph) is None  # degraded: unknown, rebuilt with fx.Tracer
    x = torch.randn(1, 2)
    assert torch.equal(pickle.loads(pickle.dumps(cut))(x), model[0](x))


def test_codegen_missing_a_copied_graph_keeps_fx_default(missing):
    class Dicts(nn.Module):
        def forward(self, x):
            return x["p"] + x["q"]

    traced = trace(Dicts(), concrete_args={"x": {"p": fx.PH, "q": fx.PH}})

    def copied_source() -> str:
        graph = fx.Graph()
        graph.output(graph.graph_copy(traced.graph, {}))
        door.copy_codegen(traced.graph, graph)
        return graph.python_code("self").src

    assert "tree_flatten_spec" in copied_source()
    with missing(door.CODEGEN):
        assert "tree_flatten_spec" not in copied_source()  # degraded: fx's default calling


def test_graph_task_id_missing_checkpoint_recompute_counts_twice(missing, tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=False)

    model = Net()

    def calls(folder: Path) -> int:
        with Recorder(model, folder, layers=["inner.0"], every=1, gradients=False) as rec:
            model(torch.randn(3, 4, requires_grad=True)).sum().backward()
            rec.step()
        return read_run(folder).stats("inner.0")["inner.0/output"].latest.calls

    assert calls(tmp_path / "a") == 1
    with missing(door.GRAPH_TASK_ID):
        assert calls(tmp_path / "b") == 2  # degraded


def test_import_and_public_names_work_with_every_private_api_missing(tmp_path):
    """Importing looks nothing up (the private modules are even unimportable then); with every
    lookup failing, the public names still work, each missing API said once."""
    script = textwrap.dedent(
        """
        import sys, warnings
        import torch
        from torch import nn
        PRIVATE = ["torch._guards", "torch._subclasses", "torch._subclasses.fake_tensor",
                   "torch._dynamo", "torch.utils._pytree", "torch.utils._python_dispatch",
                   "torch.fx._symbolic_trace"]
        saved = {name: sys.modules.get(name) for name in PRIVATE}
        sys.modules.update(dict.fromkeys(PRIVATE))  # None: `import` of them fails
        import surgeon_widgets, surgeon_widgets.hooks
        names = {n: getattr(surgeon_widgets, n) for n in surgeon_widgets.__all__ if n != "Explorer"}
        from surgeon_widgets.engine.cut import analyze_cut, suggest_fix
        from surgeon_widgets.engine import torch_internals as door
        assert not [e.name for e in door.ENTRIES if e.looked_up], "looked up at import"
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module

        def gone():
            raise ImportError("renamed in this torch")

        for entry in door.ENTRIES:
            entry.find = gone
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
            x = torch.randn(2, 3, 8, 8)
            model(x)
            assert names["get_layers"](model) == ["0", "1", "2", "3"]
            assert "1" in names["get_nodes"](model)
            y, relu = names["Inspect"](model, layer="1")(x)
            assert torch.equal(relu, model[1](model[0](x)))
            cut = names["Extract"](model, node_out="1")
            assert torch.equal(cut(x), relu)
            assert analyze_cut(model, node_in="0", node_out="1").problems == ()
            class Attention(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

                def forward(self, t):
                    return self.attn(t, t, t, need_weights=False)[0]

            patterns = names["capture_attention"](Attention(), torch.randn(1, 3, 8), "attn")
            assert patterns["attn"].shape == (1, 2, 3, 3)
            class Branchy(nn.Module):  # fx fails on it: torch.export traces it
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 4)

                def forward(self, x, extra):
                    y = self.fc(x)
                    return y + extra["bias"] if x.dim() == 2 else y

            branchy, v, extra = Branchy(), torch.randn(2, 4), {"bias": torch.randn(4)}
            cut = names["Extract"](branchy, node_out="fc", example_inputs=(v, extra))
            assert torch.equal(cut(v, extra), branchy.fc(v))
            from surgeon_widgets.engine.stats import tensor_stats
            big = tensor_stats(torch.arange(1 << 16, dtype=torch.float32))
            assert (big.min, big.max, big.mean) == (0.0, 65535.0, 32767.5)
            rec = names["Recorder"](model, sys.argv[1], layers=["1"], every=1)
            model(x).sum().backward()
            rec.step()
            rec.close()
            assert names["read_run"](sys.argv[1]).stats("1")["1/output"].latest.calls == 1
        said = sorted({str(w.message).split(" is missing")[0] for w in seen
                       if w.category is door.TorchInternalWarning})
        assert said == sorted(e.name for e in door.ENTRIES if e.looked_up)
        print(said)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = eval(done.stdout.strip().splitlines()[-1])
    # every entry was needed and said; the job's store only by Recorders over 2+ ranks (below)
    assert sorted(e.name for e in door.ENTRIES if e is not door.DEFAULT_STORE) == said


def test_default_store_missing_leaves_the_recorders_board_blank(missing):
    import torch.distributed as dist

    from surgeon_widgets.record.peers import Board

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        board = Board(dist.group.WORLD)
        board.post(3)
        board.report("rank 1 failed")
        assert board.steps() == {0: 3} and board.failure() == "rank 1 failed"
        with missing(door.DEFAULT_STORE):
            blank = Board(dist.group.WORLD)
        blank.post(4)
        blank.report("lost")  # degraded: nobody learns it, the other ranks' collectives fail
        assert blank.steps() == {0: None} and blank.failure() is None
        assert "rank 0 is at rec.step() of step 4" in blank.waited_in_vain(4, RuntimeError("t"))
    finally:
        dist.destroy_process_group()
