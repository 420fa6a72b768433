"""Check a cut before building it: what ``Extract(model, node_in, node_out)`` would need and keep.

:func:`analyze_cut` traces once (or reuses a :class:`~.tracing.Trace`), runs Extract's own
surgery passes on a copy of the graph and reports inputs, leaks, outputs, sizes and problems;
it computes no tensor and never raises for a user mistake. :func:`suggest_fix` finds the
fewest extra ``node_in`` nodes that stop the original inputs from leaking into the cut.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torch import fx, nn

from ..naming import NameSpec, UnknownNameError, normalize_spec
from ..tracing import NAME, ExampleInputs, Trace, TracingError, is_internal_node, trace
from .leaks import find_leaks, recomputed, value_downstream
from .mincut import min_vertex_cut
from .surgery import (
    auto_input_key,
    downstream,
    input_identifier,
    is_kept,
    mutation_readers,
    prune,
    reachable,
    replace_inputs,
    select_outputs,
)

__all__ = ["CutReport", "analyze_cut", "suggest_fix"]

_OPS = ("call_module", "call_function", "call_method")
_TEMPORARY = "__surgeon_cut_"


@dataclass(frozen=True)
class CutReport:
    """What ``Extract(model, node_in, node_out)`` would need and keep; ``valid`` = no problems.

    ==============  ==========================================================================
    node_in/out     the names asked for (dict keys for a dict)
    inputs          the cut model's inputs, as ``Extract(...).summary["input"]`` names them:
                    original inputs still read, then the new ones
    outputs         the output keys (the model's own output nodes when ``node_out`` is None)
    leaks           ``{original input: [its readers]}`` for inputs the cut recomputes
                    parametrized work from, as ``summary.leaks`` (see :mod:`.leaks`; a
                    parameter-free read, such as an attention mask, is just an input)
    fix             extra ``node_in`` names that would end every leak (:func:`suggest_fix`);
                    ``None`` when nothing leaks, nothing can, or there are problems
    params_kept     parameters the cut model keeps; ``params_total``: the model's
    nodes_kept      operations (module and function calls) it runs; ``nodes_total``: all
    method          ``"fx"`` or ``"export"``; ``None`` if the model could not be traced
    note            the trace's note (why its shapes are static, see ``Extract.note``), or ""
    problems        human-readable reasons the cut is wrong (a leak is not one)
    ==============  ==========================================================================
    """

    node_in: tuple[str, ...] = ()
    node_out: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    leaks: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    fix: tuple[str, ...] | None = None
    params_kept: int = 0
    params_total: int = 0
    nodes_kept: int = 0
    nodes_total: int = 0
    method: str | None = None
    note: str = ""
    problems: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, dicts, str, int and bool only (``json.dumps`` takes it)."""
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()}
        data["leaks"] = {k: list(v) for k, v in self.leaks.items()}
        return {**data, "valid": self.valid}


