"""Parameter values as this rank holds them, each replicated copy counted once over the group.

FSDP2 (``fully_shard``) keeps parameters as DTensors: this rank contributes its local shard,
unless the parameter is replicated along a mesh dimension where this rank is not coordinate 0
(HSDP). A plain parameter under DDP is a full copy on every rank: only group rank 0 counts it.

>>> import torch
>>> p = torch.nn.Parameter(torch.ones(3))
>>> local_values(p, 0).tolist(), local_values(p, 1)
([1.0, 1.0, 1.0], None)
"""

from __future__ import annotations

import torch

__all__ = ["local_values"]


def local_values(param: torch.Tensor, group_rank: int) -> torch.Tensor | None:
    """The values of ``param`` this rank contributes to merged statistics, or ``None``."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        DTensor = ()
    if isinstance(param, DTensor):
        mesh = param.device_mesh
        for dim, placement in enumerate(param.placements):
            if placement.is_replicate() and mesh.get_local_rank(dim) != 0:
                return None
        return param.to_local().detach()
    return param.detach() if group_rank == 0 else None
