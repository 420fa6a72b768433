"""The collectives of one recording step: two fixed-shape all_reduces, checked before use.

The max bucket goes first and carries two extra rows, the step number and a hash of the
layer list, each as ``(x, -x)``, so one MAX reduction yields both the largest and the smallest
value over ranks. Both are issued at once (on gloo a collective's latency, about 2 ms here,
is most of its cost); having fixed shapes they pair whatever the ranks' state. If the step
numbers or hashes differ, every rank sees the same reduced values and raises the same
:class:`RankMismatchError` before the sums are used: an error, never a mispaired hang.
Without an initialised process group (or with one rank) nothing is communicated.

>>> import torch
>>> sums, maxes = torch.zeros(2, 3), torch.zeros(4 + 2 * 3)
>>> works = start_exchange(sums, maxes, step=7, layer_hash=123, group=None)
>>> s, m = finish_exchange(works, sums, maxes, step=7)
>>> m[:4].tolist()
[7.0, -7.0, 123.0, -123.0]
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .layout import HEAD

__all__ = [
    "RankMismatchError", "check_same", "distributed", "finish_exchange", "layer_hash",
    "start_exchange",
]  # fmt: skip


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


def start_exchange(
    sums: torch.Tensor, maxes: torch.Tensor, step: int, layer_hash: int, group: Any
) -> list[Any]:
    """Issue both all_reduces (none without a group of 2+ ranks); ``sums`` and ``maxes`` must
    not change until :func:`finish_exchange` returns."""
    head = [step, -step, layer_hash, -layer_hash]
    if maxes.device.type == "cpu":
        maxes.numpy()[:HEAD] = head
    else:
        maxes[:HEAD].copy_(torch.tensor(head, dtype=maxes.dtype))
    if not distributed(group):
        return []
    # both at once: the second's latency overlaps the first's (fixed shapes, so they pair
    # whatever the ranks' step numbers; the sums are used only once those are checked)
    return [dist.all_reduce(t, op=op, group=group, async_op=True)
            for t, op in ((maxes, dist.ReduceOp.MAX), (sums, dist.ReduceOp.SUM))]  # fmt: skip


def finish_exchange(
    works: list[Any],
    sums: torch.Tensor,
    maxes: torch.Tensor,
    step: int,
    timeout: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Wait for :func:`start_exchange`'s collectives (at most ``timeout`` seconds each; default:
    the group's timeout) and check the ranks agreed; the reduced buckets on the CPU, or
    :class:`RankMismatchError` (a timeout: its ``__cause__``)."""
    try:
        for work in works:
            work.wait() if timeout is None else work.wait(timedelta(seconds=timeout))
    except RuntimeError as error:  # gloo / nccl timeout or a rank that went away
        raise RankMismatchError(
            f"rec.step() at step {step}: the other ranks did not join ({error}). A rank "
            "skipped or stopped calling rec.step(), or stopped altogether; pass your own "
            "step number, rec.step(step), to catch a skipped step in the next rec.step()."
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
    return sums.cpu(), host_max
