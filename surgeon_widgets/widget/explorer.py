"""Explorer: the model tree and live statistics of selected layers, as an anywidget.

Traits, public API and wiring of the rooms (:mod:`.views`, :mod:`.live`, :mod:`.wire`,
:mod:`.runtime`); traits and messages follow ``js/PROTOCOL.md``. A click's path: the comm
message reaches the kernel (:mod:`.runtime.kernel_comms`: our subshell, or drained mid-cell)
-> ``Explorer.set_state``, routed by :class:`.runtime.traits.ViewState` into the
:class:`~.runtime.handover.Handover` inbox -> ipywidgets' ``set_state`` sets the trait on the
model's thread (at once there, else at its next forward or when the cell
ends) -> :meth:`Explorer._selection_changed` -> :meth:`.live.selection.SelectionHooks.sync`
(clock, activations, gradients, attention, parameters) -> ``hooks``, written once.
A click that needs a trace (graph nodes, a cut's report and code) hands it to
:meth:`~.runtime.handover.Handover.later`: it runs on the main thread between forwards, at
once there, else when the running cell ends (or at once when the kernel is idle); the view
says ``TRACING`` (a note) meanwhile, and the cut panel shows its report as being recomputed.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Any

import traitlets as t
from matplotlib.figure import Figure
from torch import nn

from ..engine.naming import closest
from ..engine.tracing import ExampleInputs
from ..engine.wrappers import unwrap
from ..record.run_log import RunLog
from . import still_display
from .front_end import FrontEnd
from .history import History, NonFinite, Record, Series
from .live.recompile_status import COMPILING, RecompileStatus, weakly
from .live.selection import Selection, SelectionHooks, compile_note, meta_ran, resolve
from .runtime import hook_guards, notebook, ownership
from .runtime.eager_steps import available as eager_only
from .runtime.handover import Handover, messages_on_model_thread
from .runtime.kernel_comms import connect, main_loop_scheduler
from .runtime.shown import ShownLater
from .runtime.still_output import StillOutput
from .runtime.traits import ViewState
from .snapshot import Still, render_still, still_bundle
from .views import tree
from .views.attention_figure import attention_figure
from .views.attention_tokens import normalize_tokens
from .views.cut_panel import CutPanel, Marks, NameMap
from .views.errors import ErrorList
from .views.figures import history_figure
from .views.tree_panel import TreePanel
from .wire import code_message, fit_budget, history_snapshot, insert_result, stats_message

__all__ = ["Explorer"]

# Traits the browser changes whose observers touch the model: run on the model's thread.
HANDED_OVER = frozenset(
    {"selected", "gradients", "max_rate", "show_nodes", "node_in", "node_out", "param_layers"}
)
HELLO = frozenset({"hello"})  # read-only: answered at once, on any thread
BUTTONS = {"remove_all_hooks": "remove_all_hooks", "clear_errors": "clear_errors",
           "cut_apply_fix": "apply_fix"}  # the view's messages -> the method they call  # fmt: skip
TRACING = (
    "tracing... (graph nodes and the cut need a trace of the model: it runs between your "
    "forwards, when the running cell ends)"
)
OPTIONS = [
    "example_inputs", "selected", "gradients", "max_rate", "show_nodes", "params", "run_dir",
]  # fmt: skip


class Explorer(ShownLater, FrontEnd):
    """Browse ``model``'s modules and watch live statistics of the layers you select.

    Every forward your own code runs updates the selected layers' histogram, mean, std,
    min/max, zeros and NaN/Inf counts (their gradients when a backward runs, unless
    ``gradients=False``; their own
    weights with ``params=True`` or ``param_layers``; ``nonfinite``: where values first went
    NaN / Inf, the first entry where they broke), at most ``max_rate`` times a second per
    layer within ~2% of wall time (:mod:`.live.throttle`). ``close()``, a newer Explorer on the
    same model, or garbage collection removes the hooks (:mod:`.runtime.shown`: what keeps one).

    Args:
        model: any ``nn.Module``, also ``torch.compile``'d or on the meta device.
        example_inputs: a tensor, tuple of args or dict of kwargs: output shapes, graph nodes.
        selected, gradients, max_rate, show_nodes: initial values of those traits.
        params: every selected layer also shows its own parameters (``param_layers``).
        run_dir: a new folder to write every record into as it comes, in the Recorder's format:
            ``read_run(run_dir)`` and ``Explorer.from_run(run_dir)`` show it after the kernel is
            gone. Without it nothing is written.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
        >>> ex = Explorer(model, max_rate=0)
        >>> ex.select(["0"])
        >>> _ = model(torch.ones(2, 4))
        >>> ex.stats("0")["0/output"].latest.shape, [h["kind"] for h in ex.hooks]
        ((2, 3), ['forward', 'gradient'])
        >>> _ = model(torch.full((2, 4), float("nan")))
        >>> ex.nonfinite  # the first NaN / Inf record of each key, oldest first
        [NonFinite(layer='0', key='0/output', step=1, nans=6, infs=0)]
        >>> ex.close()
    """

    max_rate = t.Float(10.0).tag(sync=True)
    errors = t.List(t.Dict()).tag(sync=True)
    notes = t.List(t.Unicode()).tag(sync=True)
    status = t.Unicode("").tag(sync=True)  # COMPILING, or "recompiling, ~N s" until a record
    compiling = t.Bool(False).tag(sync=True)  # the model's first torch.compile is running
    replaced = t.Unicode("").tag(sync=True)
    clicks = t.Unicode("").tag(sync=True)  # how clicks reach a running cell: see kernel_comms
    closed = t.Bool(False).tag(sync=True)
    param_layers = t.List(t.Unicode()).tag(sync=True)
    node_in = NameMap().tag(sync=True)
    node_out = NameMap().tag(sync=True)
    cut_report = t.Dict().tag(sync=True)
    code = t.Unicode("").tag(sync=True)
    nonfinite = t.List(t.Instance(NonFinite)).tag(sync=True)  # first NaN / Inf of each key
    no_values = t.Dict().tag(sync=True)  # layer -> why no statistics will come (meta device)
    param_notes = t.Dict().tag(sync=True)  # layer -> why its "parameters" box is off
    snapshot = t.Dict().tag(sync=True)  # what the panels show, for a notebook with no kernel
    reopen_hint = "make a new one, Explorer(model)"

    def __init__(
        self,
        model: nn.Module,
        example_inputs: ExampleInputs = None,
        *,
        selected: list[str] | None = None,
        gradients: bool = True,
        max_rate: float = 10.0,
        show_nodes: bool = False,
        params: bool = False,
        run_dir: str | Path | None = None,
        **unknown: Any,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Explorer needs an nn.Module, got {type(model).__name__}")
        for key in unknown:
            hint = closest(key, OPTIONS)
            tail = f"did you mean {hint[0]!r}?" if hint else f"it takes {OPTIONS}"
            raise TypeError(f"Explorer got an unknown argument {key!r}; {tail}")
        self._watched = model  # what the user calls: the root of a step (a compiled wrapper)
        model = self._model = unwrap(model)  # names, hooks and traces: the model's own
        # compiled as a whole: recorded forwards run eagerly, hooked for that call only (so no
        # hook meets compiled code) and the model's call applies clicks itself; else dynamo
        # sees our hooks while this Explorer lives
        compiled = eager_only(self._watched)
        self._lease = hook_guards.Lease(None) if compiled else hook_guards.hold(model)
        ownership.release_when_collected(self, model, self._lease)  # hooks hold parts weakly
        self._tree = TreePanel(model, example_inputs)
        self._run_log = None if run_dir is None else RunLog(
            run_dir, self._tree.module_rows, type(model).__name__
        )  # before any hook: a folder that holds a run is refused with nothing attached
        if self._run_log is not None:
            weakref.finalize(self, self._run_log.close)  # collected or exiting: "finished"
        self._history = History()
        self._lock = threading.Lock()
        self._handover = Handover(
            self._watched, main_loop_scheduler(), hooked=not compiled, waiting=self._tracing
        )
        self._view_state = ViewState(HANDED_OVER, self._handover, self._set_state_now)
        self._errors = ErrorList(self._publish_errors)
        self._params_all = params  # every newly selected layer joins param_layers
        self._recompile = RecompileStatus()
        self._still = StillOutput(self._render_still, self._publish_still)
        self._live = SelectionHooks(
            self._watched, self._on_records, self._send_attention,
            self._errors.hook_failed, self._errors.add, self._note, max_rate,
            on_meta=lambda layer: self._no_values(layer, meta_ran(layer)),
            before=self._handover.at_forward, compiling=weakly(self._compile_running),
        )  # fmt: skip
        self._cut = CutPanel(
            model, example_inputs, lambda: Marks(self.node_in, self.node_out, self.selected),
            self._show_cut, lambda ok, message: self.send(*insert_result(ok, message)),
            notebook.user_namespace, notebook.shell,
        )  # fmt: skip
        self._undo_cell_end = notebook.on_cell_end(self._cell_ended)
        notes = [note for note in [compile_note(self._watched)] if note]
        super().__init__(
            rows=self._tree.module_rows, gradients=gradients, max_rate=max_rate, notes=notes
        )  # opens no comm: see runtime.shown
        self.observe(self._comm_opened, "comm")  # after ipywidgets' own observer of the comm
        self.observe(lambda change: self._view_state.superseded(change["name"]), HANDED_OVER)
        previous = ownership.claim(model, self)
        if previous is not None:
            previous._replaced_by_newer()
        try:
            self.on_msg(messages_on_model_thread(self._handover, self._on_msg, HELLO))
            self.shapes, error = self._tree.shapes()
            if error:
                self._errors.add(error)
            self.show_nodes = show_nodes
            if selected:
                self.select(selected)
            self._cut.refresh()
        except BaseException:  # e.g. a misspelt name in `selected`: leave nothing behind
            self._release()
            super().close()  # ipywidgets would keep the half-made widget for ever
            raise

    @classmethod
    def from_run(cls, path: str | Path, selected: list[str] | None = None, poll: float = 1.0):
        """A recorded run's tree, histograms and history, followed while it is written: a
        :class:`~surgeon_widgets.widget.run_view.RunView` (see ``surgeon_widgets.Recorder``)."""
        from .run_view import RunView

        return RunView(path, selected=selected, poll=poll)

    def select(self, names: str | list[str]) -> None:
        """Select layers by name (replacing the selection; ``[]`` deselects all);
        ``UnknownNameError`` for a name neither a layer nor a graph node (closest listed)."""
        names = [names] if isinstance(names, str) else list(names)
        self._tree.check(names)
        if self.read_only:
            raise RuntimeError(f"this Explorer is read-only: {self.read_only}")
        self.selected = names

    def stats(self, name: str) -> dict[str, Series]:
        """Latest values and history of layer ``name``: ``{key: Series}``, e.g. ``"fc/output"``
        (``.latest``: a ``TensorStats``; ``.steps`` / ``.values``: oldest first); ``{}`` before."""
        self._tree.check([name], nodes=False)
        return self._history.layer(name)

    def figure(self, name: str) -> Figure:
        """A matplotlib Figure of ``name``'s histogram history (heat strip) and latest histogram;
        ``ValueError`` while nothing was recorded for ``name`` (select it and run the model)."""
        series = self.stats(name)
        if not series:
            hint = "" if name in self.selected else f"select it (ex.select({name!r})), then "
            raise ValueError(f"no data for {name!r} yet: {hint}run a forward through the model")
        return history_figure(series, name)

    def set_tokens(self, tokens: Any, tokenizer: Any = None) -> None:
        """Label the attention heatmaps' axes (``None``: no labels) with a list of strings, one
        per batch item, or a tokenizer's output and the tokenizer: ``ex.set_tokens(enc, tok)``."""
        self._live.attention.set_tokens(normalize_tokens(tokens, tokenizer))

    def attention_figure(
        self, layer: str, head: int | None = None, batch: int = 0, scale: str = "range"
    ) -> Figure:
        """Matplotlib heatmap of ``layer``'s latest full-resolution attention pattern
        (``head=None``: mean of heads), in the widget's colours (``scale="fixed"``: 0-1);
        ``KeyError`` unless it is selected and ran since."""
        pattern, tokens = self._live.attention.shown(layer, batch)
        return attention_figure(pattern, layer, head, batch, tokens=tokens, scale=scale)  # type: ignore[arg-type]

    def submodel(self) -> Any:
        """``Extract(model, node_in, node_out, example_inputs=...)`` for the current cut;
        ``ValueError`` listing the problems of an invalid cut."""
        return self._cut.submodel()

    def apply_fix(self) -> None:
        """Add the cut report's suggested extra inputs to ``node_in`` (no-op without a fix)."""
        fixed = self._cut.with_fix(self.cut_report)
        if fixed is not None:
            self.node_in = fixed

    def to_cell(self) -> None:
        """Put ``code`` in a new cell below the running one (IPython's ``set_next_input``)."""
        self._cut.to_cell()

    def remove_all_hooks(self) -> None:
        """Deselect everything, which removes every hook of this widget (a read-only one has
        none left)."""
        if not self.read_only:
            self.selected = []

    def clear_errors(self) -> None:
        """Empty the error list (the view's "Clear" button does the same)."""
        self._errors.clear()

    def may_open(self) -> bool:  # a closed Explorer opens no comm (see runtime.shown)
        return not self.closed

    def close(self) -> None:
        """Remove every hook and drop the recorded data; the view stays as "Explorer closed".
        A second ``close()`` closes a shown Explorer's comm (one never shown: at once)."""
        if self.closed:
            self._release()
            super().close()
            return
        self.remove_all_hooks()
        self._release()
        self._history = History()
        self.nonfinite = []
        self.closed = True

    @property
    def read_only(self) -> str:
        """Why this Explorer takes no more changes ("": it does): a newer Explorer on its model
        replaced it (:mod:`.runtime.ownership`), or it was closed. Its view shows the reason."""
        return self.replaced or (ownership.CLOSED if self.closed else "")

    @t.validate(*ownership.FROZEN)
    def _writable(self, proposal: Any) -> Any:
        # also the view's changes: ipywidgets' set_state validates them when its hold ends
        if self.read_only:
            raise t.TraitError(f"{proposal['trait'].name} cannot change: {self.read_only}")
        return proposal["value"]

    def __repr__(self) -> str:
        head = self._head()
        if self.closed:
            return f"{head}, closed)"
        hooks, attention = len(self._live.activations.registry), len(self._live.attention.registry)
        return f"{head}, selected={self.selected!r}, hooks={hooks}, attention hooks={attention})"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict | tuple | None:
        if self.comm is None and self.closed:
            return None  # as ipywidgets shows a closed widget: its text repr
        still = self._render_still()
        self.snapshot = still.state
        return still_bundle(super()._repr_mimebundle_(), still)  # reads model_id: opens the comm

    def _ipython_display_(self, **kwargs: Any) -> None:
        """IPython shows the widget, then its picture as an output of its own that follows
        the data (``still_display``: what a notebook saved without widget state shows)."""
        if self.comm is None and self.closed:
            notebook.publish({"text/plain": repr(self)}, self._still.display_id)
            return
        picture = self._publish_still(self._render_still())
        bundle = super()._repr_mimebundle_()  # reads model_id: opens the comm
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle or {}, None)
        data = {**data, "text/plain": self._head() + ")"}
        widget = data if metadata is None else (data, metadata)
        self._still.show(widget, picture, still_display.marker_bundle())

    def _head(self) -> str:
        return f"Explorer({type(self._model).__name__}, {len(self._tree.layers)} layers"

    def _render_still(self) -> Still:  # any thread: see runtime.still_output
        chosen = set(self.selected)
        layers = [r["name"] for r in self._tree.module_rows if r["name"] in chosen]  # as panels
        return render_still(self._history, layers, self._live.attention.maps(layers), self._head())

    def _publish_still(self, still: Still) -> dict:
        self.snapshot = still.state
        return still_display.picture_bundle(still.png, still.text)

    def _send_attention(self, content: dict, buffers: list[bytes]) -> None:
        self.send(content, buffers)
        self._shown_changed()

    def _shown_changed(self) -> None:
        if self.comm is not None and not self.closed:  # shown: its picture and snapshot follow
            self._still.changed()

    def set_state(self, sync_data: dict) -> None:
        """The view's changes: those of ``HANDED_OVER`` traits apply on the model's thread
        (:mod:`.runtime.traits`); a value the trait refuses (``max_rate=-3``) is shown, not
        only logged."""
        if self.read_only:  # refused at once (_writable): nothing to hand over
            self._set_state_now(sync_data)
            return
        self._view_state.set_state(sync_data)
        waits = "selected" in sync_data and "selected" in self._view_state.waiting
        if waits and not (self.node_in or self.node_out):
            # the model's thread is busy (a running cell, a compile): the code box shows the
            # selection's code now; the names alone make it, nothing of the model is read
            names = [str(n) for n in sync_data["selected"] or []]
            self.send(*code_message(names, self._cut.selection_code(names)))

    def _set_state_now(self, sync_data: dict) -> None:
        try:
            super().set_state(sync_data)
        except t.TraitError as error:
            self._errors.add(f"refused from the view: {error}", detail=repr(sync_data))
            self.send_state(list(sync_data))  # the view goes back to the valid value

    def _comm_opened(self, change: Any) -> None:
        if change["new"] is not None:  # clicks reach this comm while a cell runs
            self.clicks = connect(self, self._handover)

    @t.validate("max_rate")
    def _valid_rate(self, proposal: Any) -> float:
        rate = float(proposal["value"])
        if not rate >= 0:
            raise t.TraitError(f"max_rate must be >= 0 (0 = every forward), got {rate}")
        return rate

    @t.observe("max_rate")
    def _rate_changed(self, change: Any) -> None:
        self._live.throttle.max_rate = change["new"]

    @t.observe("selected", "gradients", "param_layers")
    def _selection_changed(self, change: Any) -> None:
        """The one place a selection change reaches the hooks (see the click path above)."""
        tree = self._tree
        layers, messages = resolve(self.selected, tree.layers, tree.node_names(), self._watched)
        for message in messages if change["name"] != "param_layers" else ():
            self._errors.add(message)
        joined = self._params_all and change["name"] == "selected"
        added = [n for n in layers if n not in set(change["old"] or ())] if joined else []
        params = self._live.params_of(self.param_layers, layers, added)
        self.param_notes = self._live.params_notes(layers)
        if params != self.param_layers:
            self.param_layers = params  # observed again: that call attaches
            return
        selection = Selection(tuple(layers), self.gradients, tuple(params))
        self.hooks = self._live.sync(selection, in_forward=self._handover.in_forward)
        if layers and self._live.recompiles:
            self.status = self._recompile.changed()
        self._shown_changed()

    @t.observe("node_in", "node_out", "selected")
    def _cut_changed(self, change: Any) -> None:
        if self.node_in or self.node_out:  # a report needs the model's trace
            self._handover.later("cut", self._cut.refresh)
        else:
            self._handover.drop("cut")
            self._cut.refresh()  # no cut: only the selection's code, no trace

    def _show_cut(self, report: dict, code: str) -> None:
        self.cut_report, self.code = report, code

    @t.observe("show_nodes")
    def _nodes_toggled(self, change: Any) -> None:
        if change["new"]:
            self._handover.later("show_nodes", self._show_rows)  # graph nodes need a trace
        else:
            self._handover.drop("show_nodes")
            self._show_rows()

    def _show_rows(self) -> None:
        show = self.show_nodes  # as it is now: a later click may have switched it back
        rows, error = self._tree.rows(show)
        if error or show:
            self.nodes_error = error  # shown in the tree
        if not error:  # else the module rows stay, usable
            self.rows = rows

    def _tracing(self, waiting: bool) -> None:
        if waiting:
            self._note(TRACING)
        elif TRACING in self.notes:
            self.notes = [n for n in self.notes if n != TRACING]

    def _on_records(self, records: list[Record]) -> None:
        if self.status:
            self.status = self._recompile.recorded()
        bad = self._located()
        for record in records:
            bad = bool(self._history.add(record)) or bad  # a key's first NaN / Inf
            if self._run_log is not None:
                r = record
                self._run_log.add(r.key, r.layer, r.leaf, r.kind, r.step, r.stats, r.training)
        if bad:
            self.nonfinite = self._history.nonfinite()
        first = records[0]
        if first.kind == "activation":
            seen = tree.seen_shape(
                self.shapes, first.layer, list(first.stats.shape), first.stats.dtype
            )
            if seen is not None:
                self.shapes = seen
        self.send(*stats_message(fit_budget(records), self._history))
        self._shown_changed()

    def _compile_running(self, running: bool) -> None:
        """The model's first compile started or ended (on the model's thread, in its call)."""
        if self.closed:
            return
        if running:
            self.status = COMPILING
        elif self.status == COMPILING:
            self.status = ""
        self.compiling = running

    def _located(self) -> bool:
        """Was the first non-finite value located just now (:mod:`.live.nonfinite`'s flags
        of every module, one small transfer at an update or a cell's end)?"""
        origin = self._live.nonfinite.read()
        return origin is not None and self._history.locate(origin)

    def _cell_ended(self) -> None:
        if not self.closed and self._located():
            self.nonfinite = self._history.nonfinite()

    def _publish_errors(self, entries: list[dict]) -> None:
        with self._lock:
            self.errors = entries

    def _no_values(self, layer: str, why: str) -> None:
        if self.no_values.get(layer) != why:
            self.no_values = {**self.no_values, layer: why}

    def _note(self, note: str) -> None:
        self.notes = list(dict.fromkeys([*self.notes, note]))  # each note once

    def _on_msg(self, widget: Any, content: Any, buffers: Any) -> None:
        """The view's messages (``js/PROTOCOL.md`` "Messages"), each to the room it is for."""
        kind = content.get("type") if isinstance(content, dict) else None
        if kind != "hello" and self.read_only:  # a read-only view's buttons are off too
            return
        if kind == "hello":  # a new view: everything it missed
            self.send(*history_snapshot(self._history))
            self._live.attention.resend()
        elif kind == "insert_cell":
            self._cut.insert_cell(str(content.get("code", self.code)))
        elif kind == "attention_batch":
            self._live.attention.on_msg(content)
        elif kind in BUTTONS:
            getattr(self, BUTTONS[kind])()

    def _release(self) -> None:
        self._undo_cell_end()
        self._still.close()
        self._remove_hooks()
        ownership.release(self._model, self)

    def _remove_hooks(self) -> None:
        self._live.close()
        self._handover.close()
        self._lease.release()  # no hook of ours left for dynamo to guard
        if self._run_log is not None:
            self._run_log.close()

    def _replaced_by_newer(self) -> None:
        """A newer Explorer took this model over: remove every hook, say so, keep the history."""
        self._remove_hooks()
        self.replaced = ownership.REPLACED
        self.hooks = []