def analyze_cut(
    model_or_trace: nn.Module | Trace,
    node_in: NameSpec | None = None,
    node_out: NameSpec | None = None,
    example_inputs: ExampleInputs = None,
) -> CutReport:
    """Report on ``Extract(model, node_in, node_out)`` without building it or running anything.

    Names take the forms ``Extract`` takes (str, list, tuple, dict ``{node: new_name}``).
    ``example_inputs`` enable the ``torch.export`` fallback; pass a ``Trace`` to reuse one.

    >>> class Branchy(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.a, self.b = nn.Linear(5, 3), nn.Linear(5, 3)
    ...     def forward(self, x):
    ...         return torch.add(self.a(x), self.b(x))
    >>> report = analyze_cut(Branchy(), node_in="a", node_out="add")
    >>> report.inputs, report.leaks, report.fix, report.valid
    (('x', 'a'), {'x': ['b']}, ('b',), True)
    >>> print(analyze_cut(Branchy(), node_in="a", node_out="ad").problems[0].split(". ")[0])
    unknown node_out 'ad'; closest valid: 'add', 'a'
    """
    names_in, names_out = _names(node_in), _names(node_out)
    base = CutReport(node_in=names_in, node_out=names_out)
    try:
        traced = _trace(model_or_trace, example_inputs)
    except (TracingError, TypeError) as error:
        return dataclasses.replace(base, problems=(str(error),))
    problems: list[str] = []
    ins = _resolve(traced, node_in, "node_in", problems)
    outs = _resolve(traced, node_out, "node_out", problems)
    sizes = {
        "params_total": _param_count(_root(model_or_trace), None),
        "nodes_total": sum(n.op in _OPS for n in traced.graph.nodes),
        "method": traced.method,
        "note": traced.note,
    }
    base = dataclasses.replace(base, **sizes)
    if problems:
        return dataclasses.replace(base, problems=tuple(problems))
    problems += _overlap_problems(ins, outs) + _dependency_problems(traced, ins, outs)
    try:
        graph, inputs, leaks = _cut_graph(traced, ins, outs, node_in, node_out)
    except Exception as error:  # an engine failure must reach the UI, not crash it
        return dataclasses.replace(base, problems=(*problems, f"the cut fails: {error}"))
    problems += _input_name_problems(inputs)
    repairable = leaks and not problems
    fix = _fix(traced, ins, outs, node_out) if repairable else None
    return dataclasses.replace(
        base,
        inputs=inputs,
        outputs=tuple(key for _, key in outs) or _names_of(_output_nodes(traced.graph)),
        leaks=leaks,
        fix=None if fix is None else tuple(fix),
        params_kept=_param_count(traced.root, graph),
        nodes_kept=sum(n.op in _OPS for n in graph.nodes),
        problems=tuple(problems),
    )


def suggest_fix(
    model_or_trace: nn.Module | Trace,
    node_in: NameSpec,
    node_out: NameSpec | None = None,
    example_inputs: ExampleInputs = None,
) -> list[str] | None:
    """The fewest extra ``node_in`` names after which no original input leaks into the cut
    (no parametrized work is recomputed from one; see :mod:`.leaks`).

    Every output stays computed from the given ``node_in`` (no node computed from its value
    is chosen; one that only reads its shape may be); among equally small answers, the one
    closest to the outputs. ``[]``: nothing leaks; ``None``: no set of extra nodes can stop the
    leak (an output itself runs on an input), or the cut has a problem :func:`analyze_cut`
    reports. A returned fix is checked with Extract's own passes: no leak, no warning, and no
    name in it can be left out.

    Raises:
        UnknownNameError: a name the model does not have. TracingError: untraceable model.

    >>> class Residual(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.stem, self.body = nn.Linear(2, 2), nn.Linear(2, 2)
    ...     def forward(self, x):
    ...         h = self.stem(x)
    ...         return self.body(h) + h
    >>> suggest_fix(Residual(), node_in="body"), suggest_fix(Residual(), node_in="stem")
    (['stem'], [])
    """
    traced = _trace(model_or_trace, example_inputs)
    ins = _resolve(traced, node_in, "node_in", None)
    outs = [] if node_out is None else _resolve(traced, node_out, "node_out", None)
    if _overlap_problems(ins, outs) + _dependency_problems(traced, ins, outs):
        return None  # not a cut to repair: analyze_cut says why
    return _fix(traced, ins, outs, node_out)


_FIX_ROUNDS = 4


def _fix(
    traced: Trace,
    ins: list[tuple[fx.Node, str]],
    outs: list[tuple[fx.Node, str]],
    node_out: NameSpec | None,
) -> list[str] | None:
    """Extra ``node_in`` names that end every leak, checked by running Extract's own passes.

    Each round takes a min vertex cut on the cut graph (after Extract's passes, so shape reads
    already come from the new inputs) and checks the result the same way; the answer is then
    made minimal by dropping any name the cut does not need.
    """
    chosen: list[fx.Node] = []
    for _ in range(_FIX_ROUNDS):
        pairs = ins + [(n, n.meta[NAME]) for n in chosen]
        graph, _, leaks = _cut_graph(traced, pairs, outs, "x", node_out)
        if not leaks:
            break
        more = _min_cut(graph)
        if not more:
            return None
        chosen += [traced.resolve(name, "node_in") for name in more]
    else:
        return None
    for node in list(chosen):  # minimal: drop what the others make unnecessary
        rest = [n for n in chosen if n is not node]
        pairs = ins + [(n, n.meta[NAME]) for n in rest]
        if not _cut_graph(traced, pairs, outs, "x", node_out)[2]:
            chosen = rest
    return [n.meta[NAME] for n in chosen]


