"""Every private torch API the engine and the recorder use, found at first use, with a fallback.

A torch release may rename any of these. Each :class:`Internal` is looked up the first time a
feature needs it, never at import, so ``import surgeon_widgets`` works whatever torch lacks.
Where one is missing, its fallback takes its place and one :class:`TorchInternalWarning` says
which feature degrades and how (each entry's ``degraded``); everything else works as before.
An entry whose meaning could drift while its name stays (a flag torch now sets elsewhere) also
has a ``probe``: run once, right after the lookup, on a toy case whose answer is known; a
probe that fails (or raises) takes the fallback the same way, with its one warning (a probe
that cannot tell here, ``None``, leaves the entry to be probed again at its next use).

>>> GRAPH_TASK_ID.get()()  # outside a backward pass
-1
>>> GRAPH_TASK_ID.available
True
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import warnings
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch

__all__ = [
    "CODEGEN",
    "DEFAULT_STORE",
    "DETECT_FAKE_MODE",
    "DISABLE_TORCH_FUNCTION",
    "ENTRIES",
    "FUNCTORCH_ACTIVE",
    "FX_TRACING",
    "GRAPH_TASK_ID",
    "IS_FAKE",
    "LAZY_CLONE",
    "MAY_BE_WRAPPED",
    "MAY_HAVE_FAKE_MODE",
    "PYTREE",
    "TRACER_CLASS",
    "Internal",
    "TorchInternalWarning",
    "copy_codegen",
    "set_tracer_class",
    "tracer_class",
]

T = TypeVar("T")
_UNSET: Any = object()


class TorchInternalWarning(UserWarning):
    """A private torch API is missing from this torch; the message says what degrades."""


def _resolve(path: str) -> Any:
    """``torch.a._b.c``: attributes from ``torch`` on, importing submodules not yet loaded."""
    parts = path.split(".")
    value = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 2):
        try:
            value = getattr(value, part)
        except AttributeError:
            try:  # a submodule not imported yet
                value = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                raise AttributeError(f"{'.'.join(parts[: i - 1])} has no {part!r}") from None
    return value


class Internal(Generic[T]):
    """A private torch API (``name``), or ``fallback`` where this torch lacks it.

    ``find`` looks it up (default: the dotted ``name``); it runs at the first :meth:`get`,
    and again after ``find`` is replaced (a test that makes the lookup fail). ``probe(found)``
    (optional) says whether what was found still means what we read it for (``None``: it
    cannot tell here; the next :meth:`get` probes again).
    """

    def __init__(
        self,
        name: str,
        fallback: T,
        degraded: str,
        find: Callable[[], T] | None = None,
        probe: Callable[[T], bool] | None = None,
    ) -> None:
        self.name = name
        self.fallback = fallback
        self.degraded = degraded
        self.probe = probe
        self._find: Callable[[], T] = find or (lambda: _resolve(name))
        self._found: T = _UNSET
        self._available = False

    @property
    def find(self) -> Callable[[], T]:
        return self._find

    @find.setter
    def find(self, find: Callable[[], T]) -> None:
        self._find = find
        self._found = _UNSET

    @property
    def looked_up(self) -> bool:
        """Has a feature asked for it yet?"""
        return self._found is not _UNSET

    @property
    def available(self) -> bool:
        """Does this torch have it (looked up now if not yet)?"""
        self.get()
        return self._available

    def get(self) -> T:
        """The API, or the fallback (warning once per lookup) where torch lacks it."""
        found = self._found
        if found is _UNSET:
            try:
                found, self._available = self._find(), True
            except (ImportError, AttributeError) as error:
                found, self._available = self.fallback, False
                why = f"is missing from torch {torch.__version__} ({error})"
            else:
                why = self._check(found)
                if why is None:  # the probe cannot tell here: use it, probe at the next use
                    return found
                if why:
                    found, self._available = self.fallback, False
            if not self._available:
                warnings.warn(
                    f"{self.name} {why}: {self.degraded}", TorchInternalWarning, stacklevel=3
                )
            self._found = found
        return found

    def _check(self, found: T) -> str | None:
        """Why ``found`` fails its probe ("": it passes, or there is none; None: undecided)."""
        if self.probe is None:
            return ""
        try:
            passed = self.probe(found)
            if passed is None or passed:
                return None if passed is None else ""
            error = "a known case answered wrong"
        except Exception as raised:  # a changed signature, a new requirement: a drift too
            error = f"{type(raised).__name__}: {raised}"
        return f"does not mean what it did in torch {torch.__version__} (probe: {error})"


# -- the guard (engine/guard.py): which forwards live hooks stay out of ----------------------

def _thread_flag(path: str, name: str, default: Any) -> Callable[[], Any]:
    """``getattr(tls, name, default)`` of the ``threading.local`` at ``path``, read from the
    calling thread's dict: a getattr that misses raises and catches AttributeError inside
    (1 us, on every hook call of every forward)."""
    tls = _resolve(path)
    if not isinstance(tls, threading.local):
        raise AttributeError(f"{path} is a {type(tls).__name__}, not a threading.local")
    return lambda: tls.__dict__.get(name, default)


class _Stop(Exception):
    """Ends the fx-tracing probe's trace before it runs anything."""


