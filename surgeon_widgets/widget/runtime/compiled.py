"""torch.compile support of the live views: the user's own module, and hooks dynamo runs eagerly.

``torch.compile(model)`` returns a wrapper whose names all start with ``_orig_mod.``; the
Explorer shows, hooks and traces the module inside (``engine.wrappers.unwrap``: the model's own
names). A hook made by
:func:`compile_safe` is plain Python in eager mode; inside a compiled region dynamo calls it
through ``torch.compiler.disable``, so the reduction runs eagerly on real tensors and never
enters (or breaks up more than once) the user's graph. Under ``torch.export`` it returns at once.

A hook cannot take a module's own forward out of a compiled graph; the attention view needs
that (its recorder is a torch function mode, which must be active while the layer's ops run).
:func:`run_eagerly` puts a wrapper in the module's ``forward`` for as long as the returned
handle lives (it goes through :meth:`HookRegistry.add`, so ``live_hooks()`` lists it and every
removal path undoes it). Eager forwards call ``around(forward, *args, **kwargs)``; compiled
ones call it through ``torch.compiler.disable`` (a graph break at that module: dynamo splits
the graph of each frame around the call, so ``torch._dynamo.explain`` counts one break per
enclosing module); under ``torch.export`` or in a copy of the module, the forward runs as is.
Installing it recompiles (dynamo guards on the module's attributes, whatever
``skip_nnmodule_hook_guards`` says); removing it takes dynamo back to its cached graph without
the break. This is the one place the package sets a module's ``forward`` (STYLE.md's "never
monkeypatch forward" gives way: no hook can take a module's call out of a compiled graph).

Private torch APIs, each looked up once with a fallback: dynamo's wrapper class
``torch._dynamo.eval_frame.OptimizedModule`` (without it, a wrapper is told by its
``_orig_mod``), ``Module.compile``'s ``_compiled_call_impl`` (without it, no part counts as
compiled in place), dynamo's per-code frame strategy (without it, a hook's frame compiles) and
where ``fullgraph=True`` is kept (:data:`FULLGRAPH`: probed once on toy wrappers that are never
called, so nothing compiles; if it answers wrong, every compiled model or part is taken as
``fullgraph=True``, with a ``TorchInternalWarning``: no hook where one could break a forward).

>>> import torch
>>> from torch import nn
>>> model = nn.Linear(2, 2)
>>> is_compiled(torch.compile(model)), is_compiled(model)
(True, False)
>>> seen = []
>>> def around(forward, *args, **kwargs):
...     seen.append("before")
...     return forward(*args, **kwargs)
>>> handle = run_eagerly(model, around)
>>> _ = model(torch.ones(1, 2)); _ = torch.compile(model)(torch.ones(1, 2))
>>> seen
['before', 'before']
>>> handle.remove()
>>> "forward" in model.__dict__, compiled_parts(model)
(False, [])
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...engine.torch_internals import Internal
from ...engine.wrappers import unwrap

__all__ = [
    "FULLGRAPH", "WRAPPER", "EagerForward", "compile_safe", "compiled_parts", "fullgraph_parts",
    "is_compiled", "is_fullgraph", "run_eagerly",
]  # fmt: skip


def _wrapper_class() -> type | None:
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:
        return None
    return OptimizedModule


WRAPPER: type | None = _wrapper_class()  # torch.compile's module wrapper (None: not found)


def is_compiled(model: nn.Module, wrapper: type | None = WRAPPER) -> bool:
    """Is ``model`` the wrapper ``torch.compile`` returns for a module? (``wrapper=None``:
    the fallback, a module holding the compiled one as ``_orig_mod``.)"""
    if wrapper is not None:
        return isinstance(model, wrapper)
    return isinstance(getattr(model, "_orig_mod", None), nn.Module)


def _wrapper_fullgraph(model: nn.Module) -> bool:
    # the wrapper keeps dynamo's context, which keeps torch.compile's arguments
    return bool(getattr(getattr(model, "dynamo_ctx", None), "fullgraph", False))


def _call_fullgraph(module: nn.Module) -> bool:
    # ``Module.compile`` keeps torch.compile's function; its closure holds dynamo's context
    compiled = getattr(module, "_compiled_call_impl", None)
    for cell in getattr(compiled, "__closure__", None) or ():
        try:
            fullgraph = getattr(cell.cell_contents, "fullgraph", None)
        except ValueError:  # an empty cell
            continue
        if isinstance(fullgraph, bool):
            return fullgraph
    return False


Reads = tuple[Callable[[nn.Module], bool], Callable[[nn.Module], bool]]


def _probe_fullgraph(reads: Reads) -> bool:
    """On toys wrapped, never called (``torch.compile`` compiles at the first call only):
    ``fullgraph=True`` is found, and not found without it, on a wrapper and compiled in place."""
    wrapper, in_place = reads
    sealed, open_ = nn.Identity(), nn.Identity()
    sealed.compile(fullgraph=True)
    open_.compile()
    return (
        wrapper(torch.compile(nn.Identity(), fullgraph=True)) is True
        and wrapper(torch.compile(nn.Identity())) is False
        and in_place(sealed) is True
        and in_place(open_) is False
    )


FULLGRAPH: Internal[Reads] = Internal(
    "torch.compile's dynamo_ctx.fullgraph / Module.compile's _compiled_call_impl closure",
    (lambda model: True, lambda module: True),
    "every torch.compile'd model or part compiled in place is taken as fullgraph=True: its "
    "layers are not recorded live (a hook there could make a fullgraph forward raise)",
    lambda: (_wrapper_fullgraph, _call_fullgraph),
    _probe_fullgraph,
)


def is_fullgraph(model: nn.Module) -> bool:
    """Is ``model`` a ``torch.compile(..., fullgraph=True)`` wrapper (no graph break allowed)?"""
    return is_compiled(model) and FULLGRAPH.get()[0](model)


def fullgraph_parts(model: nn.Module) -> list[str]:
    """Parts of ``model`` where no graph break is allowed, so no layer can be recorded: ``[""]``
    for a ``torch.compile(..., fullgraph=True)`` wrapper, else the submodules compiled in place
    with ``block.compile(fullgraph=True)`` (a hook on them or inside would make forward raise)."""
    if is_fullgraph(model):
        return [""]
    return [n for n, m in unwrap(model).named_modules() if _fullgraph_call(m)]


def _fullgraph_call(module: nn.Module) -> bool:
    if getattr(module, "_compiled_call_impl", None) is None:
        return False  # not compiled in place: nothing to look up
    return FULLGRAPH.get()[1](module)


def compiled_parts(model: nn.Module) -> list[str]:
    """Names of the submodules compiled in place (``block.compile()``), outermost first."""
    found = [n for n, m in model.named_modules() if getattr(m, "_compiled_call_impl", None)]
    inside = {n for n in found for o in found if o != n and (o == "" or n.startswith(o + "."))}
    return [n for n in found if n not in inside]


def compile_safe(observe: Callable[..., None]) -> Callable[..., None]:
    """``observe`` as a hook that returns ``None`` and runs eagerly under torch.compile."""
    eager = torch.compiler.disable(observe)

    def hook(*args: Any) -> None:
        if torch.compiler.is_compiling():
            if not torch.compiler.is_exporting():
                eager(*args)
            return None
        observe(*args)
        return None

    _never_compiled(hook.__code__)
    return hook


def _never_compiled(code: Any) -> None:
    """Let dynamo run frames of ``code`` (and what they call) eagerly instead of compiling them.

    Inlined, the hook graph-breaks at ``eager``; dynamo then runs the hook's frame by itself and
    would compile it once per module type and argument shape (7 compiles of this one function
    for 12 layers of ResNet-18, and dynamo's recompile limit is 8). Inlining is unaffected, so
    a hook under ``torch.export`` still traces to nothing. Without the private setter, dynamo
    compiles the hook's frame per module shape: more compiles, the same values.
    """
    skip = _skip_frames()
    if skip is not None:
        skip(code)


def _skip_frames() -> Callable[[Any], None] | None:
    """dynamo's per-code "run eagerly" switch (private), or ``None`` where this torch lacks it."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:
        return None
    strategy = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    return lambda code: set_code_exec_strategy(code, strategy)


Around = Callable[..., Any]  # around(forward, *args, **kwargs) -> the forward's output


def run_eagerly(module: nn.Module, around: Around) -> EagerForward:
    """Call ``around(forward, *args, **kwargs)`` for each call of ``module``, eagerly even
    inside compiled code; ``.remove()`` on the returned handle puts the forward back."""
    return EagerForward(module, around)


class EagerForward:
    """The wrapper :func:`run_eagerly` sets as ``module.forward`` (see the module docstring).

    A copy (``copy.deepcopy``, ``Extract``) or a pickle of the module gets its plain forward.
    """

    def __init__(self, module: nn.Module, around: Around) -> None:
        self._module = weakref.ref(module)  # the module holds us: no reference cycle
        self._own = module.__dict__.get("forward")  # a forward set on the instance before us
        self._around = around
        self.__signature__ = inspect.signature(self._forward())  # as the forward it stands for
        module.forward = self

    def _forward(self) -> Callable[..., Any]:
        module = self._module()
        if module is None:
            raise RuntimeError("the module of this forward wrapper is gone")
        return self._own if self._own is not None else type(module).forward.__get__(module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            if torch.compiler.is_exporting():
                return self._forward()(*args, **kwargs)
            return self._eager(*args, **kwargs)
        return self._run(*args, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        return self._around(self._forward(), *args, **kwargs)

    # Looks the forward up itself: across a graph break dynamo would rebuild a bound forward
    # found before the break as ``module.forward``, which is this wrapper.
    _eager = torch.compiler.disable(_run)

    def remove(self) -> None:
        """Put the module's forward back (only if nobody replaced this wrapper since)."""
        module = self._module()
        if module is None or module.__dict__.get("forward") is not self:
            return
        if self._own is None:
            del module.forward
        else:
            module.forward = self._own

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _plain_forward, (self._module(), self._own)


def _plain_forward(module: nn.Module, own: Any) -> Any:
    """What a copy or a pickle of a wrapped module gets as its ``forward``."""
    return own if own is not None else type(module).forward.__get__(module)
