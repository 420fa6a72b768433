"""The user's own module inside the wrappers training puts around it (DDP, torch.compile).

Names, hooks and traces use the module the user wrote, so every name shown is one every API
accepts (no ``module.`` or ``_orig_mod.`` prefix). FSDP2's ``fully_shard`` wraps nothing (it
changes the module in place), so it needs no unwrapping.

>>> model = nn.Linear(2, 2)
>>> unwrap(torch.compile(model)) is model
True
"""

from __future__ import annotations

from torch import nn

__all__ = ["unwrap"]


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside DDP (``.module``) and ``torch.compile`` (``._orig_mod``), at any depth."""
    from torch.nn.parallel import DistributedDataParallel

    while True:
        if isinstance(model, DistributedDataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model