def _probe_fx_tracing(flag: Callable[[], bool]) -> bool | None:
    """Outside a trace the flag reads false; inside fx's ``Tracer.trace`` true; after, false.
    (``None`` inside the user's own fx trace, where "outside" cannot be seen.)

    The trace is stopped where it asks for the root's arguments (``create_args_for_root``,
    public): after torch sets the flag, before it patches ``nn.Module.__call__`` for the whole
    process (which would reroute other threads' module calls) or traces anything.
    """
    inside: list[bool] = []

    class Probe(torch.fx.Tracer):
        def create_args_for_root(self, *args: Any, **kwargs: Any) -> Any:
            inside.append(flag())
            raise _Stop

    if flag() and not isinstance(flag(), bool):
        return False
    if flag():  # our hook runs inside the user's own fx trace (or the flag is stuck true)
        return None
    with contextlib.suppress(_Stop):
        Probe().trace(lambda x: x)
    return inside == [True] and flag() is False


FX_TRACING: Internal[Callable[[], bool]] = Internal(
    # the flag itself (_get_is_fx_tracing's): is_fx_symbolic_tracing() also asks is_compiling(),
    # which the guard asks
    "torch.fx._symbolic_trace._is_fx_tracing_tls.flag",
    lambda: False,
    "live hooks cannot tell that torch.fx is tracing; they still return at once when their "
    "inputs are fx Proxies",
    lambda: _thread_flag("torch.fx._symbolic_trace._is_fx_tracing_tls", "flag", False),
    _probe_fx_tracing,
)


def _modes_active() -> bool:
    """Is a torch function or dispatch mode active here? (A probe that runs ops then waits:
    the user's mode, a FlopCounterMode say, would see them.)"""
    try:
        return bool(torch._C._len_torch_dispatch_stack() or torch._C._len_torch_function_stack())
    except AttributeError:  # cannot tell: as if one were
        return True


def _probe_functorch(active: Callable[[], bool]) -> bool | None:
    """False here; true inside ``torch.func.vmap`` (of a one-line function, no model)."""
    if active() or _modes_active():  # inside the user's transform or mode: decide later
        return None
    inside = torch.func.vmap(lambda x: x * active())(torch.ones(1, device="cpu"))
    return not active() and inside.tolist() == [1.0]


def _probe_may_have_fake_mode(may_have: Callable[[], bool]) -> bool:
    """True under a dispatch mode (a fake mode is one; a bare one costs nothing to enter).
    Outside, true is allowed: it only sends the guard to torch's full check."""
    with _resolve("torch.utils._python_dispatch.TorchDispatchMode")():
        return may_have()


