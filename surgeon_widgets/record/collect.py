"""The collectives of one recording step: two fixed-shape all_reduces, checked before use.

The max bucket goes first and carries two extra rows, the step number and a hash of the
layer list, each as ``(x, -x)``, so one MAX reduction yields both the largest and the smallest
value over ranks. If they differ, every rank sees the same reduced values and raises the same
:class:`RankMismatchError` before the second collective: an error, never a mispaired hang.
Without an initialised process group (or with one rank) nothing is communicated.

>>> import torch
>>> sums, maxes = torch.zeros(2, 3), torch.zeros(4 + 2 * 3)
>>> s, m = reduce_buckets(sums, maxes, step=7, layer_hash=123, group=None)
>>> m[:4].tolist()
[7.0, -7.0, 123.0, -123.0]
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch
import torch.distributed as dist

from .layout import HEAD

__all__ = ["RankMismatchError", "check_same", "distributed", "layer_hash", "reduce_buckets"]


class RankMismatchError(RuntimeError):
    """Ranks disagree on the step number or on the recorded layers."""


def distributed(group: Any = None) -> bool:
    """Is there a process group with more than one rank to merge over?"""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def layer_hash(keys: list[str], every: int) -> int:
    """A 52-bit hash of the key list and ``every`` (exact in a float64)."""
    digest = hashlib.blake2b(json.dumps([keys, every]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 12


def check_same(values: Any, what: str, hint: str) -> None:
    """Raise if the ``(max, -min)`` pair in ``values`` shows ranks with different values."""
    top, low = float(values[0]), -float(values[1])
    if top != low:
        raise RankMismatchError(
            f"ranks disagree on {what}: between {low:.0f} and {top:.0f}. {hint}"
        )


def reduce_buckets(
    sums: torch.Tensor, maxes: torch.Tensor, step: int, layer_hash: int, group: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """All-reduce ``maxes`` (MAX; its first rows become step and hash) then ``sums`` (SUM).

    Returns the reduced buckets on the CPU. Raises :class:`RankMismatchError` on every rank
    when ranks disagree, before ``sums`` is reduced.
    """
    head = [step, -step, layer_hash, -layer_hash]
    if maxes.device.type == "cpu":
        maxes.numpy()[:HEAD] = head
    else:
        maxes[:HEAD].copy_(torch.tensor(head, dtype=maxes.dtype))
    if distributed(group):
        try:
            dist.all_reduce(maxes, op=dist.ReduceOp.MAX, group=group)
        except RuntimeError as error:  # gloo / nccl timeout or a rank that went away
            raise RankMismatchError(
                f"rec.step() at step {step}: the other ranks did not join ({error}). A rank "
                "skipped or stopped calling rec.step(), or stopped altogether; pass your own "
                "step number, rec.step(step), to catch a skipped step at once."
            ) from error
    host_max = maxes.cpu()
    seen = host_max[:HEAD].tolist()  # one conversion: indexing a tensor per number costs more
    check_same(
        seen[2:4],
        "the recorded layers (hash of the layer list)",
        "Every rank must build its Recorder with the same layers, gradients, params and every.",
    )
    hint = "Call rec.step() once per optimizer step on every rank; one skipped or added one."
    check_same(seen[0:2], "the step number", hint)
    if distributed(group):
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
    return sums.cpu(), host_max
