"""The runtime doors' fallbacks: each private API the widget uses, forced missing."""

from __future__ import annotations

import threading
import types

import pytest
import torch
import traitlets as t
from torch import nn

from surgeon_widgets.widget.runtime import compiled, hook_guards, kernel_comms, notebook
from surgeon_widgets.widget.runtime.traits import ViewState


class Box(t.HasTraits):
    size = t.Int(0)


class Inbox:
    def __init__(self) -> None:
        self.posted: list[str] = []

    def post(self, key, apply, value) -> None:
        self.posted.append(key)
        apply(value)


def test_view_changes_of_chosen_traits_go_through_the_inbox_with_public_apis_only():
    """No traitlets dispatch is replaced: the widget's own ``set_state`` routes the view's
    values; observers of a chosen trait run when the inbox applies it, the others at once."""

    class Widget(Box):
        label = t.Unicode("")

        def set_state(self, sync_data):
            ViewState({"size"}, inbox, self.apply).set_state(sync_data)

        def apply(self, sync_data):
            with self.hold_trait_notifications():
                for name, value in sync_data.items():
                    setattr(self, name, value)

    waiting: list = []

    class Later(Inbox):
        def post(self, key, apply, value) -> None:
            self.posted.append(key)
            waiting.append(lambda: apply(value))

    inbox, seen = Later(), []
    box = Widget()
    box.observe(lambda change: seen.append(change["name"]), ["size", "label"])
    assert "_notify_observers" not in vars(box)
    box.set_state({"size": 2, "label": "x"})
    assert (box.size, box.label, seen, inbox.posted) == (0, "x", ["label"], ["view state"])
    waiting.pop()()  # the model's thread applies it
    assert box.size == 2 and seen == ["label", "size"]


def test_notebook_fallbacks_and_a_shell():
    assert notebook.shell(modules={}) is None
    assert dict(notebook.user_namespace(modules={})) == {}
    assert notebook.in_marimo(modules={}) is False
    shell = types.SimpleNamespace(user_ns={"net": 1})
    ipython = types.SimpleNamespace(get_ipython=lambda: shell)
    assert notebook.shell(modules={"IPython": ipython}) is shell
    assert notebook.user_namespace(modules={"IPython": ipython}) == {"net": 1}
    broken = types.SimpleNamespace(running_in_notebook=lambda: 1 / 0)
    assert notebook.in_marimo(modules={"marimo": broken}) is False


def test_compiled_wrapper_found_without_dynamo_class():
    model = nn.Linear(2, 2)
    wrapped = torch.compile(model)
    assert compiled.WRAPPER is not None
    assert compiled.is_compiled(wrapped, wrapper=None) and not compiled.is_compiled(model, None)
    assert compiled.is_compiled(wrapped) and not compiled.is_fullgraph(wrapped)


def test_hook_guards_lease_changes_nothing_without_the_option():
    before = torch._dynamo.config.skip_nnmodule_hook_guards
    held = hook_guards.holders()
    lease = hook_guards.hold(nn.Linear(2, 2), config=None)
    assert hook_guards.holders() == held
    assert torch._dynamo.config.skip_nnmodule_hook_guards == before
    lease.release()
    assert hook_guards.holders() == held


def test_hooks_record_under_compile_without_dynamos_frame_strategy(monkeypatch):
    """Without ``set_code_exec_strategy`` dynamo may compile the hook's own frame (more
    compiles, same values): the hook still sees every output, eagerly."""
    monkeypatch.setattr(compiled, "_skip_frames", lambda: None)
    torch._dynamo.reset()
    seen: list[torch.Tensor] = []
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    handle = model[0].register_forward_hook(
        compiled.compile_safe(lambda module, args, out: seen.append(out.detach().clone()))
    )
    try:
        x = torch.randn(2, 4)
        torch.compile(model, backend="eager")(x)
        assert len(seen) == 1 and torch.allclose(seen[0], model[0](x))
    finally:
        handle.remove()
        torch._dynamo.reset()