def _probe_may_be_wrapped(may_be: Callable[[Any], bool]) -> bool | None:
    """False for a plain tensor; true for vmap's batched value (a plain type, wrapped in C++)."""
    if _modes_active():
        return None
    inside = torch.func.vmap(lambda x: x * float(bool(may_be(x))))(torch.ones(1, device="cpu"))
    return not may_be(torch.ones(1, device="cpu")) and inside.tolist() == [1.0]


FUNCTORCH_ACTIVE: Internal[Callable[[], bool]] = Internal(
    "torch._C._are_functorch_transforms_active",
    lambda: False,
    "live hooks cannot tell that a functorch transform (torch.func.vmap, grad) is running "
    "and may record its batched or wrapped values",
    probe=_probe_functorch,
)
DETECT_FAKE_MODE: Internal[Callable[[], Any]] = Internal(
    "torch._guards.detect_fake_mode",
    lambda: None,
    "live hooks cannot see an active fake-tensor mode; they still skip fake tensors they are given",
)
IS_FAKE: Internal[Callable[[Any], bool]] = Internal(
    "torch._subclasses.fake_tensor.is_fake",
    lambda t: False,
    "live hooks cannot recognise fake tensors (FakeTensorMode, torch.export's tracing values) "
    "and may record them",
)


def _find_may_have_fake_mode() -> Callable[[], bool]:
    try_get = _resolve("torch._guards.TracingContext.try_get")
    dispatch_depth = _resolve("torch._C._len_torch_dispatch_stack")
    return lambda: try_get() is not None or dispatch_depth() != 0


MAY_HAVE_FAKE_MODE: Internal[Callable[[], bool]] = Internal(
    "torch._guards.TracingContext.try_get / torch._C._len_torch_dispatch_stack",
    lambda: True,
    "every live hook call asks torch's slower detect_fake_mode (about 15 us instead of 1)",
    _find_may_have_fake_mode,
    _probe_may_have_fake_mode,
)


def _find_may_be_wrapped() -> Callable[[Any], bool]:
    cpp_fake = _resolve("torch._C._is_fake_tensor")
    functional = _resolve("torch._is_functional_tensor")
    functorch = _resolve("torch._C._functorch.is_functorch_wrapped_tensor")
    return lambda t: cpp_fake(t) or functional(t) or functorch(t)


MAY_BE_WRAPPED: Internal[Callable[[Any], bool]] = Internal(
    "torch._C._is_fake_tensor / torch._is_functional_tensor / "
    "torch._C._functorch.is_functorch_wrapped_tensor",
    lambda t: True,
    "every plain tensor a live hook sees is checked with torch's slower is_fake",
    _find_may_be_wrapped,
    _probe_may_be_wrapped,
)

# -- attention capture (engine/attention/intercept.py) ------------------------------------------

DISABLE_TORCH_FUNCTION: Internal[Callable[[], contextlib.AbstractContextManager[Any]]] = Internal(
    "torch._C.DisableTorchFunction",
    contextlib.nullcontext,
    "an attention layer selected inside another selected module: the outer capture also sees "
    "the inner one's extra weights call",
)

# -- Inspect (engine/inspect.py) ------------------------------------------------------------------


def _probe_lazy_clone(lazy_clone: Callable[[Any], Any]) -> bool | None:
    """A copy: the source changed in place afterwards, the copy keeps the old values."""
    if _modes_active():
        return None
    source = torch.tensor([1.0, 2.0], device="cpu")
    copy = lazy_clone(source)
    source.add_(1)
    return copy.tolist() == [1.0, 2.0]


LAZY_CLONE: Internal[Callable[[Any], Any]] = Internal(
    "torch._lazy_clone",
    torch.clone,
    "Inspect copies each captured output at once instead of copy-on-write (more memory, same "
    "values)",
    probe=_probe_lazy_clone,
)

# -- nested inputs and outputs (calling, tracing, Inspect, Extract) -------------------------------


