"""The live hooks of a selection: one :meth:`SelectionHooks.sync` attaches them all.

A selection (:class:`Selection`) is the modules to watch, whether their gradients are watched
too, and the layers whose own parameters are shown. :meth:`SelectionHooks.sync` attaches
exactly that: the step clock (only while a layer is selected: with nothing selected no hook
is left for dynamo to break a later compile at), activations and gradients
(:class:`~.hooks.LiveHooks`), attention maps of the attention layers among them
(:class:`~.attention.AttentionView`) and parameters (:class:`~.params.ParamWatch`); it returns
the ``hooks`` trait's value. All of them share one :class:`~.throttle.Throttle` and report a
hook that raised through one ``on_failure``.

:func:`resolve` turns the names the user selected into the modules that can be watched, with
a message for each name that cannot (graph nodes, unknown names, parts compiled with
``fullgraph=True``).

>>> import torch
>>> from torch import nn
>>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
>>> got = []
>>> live = SelectionHooks(model, got.extend, lambda content, buffers: None, max_rate=0)
>>> live.sync(Selection(("0",), gradients=False, params=("0",)))
[{'name': '0', 'kind': 'forward'}, {'name': '0', 'kind': 'parameters'}]
>>> _ = model(torch.ones(1, 2))
>>> sorted(r.key for r in got)
['0/bias', '0/output', '0/weight']
>>> live.sync(Selection(())), live.close()
([], None)
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from torch import nn

from ...engine import guard
from ...engine.naming import split_call_suffix
from ...engine.wrappers import unwrap
from ..history import Record
from ..runtime import eager_steps
from ..runtime.compiled import compiled_parts, fullgraph_parts, is_compiled
from .attention import AttentionView, Send
from .eager_pace import EagerPace
from .failures import Failure, log_failure
from .hooks import LiveHooks
from .nonfinite import NonFiniteWatch
from .params import ParamWatch
from .steps import StepClock
from .throttle import Throttle

__all__ = [
    "COMPILED", "EAGER_STEPS", "FULLGRAPH", "META", "Selection", "SelectionHooks",
    "compile_note", "meta_ran", "resolve",
]  # fmt: skip

EAGER_STEPS = (
    "torch.compile: the forwards that record run eagerly, hooks attached for that call only; "
    "every other step runs your compiled graph untouched, so a selection change compiles "
    "nothing and adds no graph break. Recorded steps are spaced so that running them eagerly "
    "costs at most ~2% of the time."
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


def meta_ran(layer: str) -> str:
    """What a layer's panel says once a forward ran through it on the meta device."""
    return (
        f"{layer} ran on the meta device: meta tensors have no values, so no statistics will "
        "come. Build the model on a real device (e.g. model.to_empty(device='cpu'), then load "
        "its weights) to see them."
    )


def compile_note(watched: nn.Module) -> str | None:
    """The note for a model as the user calls it: how it is observed under torch.compile."""
    if eager_steps.available(watched):
        return EAGER_STEPS
    if is_compiled(watched) or compiled_parts(unwrap(watched)):
        return COMPILED
    return None


class Selection(NamedTuple):
    """What to watch: modules (their outputs), their gradients, and layers' own parameters."""

    layers: tuple[str, ...]
    gradients: bool = False
    params: tuple[str, ...] = ()


