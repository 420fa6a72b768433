"""Extract: a new model that computes only what is asked, cut from a traced graph."""

from __future__ import annotations

import copy
import functools
import keyword
import re
import warnings
from typing import Any

import torch  # noqa: F401  (used by the doctest)
from torch import fx, nn

from ..calling import Binder, FixedArgumentError, Slot
from ..naming import NameSpec, normalize_spec
from ..torch_internals import PYTREE, copy_codegen, tracer_class
from ..tracing import NAME, ExampleInputs, Trace, trace
from .fixed_shapes import FixedShapes
from .leaks import find_leaks
from .surgery import auto_input_key, prune, replace_inputs, select_outputs

__all__ = ["Extract", "FixedArgumentError", "InputLeakWarning", "Summary", "UnusedInputWarning"]


class InputLeakWarning(UserWarning):
    """A ``node_in`` cut still recomputes parametrized work from an original input (another
    branch, the embeddings); a parameter-free read (an attention mask) is none (:mod:`.leaks`)."""


class UnusedInputWarning(UserWarning):
    """A ``node_in`` that no ``node_out`` depends on; the cut model does not take it."""


class Summary(dict):
    """``{'input': (names...), 'output': nodes}`` as surgeon-pytorch prints it, plus ``leaks``:
    ``{original_input: [its readers on the way to recomputed parametrized work]}``.

    ``summary["output"]`` holds the graph's nodes; printed, each shows the name it was asked by
    (``node_out``), else the node's public name, never a trace-internal one (``layer_norm_4``).
    """

    def __init__(
        self,
        inputs: tuple[str, ...],
        output: Any,
        leaks: dict[str, list[str]],
        asked: dict[str, str] | None = None,
    ):
        super().__init__(input=inputs, output=output)
        self.leaks = leaks
        self.asked = asked or {}  # graph node name -> the node_out name that chose it

    @classmethod
    def of(cls, graph: fx.Graph, leaks: dict[str, list[str]], asked: dict[str, str]) -> Summary:
        output = next(n for n in graph.nodes if n.op == "output").args[0]
        inputs = tuple(n.name for n in graph.nodes if n.op == "placeholder")
        return cls(inputs, output, leaks, asked)

    def __repr__(self) -> str:
        def name(node: fx.Node) -> Any:  # unquoted, as surgeon-pytorch prints a node
            return _Bare(self.asked.get(node.name) or node.meta.get(NAME, node.name))

        return repr({"input": self["input"], "output": fx.node.map_arg(self["output"], name)})


class _Bare(str):
    """A name printed bare, as ``repr`` of an fx node prints its name."""

    def __repr__(self) -> str:
        return str(self)


def _asked_names(graph: fx.Graph, node_out: NameSpec | None, keep: bool) -> dict[str, str]:
    """``{graph node name: node_out name}`` for the selected outputs (after the kept original)."""
    if node_out is None:
        return {}
    selected = next(n for n in graph.nodes if n.op == "output").args[0]
    nodes: list[fx.Node] = []
    fx.node.map_arg(selected[1] if keep else selected, nodes.append)
    return {n.name: name for n, (name, _) in zip(nodes, normalize_spec(node_out, "node_out"))}


