"""Model -> graph with public node names: torch.fx, else ``torch.export(strict=False)``.

Both tracers yield a :class:`Trace`: a ``GraphModule`` whose nodes carry their public name
(``node.meta["surgeon_name"]``, see :mod:`.naming`) and a map from every module call
(``layer1``, ``layer1.0.relu_1``) to the node that holds its output.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from .calling import CallLayout
from .guard import internal
from .naming import Namer, UnknownNameError, base_name
from .time_limit import TimeLimitExceeded, call_within
from .torch_internals import PYTREE, set_tracer_class

__all__ = [
    "DYNAMIC_TIME_LIMIT",
    "ExampleInputs",
    "Trace",
    "TracingError",
    "clear_trace_cache",
    "is_internal_node",
    "reset_tracer",
    "set_tracer",
    "trace",
]

NAME = "surgeon_name"
OWNER = "surgeon_owner"
ExampleInputs = Any  # a Tensor, a tuple of positional args, or a dict of keyword args

_default_tracer: type[fx.Tracer] = fx.Tracer


class TracingError(RuntimeError):
    """Every tracer failed on the model; the message says why and what to use instead."""


def set_tracer(tracer: type[fx.Tracer]) -> None:
    """Use ``tracer`` (a ``torch.fx.Tracer`` subclass) by default in ``get_nodes`` and ``Extract``.

    >>> import torch.fx
    >>> set_tracer(torch.fx.Tracer); reset_tracer()
    """
    global _default_tracer
    if not (isinstance(tracer, type) and issubclass(tracer, fx.Tracer)):
        raise TypeError(f"set_tracer takes a torch.fx.Tracer subclass, not {tracer!r}")
    _default_tracer = tracer


def reset_tracer() -> None:
    """Go back to ``torch.fx.Tracer`` as the default tracer."""
    global _default_tracer
    _default_tracer = fx.Tracer


@dataclass
class Trace:
    """A traced model: its graph, the module the graph's targets live in, how it was traced,
    and where each module call's output is."""

    root: nn.Module  # the model (fx) or export's unlifted module: holds call/get_attr targets
    graph: fx.Graph
    method: str  # "fx" or "export"
    training: bool
    module_outputs: dict[str, fx.Node] = field(default_factory=dict)
    layout: CallLayout | None = None  # how the traced example was passed (see .calling)
    note: str = ""  # e.g. why the shapes are static

    @functools.cached_property
    def module(self) -> fx.GraphModule:
        """A ``GraphModule`` running the graph (built on first use: code generation costs)."""
        return fx.GraphModule(self.root, self.graph, type(self.root).__name__)

    def node_names(self, internals: bool = False) -> list[str]:
        """Public names of every node a user can ask for, in graph order; torch.export's
        shape reads and assertions (``sym_size_int``) only with ``internals``."""
        return [
            n.meta[NAME]
            for n in self.graph.nodes
            if NAME in n.meta and (internals or not is_internal_node(n))
        ]

    def valid_names(self) -> list[str]:
        return list(dict.fromkeys(self.node_names() + list(self.module_outputs)))

    def resolve(self, name: str, what: str = "node") -> fx.Node:
        """The node called ``name``; a module name means the last node inside that module.

        An input also answers to fx's own name for it, as surgeon-pytorch shows it
        (``input_1`` for ``nn.Sequential``'s ``input``, renamed by fx off the builtin)."""
        for node in self.graph.nodes:
            if node.meta.get(NAME) == name:
                return node
        if name in self.module_outputs:
            return self.module_outputs[name]
        for node in self.graph.nodes:
            if node.op == "placeholder" and node.name == name and NAME in node.meta:
                return node
        raise UnknownNameError(
            name, self.valid_names(), what, "Hint: get_nodes(model) lists every valid name"
        )