class SelectionHooks:
    """Every live hook of one model, attached for a :class:`Selection` by :meth:`sync`.

    Args:
        watched: the model as the user calls it (a ``torch.compile`` wrapper stays wrapped:
            its forwards are the steps); hooks go on its own modules.
        sink: called with the records of one update (activations, gradients, parameters).
        send: called with ``(content, buffers)`` of each ``attention`` message.
        on_failure: ``(layer, kind, error)`` of a hook that raised.
        on_error: a message (a selected layer that runs no attention).
        on_note: a note for the view (:data:`COMPILED`, :data:`META`), once per change.
        max_rate: the throttle's rate (updates a second per layer and kind; ``0``: every one).
        on_meta: called with a selected layer's name each time it ran on meta tensors.
        before: called at the start of each call of a compiled model (:attr:`eager_only`),
            outside its compiled code (the Explorer's inbox of clicks).
        compiling: called with ``True`` when a call of a compiled model (:attr:`eager_only`)
            enters its compiled code before any call of it returned (dynamo compiles), with
            ``False`` when that call ends (:mod:`..runtime.eager_steps`).
    """

    def __init__(
        self,
        watched: nn.Module,
        sink: Callable[[list[Record]], None],
        send: Send,
        on_failure: Failure = log_failure,
        on_error: Callable[[str], None] = print,
        on_note: Callable[[str], None] = lambda note: None,
        max_rate: float = 10.0,
        on_meta: Callable[[str], None] = lambda layer: None,
        before: Callable[[], None] = lambda: None,
        compiling: Callable[[bool], None] | None = None,
    ) -> None:
        self.model = model = unwrap(watched)
        self.on_note = on_note
        self.clock = StepClock(watched, attached=False)  # counts while layers are hooked
        self.throttle = Throttle(max_rate)
        self.activations = LiveHooks(
            model, sink, on_failure, clock=self.clock, throttle=self.throttle,
            on_meta=lambda layer: (on_note(META), on_meta(layer)),
        )  # fmt: skip
        due = self.activations.due
        self.attention = AttentionView(
            model, send, on_error, lambda name: due((name, "attention")),
            note_cost=self.throttle.note_cost, on_failure=on_failure,
            training=lambda: self.clock.training,
        )  # fmt: skip
        self.params = ParamWatch(model, sink, due, on_failure)
        self.nonfinite = NonFiniteWatch(model, self.clock, on_failure)  # every module's
        self.watched = watched
        self.eager_only = eager_steps.available(watched)  # hooks only in eager steps
        self.pace = EagerPace(self.throttle.budget)
        self.before = before
        self._selection = Selection(())
        self._in_step = False
        # stands in for the compiled call until close(): clicks apply through it (before)
        self._reduced = 0.0  # seconds the last eager step spent in reductions
        me = weakref.ref(self)  # the model must not keep the widget alive
        self.steps = eager_steps.eager_steps(watched, _plan_of(me), _timed_of(me), compiling)

    def sync(self, selection: Selection, in_forward: bool = False) -> list[dict]:
        """Attach exactly ``selection``'s hooks; return them as the ``hooks`` trait lists them.

        ``in_forward``: called from a root pre-hook in a forward that has begun (a click
        applied mid-forward): the step clock counts this forward too. On a compiled model
        (:attr:`eager_only`) the hooks go on only for the eager steps (:meth:`_plan`).
        """
        layers = list(selection.layers)
        self._selection = selection
        if self.eager_only:
            self.clock.close()  # the steps count in _plan, outside the compiled region
            self.pace.now_due()  # a new selection's first record comes with the next forward
        elif layers:
            self.clock.attach(this_forward=in_forward)
        else:
            self.clock.close()
        self._attach(selection)
        if layers and not self.eager_only and not self.recompiles:
            self.nonfinite.attach()  # compiled: in the eager steps only (_eager_step)
        elif not self.eager_only:
            self.nonfinite.close()
        if layers and compiled_parts(self.model) and not self.eager_only:
            self.on_note(COMPILED)  # blocks compiled in place, also after the Explorer was made
        if layers and any(p.is_meta for p in self.model.parameters()):
            self.on_note(META)
        kinds = ["forward", "gradient"] if selection.gradients else ["forward"]
        hooks = [
            *({"name": n, "kind": k} for n in self.activations.attached for k in kinds),
            *({"name": n, "kind": "attention"} for n in self.attention.attached),
            *({"name": n, "kind": "parameters"} for n in self.params.attached),
        ]
        if self.eager_only and not self._in_step:
            self._park()
        return hooks

    @property
    def recompiles(self) -> bool:
        """Does a selection change make dynamo recompile (hooks in compiled code)?"""
        compiled = is_compiled(self.watched) or bool(compiled_parts(self.model))
        return compiled and not self.eager_only

    def _attach(self, selection: Selection) -> None:
        self.activations.sync(selection.layers, selection.gradients)
        self.attention.sync(selection.layers)
        self.params.sync(selection.params)

    def _park(self, gradients: bool = False) -> None:
        """Take the hooks off the modules (``gradients``: those of a past backward too)."""
        self.activations.park(gradients)
        self.attention.park()
        self.params.park(gradients)
        self.nonfinite.park(gradients)

    def _plan(self, args: tuple, kwargs: dict) -> contextlib.AbstractContextManager | None:
        """At each call of the compiled model: count the step; if an update is due, the hooks
        for this one forward (run eagerly by :mod:`..runtime.eager_steps`)."""
        self.before()  # clicks first: one applied now counts this forward, as in eager mode
        if guard.inert(args, kwargs) or not self._selection.layers:
            return None  # as the clock of an eager model: steps count while layers are selected
        self.clock.count(args, kwargs)
        self._park(gradients=True)  # the backward of the last eager step is done
        paced = self.throttle.max_rate > 0  # max_rate=0: every forward records
        if (paced and not self.pace.allowed()) or not self._due():
            return None
        return self._eager_step(args, kwargs)

    def _due(self) -> bool:
        """Is an update of any key of the selection due (without counting it as made)?"""
        selection = self._selection
        layers, params = set(selection.layers), set(selection.params)
        later = {"gradient": layers if selection.gradients else set(), "weight grad": params}
        keys = [
            *((n, "activation") for n in layers),
            *((n, "attention") for n in self.attention.layers if n in layers),
            *((n, "weight") for n in params),
            *self.throttle.seen(lambda k: _layer_key(k[0], later.get(k[1], set()))),
        ]
        return any(self.throttle.ready(k) for k in keys)

    @contextlib.contextmanager
    def _eager_step(self, args: tuple, kwargs: dict) -> Iterator[None]:
        self._in_step = True
        spent = self.throttle.spent
        try:
            self._attach(self._selection)
            self.nonfinite.attach()
            self.nonfinite.begin(self.clock.step, args, kwargs)  # counted before it attached
            yield
        finally:
            self._in_step = False
            self._park()  # gradient hooks stay for this forward's backward
            self._reduced = self.throttle.spent - spent

    def params_of(
        self, names: Iterable[str], layers: Iterable[str], added: Iterable[str] = ()
    ) -> list[str]:
        """``names`` and then ``added`` among ``layers`` that show parameters (a ReLU has
        none; see :func:`~.params.shown_params`): the ``param_layers`` of a selection."""
        watched = set(layers)
        wanted = dict.fromkeys([*names, *added])
        return [n for n in wanted if n in watched and not self.params.note(n)]

    def params_notes(self, layers: Iterable[str]) -> dict[str, str]:
        """``{layer: why its "parameters" box is off}`` for ``layers`` that show none."""
        notes = {n: self.params.note(n) for n in layers}
        return {n: note for n, note in notes.items() if note}

    def close(self) -> None:
        """Remove every hook (the step clock's too)."""
        if self.steps is not None:
            self.steps.remove()
        for part in (self.activations, self.attention, self.params, self.nonfinite, self.clock):
            part.close()

    def __del__(self) -> None:
        if self.steps is not None:
            self.steps.remove()