class _PlainTrees:
    """Tuples, lists and dicts only (not their subclasses): ``torch.utils._pytree`` without it."""

    @staticmethod
    def tree_flatten(value: Any) -> tuple[list[Any], Any]:
        leaves: list[Any] = []

        def spec(v: Any) -> Any:
            if type(v) in (tuple, list):
                return (type(v).__name__, tuple(spec(x) for x in v))
            if type(v) is dict:
                return ("dict", tuple((k, spec(x)) for k, x in v.items()))
            leaves.append(v)
            return "*"

        return leaves, spec(value)

    @classmethod
    def tree_map(cls, fn: Callable[[Any], Any], value: Any) -> Any:
        if type(value) in (tuple, list):
            return type(value)(cls.tree_map(fn, x) for x in value)
        if type(value) is dict:
            return {k: cls.tree_map(fn, x) for k, x in value.items()}
        return fn(value)

    @classmethod
    def tree_map_only(cls, kind: type, fn: Callable[[Any], Any], value: Any) -> Any:
        return cls.tree_map(lambda v: fn(v) if isinstance(v, kind) else v, value)


PYTREE: Internal[Any] = Internal(
    "torch.utils._pytree",
    _PlainTrees,
    "nested inputs and outputs are walked as plain tuples, lists and dicts: other containers "
    "(Hugging Face ModelOutput, namedtuples) are single leaves, so Inspect keeps them uncloned "
    "and Extract cannot bind tensors inside them",
)

# -- fx graphs (engine/tracing.py, engine/cut/extract.py) ----------------------------------------


def _graph_attribute(name: str) -> Callable[[], str]:
    def find() -> str:
        if name not in vars(torch.fx.Graph()):
            raise AttributeError(f"torch.fx.Graph has no {name}")
        return name

    return find


TRACER_CLASS: Internal[str | None] = Internal(
    "torch.fx.Graph._tracer_cls",
    None,
    "traced graphs keep fx's own tracer class: a GraphModule from get_nodes / Extract may not "
    "pickle",
    _graph_attribute("_tracer_cls"),
)
CODEGEN: Internal[str | None] = Internal(
    "torch.fx.Graph._codegen",
    None,
    "an Extract's graph uses fx's default code generator instead of the trace's own (a model "
    "fx traced with nested inputs may then take its inputs differently)",
    _graph_attribute("_codegen"),
)


def tracer_class(graph: Any) -> Any:
    """The tracer class ``graph`` was made with (``None``: unknown), to make a sibling graph."""
    attribute = TRACER_CLASS.get()
    return getattr(graph, attribute, None) if attribute else None


def set_tracer_class(graph: Any, tracer: type | None) -> None:
    """Record ``tracer`` as ``graph``'s tracer class: the one a pickled GraphModule rebuilds."""
    attribute = TRACER_CLASS.get()
    if attribute:
        setattr(graph, attribute, tracer)


def copy_codegen(source: Any, target: Any) -> None:
    """Give ``target`` the code generator of ``source`` (how its generated forward is called)."""
    attribute = CODEGEN.get()
    if attribute:
        target.set_codegen(getattr(source, attribute))


# -- the Recorder (record/recorder.py) ------------------------------------------------------------

GRAPH_TASK_ID: Internal[Callable[[], int]] = Internal(
    "torch._C._current_graph_task_id",
    lambda: -1,
    "under activation checkpointing the Recorder counts a recomputed forward as another call "
    "of the layer",
)

DEFAULT_STORE: Internal[Callable[[], Any]] = Internal(
    "torch.distributed.distributed_c10d._get_default_store",
    lambda: None,
    "a rank whose rec.step() times out cannot say at which step the other ranks are, and "
    "the other ranks do not learn its error (their own collectives fail instead)",
)

ENTRIES: tuple[Internal[Any], ...] = (
    FX_TRACING,
    FUNCTORCH_ACTIVE,
    DETECT_FAKE_MODE,
    IS_FAKE,
    MAY_HAVE_FAKE_MODE,
    MAY_BE_WRAPPED,
    DISABLE_TORCH_FUNCTION,
    LAZY_CLONE,
    PYTREE,
    TRACER_CLASS,
    CODEGEN,
    GRAPH_TASK_ID,
    DEFAULT_STORE,
)
"""Every entry (tests make them all fail)."""