class Extract(fx.GraphModule):
    """A model cut out of ``model`` between graph nodes: feed ``node_in``, return ``node_out``.

    Args:
        model: the model to cut; with ``share_modules=False`` (default) only the modules and
            parameters the cut needs are copied, the rest is dropped.
        node_in: node names (from :func:`get_nodes`) to turn into new inputs: a str, list,
            tuple, or dict ``{node: new_input_name}``.
        node_out: node names to return, as a str, list, tuple or dict ``{node: key}``; results
            come back in that form and order. A module name means the last node inside it.
        tracer: a ``torch.fx.Tracer`` subclass (default: ``torch.fx.Tracer`` or
            :func:`set_tracer`'s); ``concrete_args`` go to it.
        keep_output: also return the model's own output first; default ``True`` unless
            ``node_out`` is given.
        share_modules: share weights with ``model`` instead of copying them.
        example_inputs: a tensor, tuple of args or dict of kwargs; lets models that torch.fx
            cannot trace (Hugging Face transformers) be traced with ``torch.export`` instead.

    Calling: an Extract takes any call the model's ``forward`` takes (``cut(x, y)``,
    ``cut(input_ids=ids, use_cache=False)``; positionally in the model's order when the cut has
    no new inputs) and ignores what it does not read; or its own inputs, ``summary["input"]``,
    in that order or by those names (fx's ``input_1`` also works for ``input``). A non-tensor
    argument the trace fixed (torch.export specializes them; fx's ``concrete_args``) must have
    the value traced with, else :class:`FixedArgumentError` says to rebuild the Extract.

    Train/eval: the graph is traced in ``model``'s current mode. If tracing in the other mode
    gives a different graph (or the model was traced by torch.export, which fixes the mode),
    switching the Extract to the other mode raises ``RuntimeError``: build it again from the
    model in the mode you need. Otherwise ``train()``/``eval()`` work as usual.

    Example:
        >>> model = nn.Sequential(nn.Linear(5, 3), nn.ReLU(), nn.Linear(3, 1))
        >>> cut = Extract(model, node_in="1", node_out="2")
        >>> cut(torch.ones(1, 3)).shape, sum(p.numel() for p in cut.parameters())
        (torch.Size([1, 1]), 4)
    """

    def __init__(
        self,
        model: nn.Module,
        node_in: NameSpec | None = None,
        node_out: NameSpec | None = None,
        tracer: type[fx.Tracer] | None = None,
        concrete_args: dict[str, Any] | None = None,
        keep_output: bool | None = None,
        share_modules: bool = False,
        example_inputs: ExampleInputs = None,
    ) -> None:
        traced = trace(model, tracer, concrete_args, example_inputs)
        mode_dependent = _mode_dependent(model, traced, tracer, concrete_args)
        graph, copies = copy_graph(traced)
        outs = [(copies[n], k) for n, k in _resolve(traced, node_out, "node_out")]
        ins = [(copies[n], k) for n, k in _resolve(traced, node_in, "node_in")]
        renamed = {n for n, _ in ins if n.op == "placeholder"}
        originals = [n for n in graph.nodes if n.op == "placeholder" and n not in renamed]
        slots = _original_slots(traced, originals)
        keep = bool(keep_output)
        if node_out is not None:
            select_outputs(graph, node_out, [n for n, _ in outs], [k for _, k in outs], keep)
        asked = _asked_names(graph, node_out, keep)
        if node_in is not None:
            new_inputs = replace_inputs(graph, [n for n, _ in ins], [k for _, k in ins])
            for placeholder, (_, key) in zip(new_inputs, ins):
                slots[placeholder] = Slot(tuple(dict.fromkeys((placeholder.name, key))))
            _warn_unused(graph, new_inputs, [name for name, _ in normalize_spec(node_in, "")])
        prune(graph)
        super().__init__(_writable_root(traced.root, graph), graph, class_name="Extract")
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self._binder = Binder(traced.layout, [slots[n] for n in placeholders])
        self.note = traced.note
        names = [slots[n].names[0] for n in placeholders]
        shapes = FixedShapes.of(graph, names, traced.note)
        self._shapes = shapes if traced.method == "export" and shapes.fixes_any else None
        if not share_modules:
            self._own_copies()
        self.training = model.training
        self._traced_training = model.training
        self._mode_dependent = mode_dependent
        self.method = traced.method
        leaks = find_leaks(graph, originals) if node_in is not None else {}
        self.summary = Summary.of(graph, leaks, asked)
        for name, readers in leaks.items():
            warnings.warn(
                f"original input {name!r} is still needed after the node_in cut, through "
                f"{', '.join(repr(r) for r in readers)}; the Extract takes it as an input",
                InputLeakWarning,
                stacklevel=2,
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        binder = self.__dict__.get("_binder")
        if binder is not None:
            args, kwargs = tuple(binder.bind(args, kwargs)), {}
        shapes = self.__dict__.get("_shapes")
        if shapes is not None:
            shapes.check(args)
        return super().__call__(*args, **kwargs)

    def _own_copies(self) -> None:
        memo: dict[int, Any] = {}
        for name, child in list(self.named_children()):
            setattr(self, name, copy.deepcopy(child, memo))
        for name, param in list(self._parameters.items()):
            self._parameters[name] = copy.deepcopy(param, memo)
        for name, buffer in list(self._buffers.items()):
            self._buffers[name] = copy.deepcopy(buffer, memo)

    def train(self, mode: bool = True) -> Extract:
        if mode != self._traced_training and self._mode_dependent:
            traced_in, wanted = (
                ("training", "eval") if self._traced_training else ("eval", "training")
            )
            raise RuntimeError(
                f"this Extract was traced in {traced_in} mode and its graph depends on the "
                f"mode (traced by {self.method}); to run in {wanted} mode build it again: "
                f"Extract(model.{'train' if mode else 'eval'}(), ...)"
            )
        return super().train(mode)

    def __reduce__(self) -> Any:
        rebuild, (body, *rest) = super().__reduce__()
        body = {k: v for k, v in body.items() if k != "summary"}  # holds graph nodes
        return (_rebuild, ((rebuild, (body, *rest)), _extra_state(self)))

    def __deepcopy__(self, memo: dict[int, Any]) -> Extract:
        for node in self.graph.nodes:  # share node metadata: export's fake tensors cannot copy
            memo[id(node.meta)] = dict(node.meta)
        copied = super().__deepcopy__(memo)
        state = copy.deepcopy(_extra_state(self), memo)
        copied.summary = Summary.of(copied.graph, state.pop("leaks"), state.pop("asked"))
        copied.__dict__.update(state)
        return copied


_EXTRA = ("method", "_traced_training", "_mode_dependent", "_binder", "note", "_shapes")


def _extra_state(extract: Extract) -> dict[str, Any]:
    state = {key: extract.__dict__[key] for key in _EXTRA}
    state["leaks"] = extract.summary.leaks
    state["asked"] = extract.summary.asked
    return state


def _rebuild(reduced: Any, state: dict[str, Any]) -> Extract:
    """Unpickle: torch.fx rebuilds a plain GraphModule, which we wrap back into an Extract."""
    rebuild, args = reduced
    plain = rebuild(*args)
    extract = fx.GraphModule.__new__(Extract)
    fx.GraphModule.__init__(extract, plain, plain.graph, class_name="Extract")
    state = dict(state)
    extract.summary = Summary.of(extract.graph, state.pop("leaks"), state.pop("asked"))
    extract.__dict__.update(state)
    extract.training = plain.training
    return extract


def _writable(target: str) -> bool:
    return all(
        p.isidentifier() and not keyword.iskeyword(p) and p != "self" for p in target.split(".")
    )


def _writable_root(root: nn.Module, graph: fx.Graph) -> nn.Module | dict[str, Any]:
    """``root``, or if a module name cannot be written in fx's code (``'a"b'``, ``class``,
    ``self``, a newline) a dict of attribute targets with those renamed (``a_b``, ``class_``).

    Only the GraphModule's attribute paths change; node names (ours) stay as they were.
    """
    targets = [n for n in graph.nodes if n.op in ("call_module", "get_attr")]
    if all(_writable(str(n.target)) for n in targets):
        return root
    attributes: dict[str, Any] = {}
    taken = {str(n.target) for n in targets if _writable(str(n.target))}
    renamed: dict[str, str] = {}
    for node in targets:
        target = str(node.target)
        value = functools.reduce(getattr, target.split("."), root)
        if not _writable(target):
            if target not in renamed:
                safe = "_".join(_safe_part(p) for p in target.split("."))
                while safe in taken:
                    safe += "_"
                taken.add(safe)
                renamed[target] = safe
            node.target = renamed[target]
        attributes[str(node.target)] = value
    return attributes


def _safe_part(part: str) -> str:
    safe = re.sub(r"\W", "_", part) or "_"
    safe = f"_{safe}" if safe[0].isdigit() else safe
    return f"{safe}_" if keyword.iskeyword(safe) or safe == "self" else safe


def copy_graph(traced: Trace) -> tuple[fx.Graph, dict[fx.Node, fx.Node]]:
    """A copy of the (shared, cached) trace's graph to cut, and original node -> copy."""
    graph = fx.Graph(owning_module=traced.root, tracer_cls=tracer_class(traced.graph))
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(traced.graph, copies))
    copy_codegen(traced.graph, graph)
    return graph, copies


