"""Dynamo sees the Explorer's hooks: hook guards on while an Explorer lives, and a narrow reset.

By default ``torch._dynamo`` compiles no guard on a module's hook dicts
(``torch._dynamo.config.skip_nnmodule_hook_guards = True``), so a hook added or removed after a
compile is silently ignored: compiled code runs the hooks the module had when it was compiled,
for every module of that class. While at least one :class:`Lease` is held (one per live
Explorer), the option is ``False``, so code compiled meanwhile guards the hook dicts and a
selection change recompiles instead. When the last lease is released (``close()``, a newer
Explorer, or collection), the user's own value comes back, unless they changed it since.

Code compiled before has no such guards. :func:`hold` drops only the compiled code that can
run this model's modules: the cache entries of its module classes' ``forward`` (with the resume
functions dynamo made from them at graph breaks) and, for a model whose root is a ``torch.nn``
container, dynamo's shared ``wrap_inline`` frame. Other models' compiled code survives (a model
sharing a module class with this one recompiles once). Not reset: a function compiled around
the model (``torch.compile(train_step)``) before the Explorer existed; ``torch.compiler.reset()``
once, by hand, covers that case. A torch whose dynamo config has no such option (``CONFIG``
is ``None``) gets leases that change nothing.

>>> import torch
>>> from torch import nn
>>> before = torch._dynamo.config.skip_nnmodule_hook_guards
>>> lease = hold(nn.Linear(2, 2))
>>> torch._dynamo.config.skip_nnmodule_hook_guards
False
>>> lease.release(); torch._dynamo.config.skip_nnmodule_hook_guards == before
True
"""

from __future__ import annotations

import logging
import threading
import types
import weakref
from collections.abc import Iterator

import torch
from torch import nn

from ...engine.wrappers import unwrap

__all__ = ["CONFIG", "OPTION", "Lease", "forget_compiled", "hold", "holders"]

log = logging.getLogger("surgeon_widgets.explorer")
OPTION = "skip_nnmodule_hook_guards"


def _config() -> object | None:
    """dynamo's config, if it has the option; ``None`` (a torch without it): nothing to switch,
    and :func:`hold` leaves compiled code alone."""
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    return config if hasattr(config, OPTION) else None


CONFIG = _config()
_LOCK = threading.Lock()
_fresh: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # code reset since the guards are on


class _Held:
    count = 0  # leases held now
    saved = True  # the user's value before the first one


class Lease:
    """Keeps dynamo's hook guards on until :meth:`release` (idempotent)."""

    def __init__(self, config: object | None = CONFIG) -> None:
        self._config = config
        self._held = config is not None

    def release(self) -> None:
        with _LOCK:
            if not self._held:
                return
            self._held = False
            _Held.count -= 1
            if _Held.count == 0:
                if getattr(self._config, OPTION) is False:  # else the user changed it since
                    setattr(self._config, OPTION, _Held.saved)
                _fresh.clear()


def holders() -> int:
    """How many leases are held now (one per live Explorer)."""
    return _Held.count


def hold(model: nn.Module, config: object | None = CONFIG) -> Lease:
    """Turn dynamo's hook guards on (until the lease is released) and drop ``model``'s old code.

    ``model``: as the user calls it (a ``torch.compile`` wrapper or the module itself).
    ``config``: dynamo's config (``None``: the fallback, a lease that changes nothing).
    """
    if config is None:
        return Lease(None)
    root = unwrap(model)
    with _LOCK:
        if _Held.count == 0:
            _Held.saved = getattr(config, OPTION)
        _Held.count += 1
        setattr(config, OPTION, False)
        stale = root not in _fresh
        _fresh.add(root)
    if stale:
        forget_compiled(root)
    return Lease(config)


def forget_compiled(model: nn.Module) -> int:
    """Drop dynamo's compiled code that can run ``model``'s modules; return the code count.

    Rests on private dynamo APIs (per-code cache reset, resume-function cache); where one is
    missing, falls back to ``torch.compiler.reset()`` (all compiled code) and returns ``-1``.
    """
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list, reset_code
        from torch._dynamo import convert_frame

        with convert_frame.compile_lock:
            stale = [code for code in _codes(model) if _debug_get_cache_entry_list(code)]
            for code in stale:
                reset_code(code)
        return len(stale)
    except (ImportError, AttributeError, TypeError):
        log.warning("Explorer: dynamo's per-code reset is missing; resetting all compiled code")
        torch.compiler.reset()
        return -1


def _codes(model: nn.Module) -> Iterator[types.CodeType]:
    from torch._dynamo.eval_frame import OptimizedModule
    from torch._dynamo.external_utils import wrap_inline
    from torch._dynamo.resume_execution import ContinueExecutionCache

    roots: list[types.CodeType] = []
    for cls in {type(m) for m in model.modules()}:
        code = getattr(getattr(cls, "forward", None), "__code__", None)
        if isinstance(code, types.CodeType):
            roots.append(code)
    if OptimizedModule._forward_has_skip_rule(model) or torch._dynamo.config.wrap_top_frame:
        roots.append(wrap_inline(lambda: None).__code__)  # the frame torch.compile adds
    seen: set[int] = set()
    while roots:
        code = roots.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        yield code
        roots.extend(ContinueExecutionCache.cache.get(code, {}).values())  # graph-break resumes