def _min_cut(graph: fx.Graph) -> list[str] | None:
    """Min vertex cut between the leaking original inputs and every node the cut computes
    (the outputs, and the side effects Extract's dead-code pass keeps), over the paths that
    run parametrized work from those inputs (:func:`~.leaks.recomputed`): a parameter-free
    read of an input (a mask, a residual) needs no cut."""
    output = next(n for n in graph.nodes if n.op == "output")
    outs = output.all_input_nodes
    nodes = [n for n in graph.nodes if n.op != "output"]
    new = [n for n in nodes if n.op == "placeholder" and n.name.startswith(_TEMPORARY)]
    originals = [n for n in nodes if n.op == "placeholder" and n not in new]
    below = value_downstream(new)  # a node reading only a new input's shape may be chosen
    work = recomputed(graph, originals)
    after_work = downstream(list(work))

    def cost(node: fx.Node) -> int | None:
        fixed = node.op in ("placeholder", "get_attr") or node in outs or node in below
        hidden = NAME not in node.meta or is_internal_node(node)
        return None if fixed or hidden else 1

    def carries_leak(parent: fx.Node, node: fx.Node) -> bool:
        # before the work, an edge matters only on the way to more work before it
        return parent in after_work or node in work or node not in after_work

    leaking = set(find_leaks(graph, originals))
    sources = [n for n in originals if n.name in leaking]
    kept = [n for n in nodes if n.op in _OPS and is_kept(n)]
    sinks = [n for n in [*outs, *kept] if n not in new and n in after_work]
    extra = mutation_readers(graph)
    preds = {
        n: [p for p in [*n.all_input_nodes, *extra.get(n, ())] if carries_leak(p, n)] for n in nodes
    }
    cut = min_vertex_cut(preds, sources, sinks, {n: cost(n) for n in nodes})
    return None if cut is None else [n.meta[NAME] for n in cut]


def _trace(model_or_trace: nn.Module | Trace, example_inputs: ExampleInputs) -> Trace:
    if isinstance(model_or_trace, Trace):
        return model_or_trace
    return trace(model_or_trace, example_inputs=example_inputs)


def _root(model_or_trace: nn.Module | Trace) -> nn.Module:
    return model_or_trace.root if isinstance(model_or_trace, Trace) else model_or_trace


def _names(spec: Any) -> tuple[str, ...]:
    if spec is None:
        return ()
    items = [spec] if isinstance(spec, str) else spec
    return tuple(str(name) for name in items) if isinstance(items, Iterable) else (str(spec),)


def _names_of(nodes: Iterable[fx.Node]) -> tuple[str, ...]:
    return tuple(n.meta.get(NAME, n.name) for n in nodes)


def _resolve(
    traced: Trace, spec: NameSpec | None, what: str, problems: list[str] | None
) -> list[tuple[fx.Node, str]]:
    """``[(node, key)]``; with ``problems`` given, bad names are reported there, not raised."""
    if spec is None:
        return []
    try:
        pairs = normalize_spec(spec, what)
    except (TypeError, ValueError) as error:
        if problems is None:
            raise
        problems.append(str(error))
        return []
    if what == "node_in":
        pairs = [(name, auto_input_key(name, key)) for name, key in pairs]
    resolved = []
    for name, key in pairs:
        try:
            resolved.append((traced.resolve(name, what), key))
        except UnknownNameError as error:
            if problems is None:
                raise
            problems.append(str(error))
    return resolved


