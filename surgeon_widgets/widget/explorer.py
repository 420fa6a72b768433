"""Explorer: the model tree and live statistics of selected layers, as an anywidget.

Traits and messages follow ``js/PROTOCOL.md``. The widget only holds state; the tree comes
from :mod:`.tree`, hooks from :mod:`.live`, wire encoding from :mod:`.transport`.
"""

from __future__ import annotations

import base64
import logging
import threading
import weakref
from pathlib import Path
from typing import Any

import traitlets as t
from matplotlib.figure import Figure
from torch import nn

from ..engine.naming import UnknownNameError, closest, split_call_suffix
from ..engine.tracing import ExampleInputs
from ..engine.wrappers import unwrap
from .front_end import FrontEnd
from .history import History, Record, Series
from .live.attention import AttentionView
from .live.hooks import LiveHooks
from .live.params import ParamWatch
from .live.steps import StepClock
from .runtime import hook_guards, ownership
from .runtime.compiled import compiled_parts, fullgraph_parts, is_compiled
from .runtime.handover import Handover, messages_on_model_thread
from .runtime.kernel_comms import connect, main_loop_scheduler
from .views import tree
from .views.attention_figure import attention_figure
from .views.attention_tokens import normalize_tokens
from .views.cut_panel import CutPanel
from .views.errors import ErrorList
from .views.figures import history_figure, static_png
from .wire import fit_budget, snapshot_message, stats_message

__all__ = ["Explorer"]

log = logging.getLogger("surgeon_widgets.explorer")
# Traits the browser changes whose observers touch the model: run on the model's thread.
HANDED_OVER = frozenset(
    {"selected", "gradients", "max_rate", "show_nodes", "node_in", "node_out", "param_layers"}
)
REPLACED = (
    "Replaced by a newer Explorer on this model: this one removed its hooks and stays frozen."
)
COMPILED = (
    "torch.compile: selected layers record through torch.compiler.disable, and selected "
    "attention layers run eagerly so that their maps can be recorded: a graph break at each; "
    "changing the selection recompiles the model (deselected, the graph is whole again)."
)
FULLGRAPH = (
    "torch.compile(fullgraph=True) allows no graph break, and recording a layer needs one, so "
    "nothing was attached (your forward would raise); compile without fullgraph=True to watch "
    "layers live."
)
META = (
    "meta tensors have no values: the model is on the meta device, so selected layers get no "
    "statistics. Build it on a real device (e.g. model.to_empty(device='cpu')) to see them."
)