def _naming_tracer(base: type[fx.Tracer]) -> type[fx.Tracer]:
    class NamingTracer(base):  # type: ignore[misc, valid-type]
        """Names every node ``owner.op`` (owner = the module whose forward created it)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._owner = ""
            self._namer = Namer()
            self._calls = Namer()
            self._thread = threading.get_ident()  # the thread that traces (see below)
            self.module_outputs: dict[str, fx.Node] = {}

        # While it traces, fx patches ``nn.Module.__call__`` and ``__getattr__`` for the whole
        # process: another thread's module calls and parameter reads reach this tracer too
        # (its models are not installed in this root: "NameError: module is not installed as
        # a submodule"; the traced model's own parameters would come back as proxies). They
        # are not ours to trace: they run as if no trace were under way.
        def call_module(self, m: nn.Module, forward: Any, args: Any, kwargs: Any) -> Any:
            if threading.get_ident() != self._thread:
                return forward(*args, **kwargs)
            path = self.path_of_module(m)
            outer, self._owner = self._owner, path
            before = len(self.graph.nodes)
            try:
                out = super().call_module(m, forward, args, kwargs)
            finally:
                self._owner = outer
            call_name = self._calls.name(path, "")
            if isinstance(out, fx.Proxy):
                self.module_outputs[call_name] = out.node
            elif len(self.graph.nodes) > before:
                self.module_outputs[call_name] = list(self.graph.nodes)[-1]
            return out

        def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict) -> Any:
            if threading.get_ident() != self._thread:
                return attr_val
            return super().getattr(attr, attr_val, parameter_proxy_cache)

        def create_proxy(self, kind: str, target: Any, *args: Any, **kwargs: Any) -> Any:
            proxy = super().create_proxy(kind, target, *args, **kwargs)
            node = proxy.node
            if kind == "placeholder":  # the parameter's own name (fx renames e.g. input)
                node.meta[NAME] = self._namer.name("", str(target).lstrip("*"))
            elif kind == "call_module":
                node.meta[NAME] = self._namer.name(target, "")
            elif kind in ("call_function", "call_method"):
                node.meta[NAME] = self._namer.name(self._owner, base_name(node.name))
            node.meta[OWNER] = self._owner
            return proxy

    return NamingTracer


def _fx_trace(
    model: nn.Module, tracer: type[fx.Tracer] | None, concrete_args: dict[str, Any] | None
) -> Trace:
    base = tracer or _default_tracer
    naming = _naming_tracer(base)()
    graph = naming.trace(model, concrete_args=concrete_args)
    set_tracer_class(graph, base)  # the local NamingTracer class cannot be pickled
    graph.owning_module = naming.root  # purity checks look modules up through it
    layout = CallLayout.for_fx(model, concrete_args)
    return Trace(naming.root, graph, "fx", model.training, naming.module_outputs, layout)


_LEAF_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")
_ASSERTION = re.compile(r"_assert|sym_constrain_range")


_INTERNAL = re.compile(r"^(sym_size|sym_numel|sym_stride|_assert|sym_constrain|_guards)")


def is_internal_node(node: fx.Node) -> bool:
    """A torch.export bookkeeping node (shape read, assertion), hidden unless asked for."""
    if node.op != "call_function" or not hasattr(node.target, "_schema"):
        return False
    return bool(_INTERNAL.match(base_name(node.name)))


def _is_leaf_type(type_name: str) -> bool:
    return type_name.startswith("torch.nn.modules.") and not type_name.endswith(_LEAF_CONTAINERS)


def _module_calls(node: fx.Node) -> list[tuple[str, str, str, str]]:
    """``(key, path, call_name, type)`` for each module call around ``node``, outermost first."""
    calls = []
    for key, (path, type_name) in node.meta.get("nn_module_stack", {}).items():
        if path.startswith("_empty_nn_module_stack"):  # export's marker for "no module"
            continue
        index = key.rsplit("@", 1)[1] if "@" in key else "0"
        path = "" if path == "L__self__" else path
        call_name = f"{path}_{index}" if index != "0" else path
        calls.append((key, path, call_name, str(type_name)))
    return calls


def _clean_export_graph(module: fx.GraphModule) -> None:
    """Drop export's guard and assertion nodes and use plain calling conventions."""
    graph = module.graph
    for node in reversed(list(graph.nodes)):
        is_guard = node.op == "call_module" and str(node.target) == "_guards_fn"
        is_assert = node.op == "call_function" and _ASSERTION.search(str(node.target))
        if (is_guard or is_assert) and not node.users:
            graph.erase_node(node)
    graph.set_codegen(fx.graph.CodeGen())
    set_tracer_class(graph, None)  # export's tracer cannot rebuild the module when unpickling
    module.recompile()