def test_forget_compiled_resets_everything_without_the_per_code_reset(monkeypatch, caplog):
    """Without dynamo's per-code reset, ``forget_compiled`` drops all compiled code (``-1``)."""
    import torch._C._dynamo.eval_frame as c_eval_frame

    model = nn.Linear(2, 2)
    compiled_model = torch.compile(model, backend="eager")
    compiled_model(torch.ones(1, 2))
    monkeypatch.delattr(c_eval_frame, "reset_code")
    reset: list[bool] = []
    monkeypatch.setattr(torch.compiler, "reset", lambda: reset.append(True))
    with caplog.at_level("WARNING", logger="surgeon_widgets.explorer"):
        assert hook_guards.forget_compiled(model) == -1
    assert reset == [True] and "resetting all compiled code" in caplog.text
    torch._dynamo.reset()


def _drifted(monkeypatch, entry, wrong):
    """``entry`` found, but answering as ``wrong``: its probe's one warning is expected."""
    from surgeon_widgets.engine.torch_internals import TorchInternalWarning

    monkeypatch.setattr(entry, "find", lambda: wrong)
    return pytest.warns(TorchInternalWarning, match="does not mean what it did")


def test_fullgraph_is_found_on_wrappers_and_parts_compiled_in_place(monkeypatch):
    monkeypatch.setattr(compiled.FULLGRAPH, "find", compiled.FULLGRAPH.find)  # probed afresh
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    model[0].compile(fullgraph=True)
    model[2].compile()
    assert compiled.is_fullgraph(torch.compile(model, fullgraph=True))
    assert not compiled.is_fullgraph(torch.compile(model))
    assert compiled.fullgraph_parts(model) == ["0"] and compiled.FULLGRAPH.available


def test_fullgraph_probe_catches_a_wrapper_that_no_longer_says_so(monkeypatch):
    """dynamo keeps ``fullgraph`` elsewhere: ours would read "not fullgraph" and hook a model
    whose forward must not break. The probe sees it; every compiled model counts as
    fullgraph (nothing recorded live there), said once."""
    reads = (lambda model: False, compiled._call_fullgraph)  # the wrapper's flag is gone
    with _drifted(monkeypatch, compiled.FULLGRAPH, reads) as said:
        assert compiled.is_fullgraph(torch.compile(nn.Linear(2, 2)))
        assert compiled.is_fullgraph(torch.compile(nn.Linear(2, 2), fullgraph=True))
    assert len(said) == 1 and not compiled.is_fullgraph(nn.Linear(2, 2))


def test_fullgraph_probe_catches_a_closure_that_moved(monkeypatch):
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    model[2].compile()  # not fullgraph: the fallback takes it as fullgraph
    reads = (compiled._wrapper_fullgraph, lambda module: False)
    with _drifted(monkeypatch, compiled.FULLGRAPH, reads) as said:
        assert compiled.fullgraph_parts(model) == ["2"]
    assert len(said) == 1


def _kernel_making_subshell(name: str) -> types.SimpleNamespace:
    """A kernel whose shell channel thread makes subshell ``name`` (ipykernel 7's shape)."""
    manager = types.SimpleNamespace(_create_subshell=lambda: name, _on_recv_callback=None)
    loop = types.SimpleNamespace(add_callback=lambda fn: fn())
    return types.SimpleNamespace(
        shell_channel_thread=types.SimpleNamespace(_manager=manager, io_loop=loop)
    )


def test_subshell_probe_takes_the_note_when_its_thread_is_not_found(monkeypatch, caplog):
    """The hand-over tells the subshell's calls by its thread's name: an ipykernel that names
    the thread otherwise would run every click with cell events. The probe sees it once; the
    subshell is not used (clicks apply when the cell ends) and the log says so."""
    monkeypatch.setattr(kernel_comms, "_subshells", {})
    with caplog.at_level("WARNING", logger="surgeon_widgets.explorer"):
        assert kernel_comms._own_subshell(_kernel_making_subshell("abc")) is None
        assert kernel_comms._own_subshell(_kernel_making_subshell("abc")) is None  # once
    assert caplog.text.count("runs on no thread named subshell-abc") == 1


def test_subshell_probe_passes_on_the_subshells_own_thread(monkeypatch):
    monkeypatch.setattr(kernel_comms, "_subshells", {})
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="subshell-abc", daemon=True)
    thread.start()
    try:
        assert kernel_comms._own_subshell(_kernel_making_subshell("abc")) == "abc"
    finally:
        stop.set()
        thread.join()
