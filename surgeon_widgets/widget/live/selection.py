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

from collections.abc import Callable, Iterable
from typing import NamedTuple

from torch import nn

from ...engine.naming import split_call_suffix
from ...engine.wrappers import unwrap
from ..history import Record
from ..runtime.compiled import compiled_parts, fullgraph_parts
from .attention import AttentionView, Send
from .failures import Failure, log_failure
from .hooks import LiveHooks
from .params import ParamWatch
from .steps import StepClock
from .throttle import Throttle

__all__ = ["COMPILED", "FULLGRAPH", "META", "Selection", "SelectionHooks", "meta_ran", "resolve"]

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

    def sync(self, selection: Selection, in_forward: bool = False) -> list[dict]:
        """Attach exactly ``selection``'s hooks; return them as the ``hooks`` trait lists them.

        ``in_forward``: called from a root pre-hook in a forward that has begun (a click
        applied mid-forward): the step clock counts this forward too.
        """
        layers = list(selection.layers)
        if layers:
            self.clock.attach(this_forward=in_forward)
        else:
            self.clock.close()
        self.activations.sync(layers, selection.gradients)
        self.attention.sync(layers)
        self.params.sync(selection.params)
        if layers and compiled_parts(self.model):
            self.on_note(COMPILED)  # blocks compiled in place, also after the Explorer was made
        if layers and any(p.is_meta for p in self.model.parameters()):
            self.on_note(META)
        kinds = ["forward", "gradient"] if selection.gradients else ["forward"]
        return [
            *({"name": n, "kind": k} for n in self.activations.attached for k in kinds),
            *({"name": n, "kind": "attention"} for n in self.attention.attached),
            *({"name": n, "kind": "parameters"} for n in self.params.attached),
        ]

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
        for part in (self.activations, self.attention, self.params, self.clock):
            part.close()


def resolve(
    names: Iterable[str], layers: frozenset[str], nodes: Iterable[str], watched: nn.Module
) -> tuple[list[str], list[str]]:
    """The modules among ``names`` that can be watched, and a message for every other name.

    ``layers``: the model's module names; ``nodes``: its graph nodes' (shown in the tree);
    ``watched``: the model as the user calls it (for ``fullgraph=True`` compiles).
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
    sealed = fullgraph_parts(watched) if modules else []
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
