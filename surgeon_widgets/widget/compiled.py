"""torch.compile support of the live views: the user's own module, and hooks dynamo runs eagerly.

``torch.compile(model)`` returns a wrapper whose names all start with ``_orig_mod.``; the
Explorer shows, hooks and traces :func:`unwrap` (the model's own names). A hook made by
:func:`compile_safe` is plain Python in eager mode; inside a compiled region dynamo calls it
through ``torch.compiler.disable``, so the reduction runs eagerly on real tensors and never
enters (or breaks up more than once) the user's graph. Under ``torch.export`` it returns at once.

>>> import torch
>>> from torch import nn
>>> model = nn.Linear(2, 2)
>>> unwrap(torch.compile(model)) is model, is_compiled(model)
(True, False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["compile_safe", "is_compiled", "unwrap"]


def is_compiled(model: nn.Module) -> bool:
    """Is ``model`` the wrapper ``torch.compile`` returns for a module?"""
    return isinstance(model, torch._dynamo.eval_frame.OptimizedModule)


def unwrap(model: nn.Module) -> nn.Module:
    """The user's own module behind a ``torch.compile`` wrapper (names without ``_orig_mod.``)."""
    while is_compiled(model):
        model = model._orig_mod
    return model


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

    return hook