class Explorer(CutPanel, FrontEnd):
    """Browse ``model``'s modules and watch live statistics of the layers you select.

    Every forward your own code runs updates the selected layers' histogram, mean, std,
    min/max, share of zeros and NaN/Inf counts (and their gradients with ``gradients=True``),
    at most ``max_rate`` times a second per layer and within ~2% of wall time (``max_rate=0``:
    every forward). A click made while your training cell runs takes effect at the model's next
    forward (``clicks``, set when the Explorer is first shown, says how it gets there:
    ``"subshell"``, ``"drain"``, or ``"note"``: only when the cell finishes), also while
    ``torch.compile(model)`` runs.

    What removes the hooks: deselecting, ``close()``, a newer Explorer on the same model, or
    the Explorer's garbage collection (nothing of the package keeps it alive). Its comm opens
    only when it is first shown (:meth:`open`), so one never shown (a script, a recording
    cell, an Explorer read through ``stats()``) is freed by ``del explorer`` once Python's
    cycle collector runs: ``gc.collect()``. Plain ``del`` is not enough (its parts and
    traitlets' observers refer back to it), and the automatic collector may not get to it for
    long (30 s of training did not). A shown Explorer is kept by ipywidgets 8 (in
    ``ipywidgets.widgets.widget._instances`` and its comm, so that a displayed widget with no
    name left still works after a page reload) and, when it was a cell's value, by IPython's
    ``Out`` history: call ``close()``.

    A step is one forward of ``model`` (shared by every layer, gradient and attention map;
    records also say train/eval), counted while any layer is selected: with nothing selected
    the Explorer puts no hook on the model (none for dynamo to break a later compile at), so
    forwards run then are not numbered. Forwards and traces the package runs itself are never
    recorded, and the hooks stay out of every trace (fx, export, fake / meta tensors). One live
    Explorer per model: a new one takes the model over and the older ones remove their hooks
    (``replaced`` says so). ``torch.compile(model)`` works: names are the model's own, and
    selected attention layers run eagerly to record their maps (``notes`` says so). While an
    Explorer lives, dynamo guards modules' hooks, so a selection change recompiles instead of
    being ignored (:mod:`.hook_guards`: your own setting comes back after the last one).

    Args:
        model: any ``nn.Module`` (a model on the meta device works: nothing is allocated).
        example_inputs: a tensor, a tuple of args or a dict of kwargs; used to show output
            shapes (one no-grad forward) and to trace models torch.fx cannot (graph nodes).
        selected, gradients, max_rate, show_nodes: initial values of those traits.
        params: also show each selected layer's own parameters (as ``wandb.watch``): weight
            histograms, their gradients after ``backward()`` and the update an optimizer step
            made (:mod:`.params`). Per layer: the ``param_layers`` trait (the panel's switch).

    Synced traits (types, defaults and wire form in ``js/PROTOCOL.md``): ``rows`` (the tree),
    ``shapes``, ``show_nodes``, ``nodes_error``, ``selected``, ``gradients``, ``max_rate``
    (10.0), ``hooks`` (active hooks), ``errors`` (merged readable entries, see
    :mod:`.errors`; ``clear_errors()``), ``notes``, ``replaced``, ``search``, ``clicks``,
    ``closed``, ``param_layers``; the cut panel's ``node_in``, ``node_out``, ``cut_report`` and
    ``code`` (see :mod:`.cut_panel`:
    ``submodel()``, ``apply_fix()``, ``to_cell()``).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
        >>> ex = Explorer(model, max_rate=0)
        >>> ex.select(["0"])
        >>> _ = model(torch.ones(2, 4))
        >>> ex.stats("0")["0/output"].latest.shape
        (2, 3)
        >>> ex.close()
    """

    max_rate = t.Float(10.0).tag(sync=True)
    errors = t.List(t.Dict()).tag(sync=True)
    notes = t.List(t.Unicode()).tag(sync=True)
    replaced = t.Unicode("").tag(sync=True)
    clicks = t.Unicode("").tag(sync=True)  # how clicks reach a running cell: see kernel_comms
    closed = t.Bool(False).tag(sync=True)
    param_layers = t.List(t.Unicode()).tag(sync=True)
    _constructed = False  # ipywidgets' __init__ calls open(): not yet (see open())

    def __init__(
        self,
        model: nn.Module,
        example_inputs: ExampleInputs = None,
        *,
        selected: list[str] | None = None,
        gradients: bool = False,
        max_rate: float = 10.0,
        show_nodes: bool = False,
        params: bool = False,
        **unknown: Any,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Explorer needs an nn.Module, got {type(model).__name__}")
        for key in unknown:
            options = [
                "example_inputs", "selected", "gradients", "max_rate", "show_nodes", "params",
            ]  # fmt: skip
            hint = closest(key, options)
            raise TypeError(
                f"Explorer got an unknown argument {key!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else f"; it takes {options}")
            )
        self._watched = model  # what the user calls: the root of a step (a compiled wrapper)
        model = self._model = unwrap(model)  # names, hooks and traces: the model's own
        self._lease = hook_guards.hold(model)  # dynamo sees our hooks while this Explorer lives
        # Collection removes the hooks (each HookRegistry's own weakref callback) and lets go of
        # the rest; nothing it registers holds the Explorer itself (hooks hold parts weakly).
        weakref.finalize(self, _collected, weakref.ref(model), self._lease).atexit = False
        self._example_inputs = example_inputs
        self._module_rows = tree.module_rows(model)
        self._layers = [r["name"] for r in self._module_rows]
        self._layer_set = frozenset(self._layers)
        self._node_rows: list[dict] | None = None
        self._history = History()
        self._lock = threading.Lock()
        self._handover = Handover(self._watched, main_loop_scheduler())
        self._errors = ErrorList(self._publish_errors)
        self._clock = StepClock(self._watched, attached=False)  # counts while layers are hooked
        self._live = LiveHooks(
            model, self._on_records, self._on_error, max_rate, clock=self._clock,
            on_meta=self._on_meta, on_failure=self._errors.hook_failed,
        )  # fmt: skip
        # Attention layers among the selected also get heatmaps; same max_rate throttle.
        self._attention = AttentionView(
            model,
            lambda content, buffers: self.send(content, buffers),
            self._on_error,
            lambda name: self._live.due((name, "attention")),
            cost=self._attention_cost,
            on_failure=self._errors.hook_failed,
            training=lambda: self._clock.training,
        )
        # params=True: every selected layer also shows its own weights (param_layers per layer)
        self._params_all = params
        self._params = ParamWatch(model, self._on_records, self._on_error, self._live.due)
        notes = [COMPILED] if is_compiled(self._watched) or compiled_parts(model) else []
        super().__init__(
            rows=self._module_rows, gradients=gradients, max_rate=max_rate, notes=notes
        )  # opens no comm: see open()
        self._constructed = True
        previous = ownership.claim(model, self)
        if previous is not None:
            previous._replaced_by_newer()
        try:
            self.on_msg(
                messages_on_model_thread(self._handover, self._on_msg, frozenset({"hello"}))
            )
            if example_inputs is not None:
                self._measure_shapes()
            self.show_nodes = show_nodes
            if selected:
                self.select(selected)
            self._cut_init()  # cut panel: node_in / node_out -> cut_report, code
        except BaseException:  # e.g. a misspelt name in `selected`: leave nothing behind
            self._release()
            super().close()  # ipywidgets would keep the half-made widget for ever
            raise

    @classmethod
    def from_run(
        cls, path: str | Path, selected: list[str] | None = None, poll: float = 1.0
    ) -> Any:
        """The tree, histograms and history of a recorded run, followed while it is written.

        Returns a :class:`~surgeon_widgets.widget.run_view.RunView` (``stats()``, ``figure()``,
        ``state``, ``last_step``, ``wait()``, ``close()``). See ``surgeon_widgets.Recorder``.
        """
        from .run_view import RunView

        return RunView(path, selected=selected, poll=poll)

    # -- Python API -------------------------------------------------------------------------

    def select(self, names: str | list[str]) -> None:
        """Select layers by name (replacing the selection); ``[]`` deselects all.

        Raises:
            UnknownNameError: a name is neither a layer nor a graph node (closest names listed).
        """
        names = [names] if isinstance(names, str) else list(names)
        valid = self._layer_set | {r["name"] for r in self._node_rows or ()}
        for name in names:
            if name not in valid:
                raise UnknownNameError(
                    name,
                    [*self._layers, *(r["name"] for r in self._node_rows or ())],
                    "layer",
                    "Hint: explorer.rows (or get_layers(model)) lists every valid name; "
                    "graph nodes are listed once show_nodes is on",
                )
        if self.closed:
            raise RuntimeError("this Explorer is closed: make a new one, Explorer(model)")
        self.selected = names

    def stats(self, name: str) -> dict[str, Series]:
        """Latest values and history of layer ``name``: ``{key: Series}``, e.g. ``"fc/output"``.

        ``series.latest`` is a :class:`~surgeon_widgets.engine.stats.TensorStats`;
        ``series.steps`` / ``series.values`` the history (oldest first). Empty until it ran.
        """
        self._check_name(name)
        return self._history.layer(name)

    def figure(self, name: str) -> Figure:
        """A matplotlib Figure of ``name``'s histogram history (heat strip) and latest histogram.

        Raises:
            ValueError: nothing was recorded for ``name`` yet (select it and run the model).
        """
        series = self.stats(name)
        if not series:
            hint = "" if name in self.selected else f"select it (ex.select({name!r})), then "
            raise ValueError(f"no data for {name!r} yet: {hint}run a forward through the model")
        return history_figure(series, name)

    def set_tokens(self, tokens: Any, tokenizer: Any = None) -> None:
        """Label the attention heatmaps' axes with these tokens (``None`` removes the labels).

        Args:
            tokens: a list of strings, one list per batch item, or a tokenizer's output
                (``input_ids``, 1-D or ``[batch, seq]``).
            tokenizer: for a tokenizer's output: the tokenizer, or a function ids -> tokens.

        Example: ``ex.set_tokens(enc, tokenizer)``, ``enc = tokenizer(text, return_tensors="pt")``.
        """
        self._attention.set_tokens(normalize_tokens(tokens, tokenizer))

    def attention_figure(self, layer: str, head: int | None = None, batch: int = 0) -> Figure:
        """Matplotlib heatmap of ``layer``'s latest full-resolution attention pattern.

        ``head=None`` shows the mean over heads. Same colormap as the widget's heatmap.

        Raises:
            KeyError: ``layer`` is not a selected attention layer that has run since.
        """
        pattern = self._attention.latest(layer)
        if pattern is None:
            raise KeyError(
                f"no attention pattern for {layer!r} yet: select one of "
                f"{self._attention.layers[:8]} and run the model"
            )
        tokens = self._attention.tokens
        row = tokens[batch] if tokens and batch < len(tokens) else tokens[0] if tokens else None
        return attention_figure(pattern, layer, head, batch, tokens=row)

    def remove_all_hooks(self) -> None:
        """Deselect everything, which removes every hook of this widget."""
        self.selected = []

    def clear_errors(self) -> None:
        """Empty the error list (the view's "Clear" button does the same)."""
        self._errors.clear()

    def open(self) -> None:
        """Open the comm to the front end, if not yet open; showing the Explorer does this.

        ipywidgets opens a widget's comm when it is made, which keeps the widget for the
        kernel's life (``ipywidgets.widgets.widget._instances`` and the comm's callback). An
        Explorer opens it only when a view needs it: its display, ``model_id`` (a ``Box``'s
        children, ``jslink``, embedding) or this call, so one never shown is freed by ``del``
        (and ``gc.collect()``). The view gets the whole state with the comm, and its history
        when it renders. A closed Explorer opens none.

        Example:
            >>> from torch import nn
            >>> ex = Explorer(nn.Linear(2, 2))
            >>> ex.comm is None  # not shown yet
            True
            >>> ex.open()
            >>> ex.comm.comm_id == ex.model_id
            True
            >>> ex.close(); ex.close()  # the view says "closed"; then the comm closes
        """
        if self.comm is None and self._constructed and not self.closed:
            super().open()

    @property
    def model_id(self) -> str:
        """The id of the widget's comm; asking for it opens the comm (see :meth:`open`)."""
        self.open()
        if self.comm is None:
            raise RuntimeError("this Explorer is closed: make a new one, Explorer(model)")
        return self.comm.comm_id

    @t.observe("comm")
    def _comm_changed(self, change: Any) -> None:
        super()._comm_changed(change)  # ipywidgets: its message handler, _instances
        if change["new"] is not None:  # clicks reach this comm while a cell runs
            self.clicks = connect(self, self._handover)

    def close(self) -> None:
        """Remove every hook and drop the recorded data; the view stays as "Explorer closed".

        A shown Explorer's comm stays open so the placeholder shows; a second ``close()``
        closes it. One never shown is closed at once, and a later display shows its text.
        """
        if self.closed:
            self._release()
            super().close()
            return
        self.selected = []
        self._release()
        self._history = History()
        self.closed = True

    def _release(self) -> None:
        self._remove_hooks()
        model = getattr(self, "_model", None)
        if model is not None:
            ownership.release(model, self)

    def _remove_hooks(self) -> None:
        for part in ("_live", "_attention", "_params", "_clock", "_handover"):
            hooks = getattr(self, part, None)
            if hooks is not None:
                hooks.close()
        lease = getattr(self, "_lease", None)
        if lease is not None:
            lease.release()  # no hook of ours left for dynamo to guard

    def _replaced_by_newer(self) -> None:
        """A newer Explorer took this model over: remove every hook, say so, keep the history."""
        self._remove_hooks()
        self.replaced = REPLACED
        self.hooks = []

    def __del__(self) -> None:
        super().close()  # as ipywidgets' own __del__ (not our close(): no trait changes here)

    def __repr__(self) -> str:
        if self.closed:
            return f"Explorer({type(self._model).__name__}, {len(self._layers)} layers, closed)"
        return (
            f"Explorer({type(self._model).__name__}, {len(self._layers)} layers, "
            f"selected={self.selected!r}, hooks={len(self._live.registry)}, "
            f"attention hooks={len(self._attention.registry)})"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict | tuple | None:
        if self.comm is None and self.closed:
            return None  # as ipywidgets shows a closed widget: its text repr
        bundle = super()._repr_mimebundle_(**kwargs)  # reads model_id: opens the comm
        rows = tree.filter_rows(self.rows, self.search)  # the view as the search box shows it
        layers = {n: self._history.layer(n) for n in self.selected if n in self._layer_set}
        png = static_png(rows, layers)
        data = base64.b64encode(png).decode("ascii")
        if isinstance(bundle, tuple):
            return {**bundle[0], "image/png": data}, bundle[1]
        return {**(bundle or {}), "image/png": data}

    # -- reacting to traits -----------------------------------------------------------------

    def _notify_observers(self, event: Any) -> None:
        # a click handled on a kernel subshell: observers run at the model's next forward
        handover = getattr(self, "_handover", None)
        if handover is None or event.get("name") not in HANDED_OVER:
            super()._notify_observers(event)
        else:
            handover.post(event["name"], super()._notify_observers, event)

    @t.validate("max_rate")
    def _valid_rate(self, proposal: Any) -> float:
        rate = float(proposal["value"])
        if not rate >= 0:
            raise t.TraitError(f"max_rate must be >= 0 (0 = every forward), got {rate}")
        return rate

    @t.observe("max_rate")
    def _rate_changed(self, change: Any) -> None:
        self._live.max_rate = change["new"]

    @t.observe("selected", "gradients")
    def _selection_changed(self, change: Any) -> None:
        if self.replaced:  # a newer Explorer owns the model now
            return
        modules = []
        for name in self.selected:
            if name in self._layer_set:
                modules.append(name)
            elif name in {r["name"] for r in self._node_rows or ()}:
                self._on_error(_node_message(name, self._layer_set))
            else:
                self._on_error(f"unknown layer {name!r} selected; it was ignored")
        sealed = fullgraph_parts(self._watched) if modules else []
        if sealed == [""]:
            self._on_error(FULLGRAPH)
            modules = []
        for part in sealed:
            refused = [n for n in modules if n == part or n.startswith(f"{part}.")]
            if refused:
                self._on_error(_sealed_message(part, refused))
                modules = [n for n in modules if n not in refused]
        if modules and COMPILED not in self.notes and compiled_parts(self._model):
            self.notes = [*self.notes, COMPILED]  # blocks compiled after the Explorer was made
        if modules:
            self._clock.attach(this_forward=self._handover.in_forward)  # a click mid-forward
        else:
            self._clock.close()
        self._live.sync(modules, self.gradients)
        self._attention.sync(modules)
        if modules and any(p.is_meta for p in self._model.parameters()):
            self._on_meta(modules[0])
        kinds = ["forward", "gradient"] if self.gradients else ["forward"]
        self.hooks = [{"name": n, "kind": k} for n in self._live.attached for k in kinds] + [
            {"name": n, "kind": "attention"} for n in self._attention.attached
        ]
        self._sync_params(modules, change)

    def _sync_params(self, modules: list[str], change: Any) -> None:
        """Keep ``param_layers`` within the selection; with ``params=True`` new layers join."""
        wanted = [n for n in self.param_layers if n in modules]
        if self._params_all and change["name"] == "selected":
            old = set(change["old"] or ())
            wanted += [n for n in modules if n not in old and n not in wanted]
        if wanted != self.param_layers:
            self.param_layers = wanted  # -> _params_changed
        else:
            self._params_changed(None)

    @t.observe("param_layers")
    def _params_changed(self, change: Any) -> None:
        watched = set(self.selected) & self._layer_set
        valid = [n for n in self.param_layers if n in watched and self._params.owns_params(n)]
        if valid != self.param_layers:  # e.g. a ReLU's switch: nothing of its own to show
            self.param_layers = valid
            return
        self._params.sync(valid)
        others = [h for h in self.hooks if h["kind"] != "parameters"]
        self.hooks = others + [{"name": n, "kind": "parameters"} for n in self._params.attached]

    @t.observe("show_nodes")
    def _nodes_toggled(self, change: Any) -> None:
        if change["new"] and self._node_rows is None:
            try:
                self._node_rows = tree.node_rows(self._model, self._example_inputs, self._layer_set)
                self.nodes_error = ""
            except Exception as error:  # shown in the tree; the module rows stay usable
                self._node_rows = None
                self.nodes_error = f"{type(error).__name__}: {error}"
                return
        if change["new"] and self._node_rows is not None:
            order = tree.execution_order(self._model, example_inputs=self._example_inputs)
            self.rows = tree.merge_rows(self._module_rows, self._node_rows, order)
        else:
            self.rows = self._module_rows

    # -- hooks and messages -----------------------------------------------------------------

    def _on_records(self, records: list[Record]) -> None:
        for record in records:
            self._history.add(record)
        layer = records[0].layer
        if records[0].kind == "activation" and layer not in self.shapes:
            s = records[0].stats
            self.shapes = {**self.shapes, layer: {"shape": list(s.shape), "dtype": s.dtype}}
        content, buffers = stats_message(fit_budget(records))
        self.send(content, buffers)

    def _on_error(self, message: str) -> None:
        self._errors.add(message)

    def _publish_errors(self, entries: list[dict]) -> None:
        with self._lock:
            self.errors = entries

    def _on_meta(self, layer: str) -> None:
        if META not in self.notes:
            self.notes = [*self.notes, META]

    def set_state(self, sync_data: dict) -> None:
        """A value from the view the trait refuses (``max_rate=-3``) is shown, not only logged."""
        try:
            super().set_state(sync_data)
        except t.TraitError as error:
            self._errors.add(f"refused from the view: {error}", detail=repr(sync_data))
            self.send_state(list(sync_data))  # the view goes back to the valid value

    def _on_msg(self, widget: Any, content: Any, buffers: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "hello":
            keys = self._history.keys()
            latest = fit_budget(self._history.latest())
            history = {k: self._history.records(k) for k in keys}
            self.send(*snapshot_message(latest, history))
            self._attention.resend()
        elif kind == "remove_all_hooks":
            self.remove_all_hooks()
        elif kind == "clear_errors":
            self.clear_errors()
        elif kind is not None and self._cut_on_msg(content):
            pass
        elif kind == "attention_batch":
            try:
                self._attention.on_msg(content)
            except (TypeError, ValueError) as error:  # shown in the notebook, not only the console
                self._on_error(f"attention batch selection: {error}")

    def _attention_cost(self, name: str, seconds: float) -> None:
        # LiveHooks spaces out updates whose reduction is slow (its time budget); recording a
        # long sequence's pattern is such an update. It has no public setter for that yet.
        costs = getattr(self._live, "_cost", None)
        if isinstance(costs, dict):
            costs[(name, "attention")] = seconds

    def _measure_shapes(self) -> None:
        try:
            self.shapes = tree.output_shapes(self._model, self._example_inputs)
        except Exception as error:
            self._on_error(
                "could not run the model on example_inputs to show output shapes (the tree "
                "works without them; check the inputs' shapes and device): "
                f"{type(error).__name__}: {error}"
            )

    def _check_name(self, name: str) -> None:
        if name not in self._layer_set:
            raise UnknownNameError(
                name,
                self._layers,
                "layer",
                "Hint: live stats are for modules; get_layers(model) lists them",
            )


def _collected(model: weakref.ref[nn.Module], lease: hook_guards.Lease) -> None:
    """A collected Explorer: its hooks went with their registries; give the rest back."""
    lease.release()
    watched = model()
    if watched is not None:
        ownership.release(watched, None)  # only if no newer Explorer owns it


def _sealed_message(part: str, layers: list[str]) -> str:
    """The error for ``layers`` inside ``part``, compiled with ``fullgraph=True``."""
    return (
        f"{', '.join(layers)}: not attached, {part!r} was compiled with fullgraph=True, which "
        "allows no graph break, and recording a layer needs one (your forward would raise); "
        f"compile {part!r} without fullgraph=True to watch layers in it live."
    )


def _node_message(name: str, modules: frozenset[str]) -> str:
    """Why a selected graph node gets no live stats, and what to use instead."""
    stem, call = split_call_suffix(name)
    if call and stem in modules:
        return (
            f"{name!r} is call {call} of module {stem!r}: live stats follow every call of a "
            f"module, so select {stem!r}; Inspect(model, layer={name!r}) returns this call only."
        )
    return (
        f"{name!r} is a graph node, not a module: live stats are for modules. "
        f"Use Extract(model, node_out={name!r}) to read it."
    )
