"""The Recorder's exchange: a rank's bucket sets and a recorded step's merge over the ranks.

A recorded step's buckets are merged by two all_reduces issued together (:mod:`.collect`). With
2+ ranks the merge runs while the next step trains (a collective's latency, not its size, is
most of its cost on gloo) and that step fills the spare :class:`Buckets`; the next ``step()``
(or ``close()``, or the writer's heartbeat once the collectives are done) waits for it, checks
it and hands the merged sums to the writer. The buckets are then zeroed and centred on the
merged means, the same on every rank. One rank sends nothing.

>>> import torch
>>> from surgeon_widgets.record.accumulate import accumulate
>>> from surgeon_widgets.record.layout import FINITE
>>> kept = []
>>> merges = Merges(1, torch.device("cpu"), 1, None, None, 0, lambda step, *_: kept.append(step))
>>> b = merges.current
>>> accumulate(b.sums, b.maxes, torch.tensor([1.0, 2.0, 6.0], dtype=torch.float64), None)
>>> b.sums[0, FINITE].item()
3.0
>>> b = merges.start(step=0)  # one rank: merged at once, handed to the writer, zeroed
>>> kept, b.sums[0, FINITE].item(), b.centres.tolist()  # centred on the merged mean
([0], 0.0, [3.0])
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .accumulate_native import Table
from .collect import RankMismatchError, distributed, finish_exchange, start_exchange
from .layout import HEAD, HOST_SUMS, MAX_WIDTH, SUM_WIDTH, TRAINED
from .merge import display_bins, next_centres

__all__ = ["Buckets", "Exchange", "Merges", "bucket_device"]


def bucket_device(model: nn.Module, group: Any) -> torch.device:
    """Where a Recorder's buckets live: on the CPU for gloo, else on the model's device."""
    if distributed(group) and dist.get_backend(group) == "gloo":
        return torch.device("cpu")
    first = next(iter(model.parameters()), None)
    return first.device if first is not None and not first.is_meta else torch.device("cpu")


class Buckets:
    """One step's device buckets: sums, maxes (after the HEAD rows), the centres its buckets
    are of, where the C loop adds (``table``; ``None`` off the CPU), and where the host's counts
    are written."""

    def __init__(self, keys: int, device: torch.device) -> None:
        self.sums = torch.zeros(keys, SUM_WIDTH, dtype=torch.float64, device=device)
        self.maxes_flat = torch.full((HEAD + keys * MAX_WIDTH,), float("-inf"),
                                     dtype=torch.float64, device=device)  # fmt: skip
        self.maxes = self.maxes_flat[HEAD:].view(keys, MAX_WIDTH)
        self.device = device
        self.centres = np.zeros(keys)  # changed in place: the table reads it
        self.table = Table(self.sums, self.maxes, self.centres) if device.type == "cpu" else None
        # where step() writes the counts the host knows: the buckets' own columns on a CPU,
        # else host tables copied in
        if device.type == "cpu":
            self.host_table = self.sums.numpy(), self.maxes.numpy()
            self.host_sums = self.host_table[0][:, :HOST_SUMS]
            self.host_maxes = self.host_table[1][:, TRAINED:]
        else:
            self.host_sums = np.zeros((keys, HOST_SUMS))
            self.host_maxes = np.full((keys, MAX_WIDTH - TRAINED), float("-inf"))


class Exchange:
    """A recorded step's collectives under way, the buckets they read and write, and once they
    are done and checked, the merged sum bucket (its records kept)."""

    def __init__(self, works: list[Any], buckets: Buckets, step: int) -> None:
        self.works, self.buckets, self.step = works, buckets, step
        self.sums: np.ndarray | None = None
        self.lock = threading.Lock()


Keep = Callable[[int, np.ndarray, np.ndarray, np.ndarray], None]


class Merges:
    """A rank's buckets (``current``: what this step fills) and the last recorded step's merge
    (``pending``) over ``world`` ranks of ``group``, checked against ``layer_hash``; ``board``
    (:class:`~.peers.Board` or ``None``) names the other ranks when a wait fails. ``keep``: the
    writer's ``(step, sums, maxes, display bins)`` of each merged step (``None``: not the
    writer)."""

    def __init__(
        self, keys: int, device: torch.device, world: int, group: Any, board: Any,
        layer_hash: int, keep: Keep | None,
    ) -> None:  # fmt: skip
        self.keys, self.world, self.group, self.board = keys, world, group, board
        self.hash, self._keep_records = layer_hash, keep
        self._centres = np.zeros(keys)  # each key's last merged mean (same on all ranks)
        self.pending: Exchange | None = None
        self._spare = Buckets(keys, device) if world > 1 else None
        self.current = Buckets(keys, device)
        self.use(self.current)

    def use(self, buckets: Buckets) -> None:
        """Fill ``buckets`` (zeroed) from now on, bucketed about the last merged means."""
        self.current = buckets
        np.copyto(buckets.centres, self._centres)

    def start(self, step: int) -> Buckets:
        """Issue the merge of ``current`` (recorded step ``step``, its host counts written);
        return the buckets the next step fills."""
        filled = self.current
        works = [] if self.world == 1 else start_exchange(
            filled.sums.view(-1), filled.maxes_flat, step, self.hash, self.group)  # fmt: skip
        # with 2+ ranks this step's merge runs while the next step trains: it is waited for,
        # checked and written in the next step() (or close()), and the next step fills the
        # spare buckets
        self.finish()
        self.pending = Exchange(works, filled, step)
        if self._spare is None:
            self.finish()
            self.use(filled)
        else:
            self._spare, spare = filled, self._spare
            self.use(spare)
        return self.current

    def finish(self, timeout: float | None = None) -> bool:
        """Wait for the last recorded step's merge (if not done yet), keep its records, and
        zero its buckets; buckets used from now on are centred on its means. ``False``: there
        was none."""
        exchange, self.pending = self.pending, None
        if exchange is None:
            return False
        with exchange.lock:
            sums = self._keep(exchange, timeout)
        b = exchange.buckets
        centres = None if b.table is None else b.table.clear()  # in C, the touched rows only
        if centres is None:
            centres = next_centres(sums, b.centres)
            b.sums.zero_()
            b.maxes_flat.fill_(float("-inf"))
        self._centres = centres
        return True

    def keep_if_done(self) -> None:
        """Keep the records of a merge whose collectives are done (the writer's heartbeat and
        stop signal; never waits: a busy training thread keeps them itself)."""
        exchange = self.pending
        if (exchange is None or exchange.sums is not None
                or not all(w.is_completed() for w in exchange.works)
                or not exchange.lock.acquire(blocking=False)):  # fmt: skip
            return
        try:
            self._keep(exchange)
        except RankMismatchError:  # the ranks disagreed: the next step() raises it
            pass
        finally:
            exchange.lock.release()

    def _keep(self, exchange: Exchange, timeout: float | None = None) -> np.ndarray:
        """The exchange's merged sum bucket, waited for and checked; the writer keeps its
        records (once: the heartbeat may have). Under ``exchange.lock``."""
        if exchange.sums is None:
            b, k = exchange.buckets, self.keys
            # (one rank sent nothing: nothing to wait for or check)
            if b.table is not None:  # on a CPU the buckets were reduced in place
                if self.world > 1:
                    self._wait(exchange, timeout)
                sums, maxes = b.host_table
            else:  # copied to the CPU
                sums, maxes = (self._wait(exchange, timeout) if self.world > 1
                               else (b.sums.cpu(), b.maxes_flat.cpu()))  # fmt: skip
                sums = sums.view(k, SUM_WIDTH).numpy()
                maxes = maxes[HEAD:].view(k, MAX_WIDTH).numpy()
            if self._keep_records is not None:  # merged and written in batches (see .pending)
                bins = None if b.table is None else b.table.display_bins()
                if bins is None:
                    bins = display_bins(sums, maxes, b.centres)
                self._keep_records(exchange.step, sums, maxes, bins)
            exchange.sums = sums
        return exchange.sums

    def _wait(
        self, exchange: Exchange, timeout: float | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """An exchange's reduced buckets; a rank that waited in vain names where the others are."""
        b = exchange.buckets
        try:
            return finish_exchange(exchange.works, b.sums.view(-1), b.maxes_flat, exchange.step,
                                   timeout)  # fmt: skip
        except RankMismatchError as error:
            if self.board is None:
                raise
            cause = error.__cause__
            if not isinstance(cause, RuntimeError):  # the ranks disagreed, every one knows
                self.board.report(str(error))
                raise
            message = self.board.waited_in_vain(exchange.step, cause)
            self.board.report(message)
            raise RankMismatchError(message) from cause