def _timed_of(me: weakref.ref[SelectionHooks]) -> Callable[[bool, float], None]:
    def timed(eager: bool, seconds: float) -> None:
        live = me()
        if live is not None:
            live.pace.took(eager, seconds - live._reduced if eager else seconds)

    return timed


def _plan_of(me: weakref.ref[SelectionHooks]) -> eager_steps.Plan:
    def plan(args: tuple, kwargs: dict) -> contextlib.AbstractContextManager | None:
        live = me()
        return None if live is None else live._plan(args, kwargs)

    return plan


def _layer_key(key: str, layers: set[str]) -> bool:
    """Is ``key`` (``layer/leaf``) of one of ``layers``?"""
    return key.split("/", 1)[0] in layers


def resolve(
    names: Iterable[str], layers: frozenset[str], nodes: Iterable[str], watched: nn.Module
) -> tuple[list[str], list[str]]:
    """The modules among ``names`` that can be watched, and a message for every other name.

    ``layers``: the model's module names; ``nodes``: its graph nodes' (shown in the tree);
    ``watched``: the model as the user calls it (for ``fullgraph=True`` compiles, refused
    unless its recorded forwards run eagerly: :func:`compile_note` is then ``EAGER_STEPS``).
    """
    modules, messages = [], []
    node_names = set(nodes)
    for name in names:
        if name in layers:
            modules.append(name)
        elif name in node_names:
            messages.append(_node_message(name, layers))
        else:
            messages.append(f"unknown layer {name!r} selected; it was ignored")
    # eager steps run fullgraph=True parts eagerly too: nothing of ours meets their graphs
    sealed = fullgraph_parts(watched) if modules and not eager_steps.available(watched) else []
    if sealed == [""]:
        return [], [*messages, FULLGRAPH]
    for part in sealed:
        refused = [n for n in modules if n == part or n.startswith(f"{part}.")]
        if refused:
            messages.append(_sealed_message(part, refused))
            modules = [n for n in modules if n not in refused]
    return modules, messages


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