def _overlap_problems(ins: list[tuple[fx.Node, str]], outs: list[tuple[fx.Node, str]]) -> list[str]:
    problems = []
    for node, key in outs:
        for other, new_name in ins:
            if node is other:
                problems.append(
                    f"{key!r} is both an output and an input ({new_name!r}): both name node "
                    f"{node.meta.get(NAME)!r}, so the cut would return its input unchanged"
                )
    seen: dict[fx.Node, str] = {}
    for node, key in ins:
        if node in seen:
            problems.append(f"node_in {key!r} and {seen[node]!r} name the same node")
        seen[node] = key
    return problems


def _dependency_problems(
    traced: Trace, ins: list[tuple[fx.Node, str]], outs: list[tuple[fx.Node, str]]
) -> list[str]:
    """Outputs computed without any ``node_in``, and ``node_in`` no output uses."""
    if not ins:
        return []
    in_nodes = {node for node, _ in ins}
    targets = outs or [(n, n.meta.get(NAME, n.name)) for n in _output_nodes(traced.graph)]
    problems, used = [], set()
    for node, key in targets:
        reached = _ancestors(node, stop=in_nodes) & in_nodes
        used |= reached
        if not reached:
            problems.append(
                f"output {key!r} does not depend on any node_in: it is computed from the "
                "original inputs only (pick a node_in upstream of it)"
            )
    for node, key in ins:
        if node not in used:
            problems.append(f"node_in {key!r} is not used by any output; it would be dropped")
    return problems


def _input_name_problems(names: tuple[str, ...]) -> list[str]:
    """Input names the cut model's generated ``forward`` cannot take."""
    return [
        f"two inputs would both be called {n!r}" for n in dict.fromkeys(names) if names.count(n) > 1
    ]


def _cut_graph(
    traced: Trace,
    ins: list[tuple[fx.Node, str]],
    outs: list[tuple[fx.Node, str]],
    node_in: NameSpec | None,
    node_out: NameSpec | None,
) -> tuple[fx.Graph, tuple[str, ...], dict[str, list[str]]]:
    """Run Extract's passes on a copy of the graph, so the report matches Extract exactly.

    New inputs get temporary unique names here (a clash would fail the passes); the names
    Extract would give them (``input_identifier(key)``) are returned in placeholder order.
    """
    graph = fx.Graph(owning_module=traced.root)
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(traced.graph, copies))
    originals = [n for n in graph.nodes if n.op == "placeholder"]
    if node_out is not None:
        select_outputs(graph, node_out, [copies[n] for n, _ in outs], [k for _, k in outs], False)
    temporary = {f"{_TEMPORARY}{i}": input_identifier(key) for i, (_, key) in enumerate(ins)}
    if node_in is not None:
        replace_inputs(graph, [copies[n] for n, _ in ins], list(temporary))
    prune(graph)
    replaced = {copies[n] for n, _ in ins}
    leaks = find_leaks(graph, [n for n in originals if n not in replaced]) if ins else {}
    names = tuple(temporary.get(n.name, n.name) for n in graph.nodes if n.op == "placeholder")
    return graph, names, leaks


def _output_nodes(graph: fx.Graph) -> list[fx.Node]:
    return next(n for n in graph.nodes if n.op == "output").all_input_nodes


def _ancestors(node: fx.Node, stop: set[fx.Node]) -> set[fx.Node]:
    """``node`` and every node it reads, not looking past ``stop`` nodes."""
    return reachable([node], lambda current: () if current in stop else current.all_input_nodes)


def _param_count(root: nn.Module, graph: fx.Graph | None) -> int:
    """Parameters ``graph``'s modules and attributes hold (all of ``root``'s if no graph)."""
    if graph is None:
        return sum(p.numel() for p in root.parameters())
    found: dict[int, int] = {}
    for node in graph.nodes:
        if node.op not in ("call_module", "get_attr"):
            continue
        value = functools.reduce(getattr, str(node.target).split("."), root)
        tensors = value.parameters() if isinstance(value, nn.Module) else [value]
        for tensor in tensors:
            if isinstance(tensor, nn.Parameter):
                found[id(tensor)] = tensor.numel()
    return sum(found.values())