def _name_export_nodes(module: fx.GraphModule) -> dict[str, fx.Node]:
    """Name nodes by the fx scheme from ``nn_module_stack``; return module call -> output node.

    As with fx's leaf modules, the last node inside a call of a ``torch.nn`` layer is named by
    the module path itself (``encoder.layer.0.output.dense``).
    """
    nodes = list(module.graph.nodes)
    last_in_call: dict[str, fx.Node] = {}
    call_names: dict[str, str] = {}
    for node in nodes:
        for key, _, call_name, _ in _module_calls(node):
            last_in_call[key] = node
            call_names[key] = call_name
    namer = Namer()
    for node in nodes:
        if node.op == "placeholder":
            node.meta[NAME] = namer.name("", node.name)
        elif node.op == "call_function":
            calls = _module_calls(node)
            key, owner, _, type_name = calls[-1] if calls else ("", "", "", "")
            node.meta[OWNER] = owner
            is_leaf_output = bool(calls) and _is_leaf_type(type_name) and last_in_call[key] is node
            node.meta[NAME] = namer.name(owner, "" if is_leaf_output else base_name(node.name))
    return {call_names[k]: node for k, node in last_in_call.items() if call_names[k]}


def _split_inputs(example_inputs: ExampleInputs) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(example_inputs, Mapping):
        return (), dict(example_inputs)
    if isinstance(example_inputs, tuple):
        return example_inputs, {}
    if isinstance(example_inputs, list):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


def _cheap_dims(value: torch.Tensor) -> list[int]:
    """Dimensions declared dynamic: those that are cheap to trace symbolically.

    Token ids, masks and positions (integer or bool tensors) and sequences of vectors (float,
    up to 3-D: ``inputs_embeds``) vary in every dimension; images and other float tensors of
    4-D or more only in the batch: symbolic heights and widths make window attention (Swin)
    take minutes to export instead of seconds.
    """
    if not value.dtype.is_floating_point or value.dim() <= 3:
        return list(range(value.dim()))
    return [0]


