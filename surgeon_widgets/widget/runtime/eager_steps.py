"""Forwards of a compiled model that the live views record run eagerly: no hook in any graph.

A compiled model has one outermost call that enters dynamo's compiled code: the ``forward``
dynamo sets on a ``torch.compile(model)`` wrapper, or the ``_compiled_call_impl`` that
``model.compile()`` sets on the module. :func:`eager_steps` puts an :class:`EagerSteps` there.
Each call of the model first asks ``plan(args, kwargs)``: ``None`` runs the compiled code
untouched (the usual step); a context manager (an update is due) is entered, the call runs
under ``torch.compiler.set_stance("force_eager")`` (so blocks compiled in place inside run
eagerly too), and the context manager is exited. ``timed(eager, seconds)``, if given, hears
how long each call took. ``compiling(True)``, if given, hears that a call enters the compiled
code while no call of it has returned yet (dynamo compiles the model in that call: 38 s for a
ResNet-18 in issue 32), ``compiling(False)`` that it returned; a call that raised leaves the
code cold (the next call compiles again). Nothing of dynamo's is read for it: the first
compiled call of a model compiled before :func:`eager_steps` was called says so too, for as
long as that call takes. The hooks the views need are added on enter
and taken off on exit, so the compiled graph never sees one: its guards never change, no
selection change compiles a graph or adds a graph break, and the user's compiled code stays
cached. The call's backward is eager autograd, so gradient hooks added in that forward fire.

The stance is global while the eager forward runs (another thread's compiled call meanwhile
also runs eagerly). Inside a compiled region (``torch.compile(train_step)`` around the model)
the plan is not asked: that call runs compiled, unobserved.

Private torch APIs, each looked up where used with a fallback: the wrapper's ``forward``
instance attribute and ``Module.compile``'s ``_compiled_call_impl``. Where neither is found,
:func:`eager_steps` returns ``None`` and the views hook the modules as on an eager model
(dynamo then recompiles at a selection change, see :mod:`.hook_guards`).

>>> import contextlib, torch
>>> from torch import nn
>>> model = torch.compile(nn.Linear(2, 2), backend="eager")
>>> seen = []
>>> def plan(args, kwargs):
...     seen.append(torch.compiler.is_compiling())
...     return contextlib.nullcontext() if len(seen) == 2 else None
>>> steps = eager_steps(model, plan)
>>> _ = [model(torch.ones(1, 2)) for _ in range(3)]
>>> seen, steps.eager
([False, False, False], 1)
>>> steps.remove(); available(model), "forward" in model.__dict__
(True, True)
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from .compiled import is_compiled

__all__ = ["EagerSteps", "Plan", "available", "dynamo_counts", "eager_steps", "entry"]

log = logging.getLogger("surgeon_widgets.explorer")

Plan = Callable[[tuple, dict], "AbstractContextManager[Any] | None"]
Timed = Callable[[bool, float], None]
Compiling = Callable[[bool], None]


def entry(model: nn.Module) -> str | None:
    """The instance attribute of ``model`` (as the user calls it) holding its compiled call:
    ``"forward"`` (a ``torch.compile`` wrapper), ``"_compiled_call_impl"`` (``model.compile()``),
    or ``None`` (an eager model, or a torch where neither is where this package looks)."""
    own = model.__dict__
    if is_compiled(model) and callable(own.get("forward")) and not _lazy(model):
        return "forward"
    if callable(own.get("_compiled_call_impl")):
        return "_compiled_call_impl"
    return None


def _lazy(model: nn.Module) -> bool:
    # a wrapper of a lazy module keeps dynamo's forward as ``_forward`` behind a shape check
    return "_forward" in model.__dict__


def available(model: nn.Module) -> bool:
    """Can :func:`eager_steps` run ``model``'s observed forwards eagerly?"""
    return entry(model) is not None


def eager_steps(
    model: nn.Module, plan: Plan, timed: Timed | None = None, compiling: Compiling | None = None
) -> EagerSteps | None:
    """Ask ``plan(args, kwargs)`` at each call of compiled ``model`` (see the module docstring);
    ``None`` when ``model`` has no compiled call to stand in for (:func:`entry`)."""
    name = entry(model)
    return None if name is None else EagerSteps(model, name, plan, timed, compiling)


class EagerSteps:
    """Stands in for a compiled model's outermost call until :meth:`remove`.

    ``eager``: how many calls ran eagerly so far; ``cold``: no call of the compiled code has
    returned yet. A copy or a pickle of the model gets the compiled call itself.
    """

    def __init__(
        self,
        model: nn.Module,
        name: str,
        plan: Plan,
        timed: Timed | None = None,
        compiling: Compiling | None = None,
    ) -> None:
        self._model = weakref.ref(model)
        self._name = name
        self._compiled = model.__dict__[name]
        self._plan = plan
        self._timed = timed
        self._compiling = compiling
        self.eager = 0
        self.cold = True
        object.__setattr__(model, name, self)  # past nn.Module's and dynamo's __setattr__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return self._compiled(*args, **kwargs)
        plan = self._plan(args, kwargs)
        start = time.perf_counter()
        eager = False
        with contextlib.ExitStack() as stack:
            if plan is not None:
                try:
                    stack.enter_context(torch.compiler.set_stance("force_eager"))
                    stack.enter_context(plan)
                    eager = True
                    self.eager += 1
                except RuntimeError:  # called from inside a compiled frame: compiled, unseen
                    stack.close()
            if self.cold and not eager:
                output = self._first_compiled(args, kwargs)
            else:
                output = self._compiled(*args, **kwargs)
        if self._timed is not None:
            self._timed(eager, time.perf_counter() - start)
        return output

    def _first_compiled(self, args: tuple, kwargs: dict) -> Any:
        """A call of the compiled code before any returned: dynamo compiles in it."""
        self._tell(True)
        try:
            output = self._compiled(*args, **kwargs)
            self.cold = False
        finally:
            self._tell(False)
        return output

    def _tell(self, compiling: bool) -> None:
        if self._compiling is None:
            return
        try:
            self._compiling(compiling)
        except Exception:  # the user's call goes on
            log.exception("Explorer: telling the view about the compile failed")

    def remove(self) -> None:
        """Put the compiled call back (only if nobody replaced this one since)."""
        model = self._model()
        if model is not None and model.__dict__.get(self._name) is self:
            object.__setattr__(model, self._name, self._compiled)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _same, (self._compiled,)


def dynamo_counts() -> tuple[int, int] | None:
    """``(graphs compiled, graph breaks met)`` by dynamo so far in this process, from its
    counters (private); ``None`` where this torch has none (callers then count nothing)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def _same(value: Any) -> Any:
    """What a copy or a pickle of a model gets in place of its :class:`EagerSteps`."""
    return value
