"""When the package's own hooks must stay out of the way: the one guard every hook passes.

A live hook (Explorer statistics, gradients, attention capture, the recorder) must never take
part in somebody else's trace or in the package's own forwards, or it changes what the user
sees: extra graph nodes, an fx failure, a different cut verdict. :func:`inert` says when to
return at once; :func:`internal` marks a forward the package itself runs (shape measurement,
cut analysis, tracing), so that no live view records it.

>>> import torch
>>> inert(torch.ones(1)), inert(torch.ones(1, device="meta"))
(False, True)
>>> with internal():
...     inert(torch.ones(1))
True
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx

from .torch_internals import (
    DETECT_FAKE_MODE,
    FUNCTORCH_ACTIVE,
    FX_TRACING,
    IS_FAKE,
    MAY_BE_WRAPPED,
    MAY_HAVE_FAKE_MODE,
)

__all__ = ["inert", "internal", "is_internal", "tracing"]

_INTERNAL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "surgeon_widgets_internal", default=False
)


@contextlib.contextmanager
def internal() -> Iterator[None]:
    """Mark the forwards run inside this block as the package's own (never recorded)."""
    token = _INTERNAL.set(True)
    try:
        yield
    finally:
        _INTERNAL.reset(token)


def is_internal() -> bool:
    """Is the calling thread inside :func:`internal`?"""
    return _INTERNAL.get()


def tracing() -> bool:
    """Is any tracer running here: torch.fx, dynamo / torch.export, or a functorch transform?"""
    return (
        FX_TRACING.get()()
        or torch.compiler.is_compiling()
        or torch.compiler.is_exporting()
        or FUNCTORCH_ACTIVE.get()()
        or _fake_mode()
    )


# Every live hook asks on every forward, so the common eager answers are found cheaply
# (about 1 us instead of 15): the same checks, with torch's slower general ones only when a
# cheap one cannot rule a case out.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _fake_mode() -> bool:
    # detect_fake_mode() looks in a TracingContext and on the dispatch mode stack: both empty here
    if not MAY_HAVE_FAKE_MODE.get()():
        return False
    return DETECT_FAKE_MODE.get()() is not None


def _fake(t: torch.Tensor) -> bool:
    # a plain tensor (no Python subclass) is fake only as a C++ fake or under a wrapper
    if type(t) in _PLAIN and not MAY_BE_WRAPPED.get()(t):
        return False
    return IS_FAKE.get()(t)


def _symbolic(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_meta or _fake(value)
    if isinstance(value, torch.fx.Proxy):
        return True
    if isinstance(value, (list, tuple)):
        return any(_symbolic(v) for v in value)
    if isinstance(value, dict):
        return any(_symbolic(v) for v in value.values())
    return False


def inert(*values: Any) -> bool:
    """Should a hook seeing ``values`` (its args / output) return at once?

    True inside :func:`internal`, under any tracer (:func:`tracing`), and when a value is an
    fx Proxy, a fake tensor or a meta tensor (they have no values to show).
    """
    if _INTERNAL.get() or tracing():
        return True
    for value in values:  # a loop, not any(generator): every hook call of the package asks
        if type(value) is torch.Tensor:
            if value.is_meta or _fake(value):
                return True
        elif _symbolic(value):
            return True
    return False