def _auto_dynamic(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The cheap dimensions of every input tensor may vary (export keeps static what must be)."""
    auto = torch.export.Dim.AUTO
    signature = CallLayout.for_export(model, args, kwargs).signature
    assert signature is not None
    bound = signature.bind(*args, **kwargs).arguments
    return {
        name: PYTREE.get().tree_map(
            lambda v: dict.fromkeys(_cheap_dims(v), auto) if isinstance(v, torch.Tensor) else None,
            value,
        )
        for name, value in bound.items()
    }


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """torch.export prints its partial graph to stderr when it fails; our error says it shorter."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


_NOISY_LOGGERS = ("torch.fx.experimental.symbolic_shapes", "torch._dynamo", "torch.export")


DYNAMIC_TIME_LIMIT: float | None = 15.0
"""Seconds a dynamic-shape torch.export may take before it is aborted (at the model's next module
or torch call, :mod:`.time_limit`) and the model is traced with the example's static shapes instead
(``None``: no limit). Read at each trace; a trace already cached is kept
(:func:`clear_trace_cache` to trace again)."""


def _export_trace(model: nn.Module, example_inputs: ExampleInputs) -> Trace:
    """torch.export with the cheap dynamic dims (:func:`_cheap_dims`); past
    :data:`DYNAMIC_TIME_LIMIT`, or if that fails, with the example's static shapes."""
    args, kwargs = _split_inputs(example_inputs)
    limit = DYNAMIC_TIME_LIMIT
    note = ""
    with torch.no_grad(), _quiet_torch_logs():
        try:
            dynamic = _auto_dynamic(model, args, kwargs)
            program = call_within(limit, lambda: _export(model, args, kwargs, dynamic), model=model)
        except TimeLimitExceeded:
            program = _export(model, args, kwargs, None)
            note = (
                f"traced with static shapes (a dynamic-shape trace took longer than "
                f"{limit:g} s, tracing.DYNAMIC_TIME_LIMIT): the cut runs only on inputs of "
                f"the example's shapes"
            )
        except Exception as error:  # some models only export with the example's exact shapes
            program = _export(model, args, kwargs, None)
            note = (
                f"traced with static shapes (a dynamic-shape trace failed: "
                f"{type(error).__name__}): the cut runs only on inputs of the example's shapes"
            )
    module = program.module()
    _clean_export_graph(module)
    outputs = _name_export_nodes(module)
    layout = CallLayout.for_export(model, args, kwargs)
    return Trace(module, module.graph, "export", model.training, outputs, layout, note)


def _export(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic: Any
) -> torch.export.ExportedProgram:
    """``torch.export`` of aliases of the example tensors: export marks its inputs' dynamic
    dimensions on the tensor objects and clears the marks only when it succeeds; left on the
    user's tensors, they made every later "static" export of them dynamic (and slow)."""
    args, kwargs = PYTREE.get().tree_map(_alias, (args, kwargs))
    return torch.export.export(model, args, kwargs, strict=False, dynamic_shapes=dynamic)


def _alias(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value


def _user_frame(error: BaseException) -> str:
    """The innermost traceback line outside torch, to point at the user's code."""
    tb = error.__traceback__
    where = ""
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if "/torch/" not in filename and "surgeon_widgets" not in filename:
            where = f"{filename}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return where


def trace(
    model: nn.Module,
    tracer: type[fx.Tracer] | None = None,
    concrete_args: dict[str, Any] | None = None,
    example_inputs: ExampleInputs = None,
) -> Trace:
    """Trace ``model`` with torch.fx, or (if that fails) torch.export with ``example_inputs``:
    dynamic where cheap (:func:`_cheap_dims`), static if that fails or takes longer than
    :data:`DYNAMIC_TIME_LIMIT` (``Trace.note`` says why).

    One trace per (model, tracer, input signature) is kept on the model and shared by every
    caller (get_nodes, the widget, analyze_cut, Extract); it is traced again when the model's
    modules, parameters or train/eval mode change. Callers must not change the trace's graph
    (copy it, as Extract does).

    Raises:
        TracingError: both tracers failed (or fx failed and no ``example_inputs`` were given).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected an nn.Module, got {type(model).__name__}")
    _check_tracer(tracer)
    cache = _TraceCache.of(model)
    modes = tuple(m.training for m in model.modules())
    base = (tracer or _default_tracer, _signature(concrete_args), modes)
    key = (*base, _signature(example_inputs))
    fx_key = (*base, None)  # an fx trace does not depend on the example inputs
    fingerprint = _fingerprint(model)
    hit = cache.get(fx_key, fingerprint) or cache.get(key, fingerprint)
    if hit is not None:
        return hit
    with internal():
        traced = _trace_uncached(model, tracer, concrete_args, example_inputs)
    cache.put(fx_key if traced.method == "fx" else key, fingerprint, traced)
    return traced


def _check_tracer(tracer: Any) -> None:
    """A tensor passed where ``tracer`` goes (``get_nodes(model, x)``) is named as such."""
    if tracer is None or (isinstance(tracer, type) and issubclass(tracer, fx.Tracer)):
        return
    if isinstance(tracer, type):
        raise TypeError(f"tracer must be a torch.fx.Tracer subclass or None, got {tracer!r}")
    raise TypeError(
        f"tracer must be a torch.fx.Tracer subclass or None, got a {type(tracer).__name__}; "
        "example inputs go by keyword: get_nodes(model, example_inputs=x)"
    )


class _TraceCache:
    """Traces of one model, kept in its ``__dict__``; a copy or pickle of the model starts empty."""

    _ATTRIBUTE = "_surgeon_trace_cache"

    def __init__(self) -> None:
        self._entries: dict[Any, tuple[Any, Trace]] = {}

    @classmethod
    def of(cls, model: nn.Module) -> _TraceCache:
        cache = model.__dict__.get(cls._ATTRIBUTE)
        if not isinstance(cache, cls):
            cache = cls()
            object.__setattr__(model, cls._ATTRIBUTE, cache)
        return cache

    def get(self, key: Any, fingerprint: Any) -> Trace | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] != fingerprint:
            return None
        return entry[1]

    def put(self, key: Any, fingerprint: Any, traced: Trace) -> None:
        stale = [k for k, (f, _) in self._entries.items() if f != fingerprint]
        for k in stale:  # the model changed: older traces are of no use
            del self._entries[k]
        self._entries[key] = (fingerprint, traced)

    def __deepcopy__(self, memo: dict[int, Any]) -> _TraceCache:
        return _TraceCache()

    def __reduce__(self) -> Any:
        return (_TraceCache, ())


def clear_trace_cache(model: nn.Module) -> None:
    """Forget ``model``'s cached traces (they are also dropped when the model changes)."""
    model.__dict__.pop(_TraceCache._ATTRIBUTE, None)


def _fingerprint(model: nn.Module) -> tuple[Any, ...]:
    """What a trace depends on besides the inputs and modes: modules and parameter identity."""
    modules = tuple((name, id(m)) for name, m in model.named_modules())
    tensors = tuple(id(t) for t in model.parameters()) + tuple(id(t) for t in model.buffers())
    return modules, tensors


def _signature(values: Any) -> Any:
    """Shapes, dtypes and devices of the tensors, values of the rest, and the structure."""
    if values is None:
        return None

    def describe(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return ("tensor", tuple(value.shape), value.dtype, str(value.device))
        return ("value", type(value).__name__, repr(value))

    leaves, spec = PYTREE.get().tree_flatten(values)
    return str(spec), tuple(describe(v) for v in leaves)


def _trace_uncached(
    model: nn.Module,
    tracer: type[fx.Tracer] | None,
    concrete_args: dict[str, Any] | None,
    example_inputs: ExampleInputs,
) -> Trace:
    try:
        with internal():  # live hooks stay out of the graph (see engine/guard.py)
            return _fx_trace(model, tracer, concrete_args)
    except Exception as fx_error:
        first = fx_error
    reasons = [f"torch.fx: {type(first).__name__}: {first}".splitlines()[0]]
    where = _user_frame(first)
    if example_inputs is not None:
        try:
            with internal():
                return _export_trace(model, example_inputs)
        except Exception as export_error:
            reasons.append(f"torch.export: {type(export_error).__name__}: {export_error}")
            where = where or _user_frame(export_error)
    else:
        reasons.append("torch.export: not tried; pass example_inputs=(args...) or {kwargs}")
    message = "could not trace {}:\n  {}".format(
        type(model).__name__, "\n  ".join(r.splitlines()[0] for r in reasons)
    )
    if where:
        message += f"\n  at {where}"
    message += "\nInspect(model, layer=...) works on any model: it uses hooks, not tracing."
    raise TracingError(message) from first