def _original_slots(traced: Trace, placeholders: list[fx.Node]) -> dict[fx.Node, Slot]:
    """Where each original input's value comes from in a call of the model."""
    layout = traced.layout
    params: list[str | None] = [None] * len(placeholders)
    if layout is not None and layout.method == "export" and layout.spec is not None:
        leaves = [
            name
            for name in layout.positional + layout.keywords
            for _ in PYTREE.get().tree_flatten(layout.traced.get(name))[0]
        ]
        params = list(leaves) if len(leaves) == len(placeholders) else params
    if layout is not None and layout.method == "fx" and layout.signature is not None:
        # fx makes one placeholder per parameter, in order, but may rename it (double_1)
        names = list(layout.signature.parameters)
        if len(names) == len(placeholders):
            params = list(names)
    slots = {}
    for i, node in enumerate(placeholders):
        name = node.meta.get(NAME, node.name)
        if layout is None or layout.method != "export":
            param = params[i] or str(node.target).lstrip("*")
            slots[node] = Slot(tuple(dict.fromkeys((param, node.name, name))), param)
        else:
            param = params[i] or name
            slots[node] = Slot(tuple(dict.fromkeys((node.name, name))), param, index=i)
    return slots


def _warn_unused(graph: fx.Graph, placeholders: list[fx.Node], names: list[str]) -> None:
    alive = set(graph.nodes)
    for placeholder, name in zip(placeholders, names):
        if placeholder not in alive:
            warnings.warn(
                f"node_in {name!r} feeds none of the outputs (do they come before it?); "
                "it was dropped",
                UnusedInputWarning,
                stacklevel=3,
            )


def _resolve(traced: Trace, spec: NameSpec | None, what: str) -> list[tuple[fx.Node, str]]:
    if spec is None:
        return []
    pairs = normalize_spec(spec, what)
    if what == "node_in":
        pairs = [(name, auto_input_key(name, key)) for name, key in pairs]
    return [(traced.resolve(name, what), key) for name, key in pairs]


def _mode_dependent(
    model: nn.Module,
    traced: Trace,
    tracer: type[fx.Tracer] | None,
    concrete_args: dict[str, Any] | None,
) -> bool:
    """Whether tracing in the other train/eval mode would give another graph."""
    if traced.method != "fx":
        return True
    modes = {module: module.training for module in model.modules()}
    try:
        model.train(not model.training)
        other = trace(model, tracer, concrete_args)
    except Exception:
        return True
    finally:
        for module, mode in modes.items():
            module.training = mode
    return _code(traced.graph) != _code(other.graph)


def _code(graph: fx.Graph) -> str:
    return graph.python_code("self").src
