"""The Recorder's own process group, and what ranks tell each other through the job's store.

The Recorder's collectives run on a group of its own (same ranks, its own timeout), created
once per set of ranks, so they can never pair with the training's: a rank that called
``rec.step()`` once more than the others waits in the Recorder's group, not in DDP's.
When that wait times out, :class:`Board` says where the other ranks are (each rank posts its
last step to the job's store) and carries the error to every rank (and to the writer, which
marks the folder ``failed``). At ``close()`` the ranks compare their step counts there (a
bounded wait, no collective), so an extra or missing ``rec.step()`` fails every rank. Without a
process group (or with one rank) there is no board.

>>> recorder_group(None) is None  # no process group here
True
"""

from __future__ import annotations

import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..engine.torch_internals import DEFAULT_STORE
from .collect import RankMismatchError, check_same

__all__ = ["Board", "agree_at_start", "name_other_layers", "recorder_group"]

_GROUPS: dict[tuple, tuple[Any, Any]] = {}  # (ranks, backend, timeout) -> (world, group)
_SERIALS: dict[tuple, tuple[Any, int]] = {}  # ranks -> (world, Recorders made on them)


def _world() -> Any:
    return dist.group.WORLD


def _ranks(group: Any) -> tuple[int, ...]:
    return tuple(dist.get_process_group_ranks(group if group is not None else _world()))


def recorder_group(group: Any, timeout: timedelta | None = None) -> Any:
    """The Recorder's own group over the ranks of ``group`` (default: the world), made once.

    ``None`` without a process group of more than one rank. Over the whole world every rank
    makes it (as ``new_group`` needs); over a subgroup only its ranks do
    (``use_local_synchronization``), so make your own groups before the first Recorder.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) < 2:
        return None
    ranks = _ranks(group)
    backend = str(dist.get_backend(group))
    key = (ranks, backend, timeout)
    world = _world()
    cached = _GROUPS.get(key)
    if cached is not None and cached[0] is world:  # a new init_process_group makes a new world
        return cached[1]
    whole = len(ranks) == dist.get_world_size()
    own = dist.new_group(ranks=list(ranks), timeout=timeout, backend=backend,
                         use_local_synchronization=not whole,
                         group_desc="surgeon_widgets_recorder")  # fmt: skip
    _GROUPS[key] = (world, own)
    return own


def agree_at_start(
    group: Any, keys: list[str], every: int, layer_hash: int, start: int | Exception,
    writer: int, path: Path, device: torch.device,
) -> int:  # fmt: skip
    """The first step on every rank, from one fixed-shape collective at construction.

    ``start``: the writer's first step, or its refusal of the folder (other ranks pass -1).
    All ranks raise together (the refusal, or layer lists that differ, named) or start at the
    writer's step. Without ``group`` (one rank) ``start`` is returned or raised.
    """
    refused = isinstance(start, Exception)
    if group is None:
        if refused:
            raise start
        return int(start)
    k = float(len(keys))
    first = -1.0 if refused else float(start)
    probe = torch.tensor([layer_hash, -layer_hash, k, -k, first, float(refused)],
                         dtype=torch.float64, device=device)  # fmt: skip
    dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=group)
    probe = probe.cpu()
    if probe[5] > 0:
        if refused:
            raise start
        raise FileExistsError(
            f"rank {writer} (the writer) refused {path}: its error says why (an existing run "
            "needs resume=True; other files need a new folder)"
        )
    if probe[0] != -probe[1]:
        name_other_layers(group, keys, every)
    hint = ("Build the Recorder with the same layers, gradients, params and every on every "
            "rank (it cannot merge keys that only some ranks have)")  # fmt: skip
    check_same(probe[2:4], "the number of recorded keys", hint)
    check_same(probe[0:2], "the recorded layers (hash of the layer list)", hint)
    return int(probe[4])


def name_other_layers(group: Any, keys: list[str], every: int) -> None:
    """Ranks saw different layer lists (every rank calls this): raise, naming what differs."""
    rank = dist.get_rank(group)
    lists: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(lists, (keys, every), group=group)
    for r, (theirs, their_every) in enumerate(lists):
        if (theirs, their_every) == (keys, every):
            continue
        if sorted(theirs) == sorted(keys) and their_every == every:
            what = (f"the same keys in another order: rank {rank} {keys}, rank {r} {theirs}; "
                    "give the layers in one order on every rank")  # fmt: skip
        elif their_every != every:
            what = f"every={every} on rank {rank}, every={their_every} on rank {r}"
        else:
            what = (f"rank {r} has {[x for x in theirs if x not in keys]} and not "
                    f"{[x for x in keys if x not in theirs]} (rank {rank})")  # fmt: skip
        raise RankMismatchError(
            f"ranks disagree on the recorded layers: {what}. Build the Recorder with the same "
            "layers, gradients, params and every on every rank."
        )


# what every step-count disagreement tells the user, wherever it is found
_MISCOUNT = (
    "One rank called rec.step() more or fewer times than the others; pass your own step "
    "number, rec.step(step), to catch a skipped step in the next rec.step()."
)


class Board:
    """Notes of one Recorder's ranks in the job's store: each rank's last step, one error."""

    def __init__(self, group: Any) -> None:
        self.rank = dist.get_rank(group)
        self.ranks = _ranks(group)
        world = _world()
        seen = _SERIALS.get(self.ranks)
        serial = seen[1] + 1 if seen is not None and seen[0] is world else 0
        _SERIALS[self.ranks] = (world, serial)  # every rank makes its Recorders in one order
        self.prefix = f"surgeon_widgets/recorder/{'-'.join(map(str, self.ranks))}/{serial}/"
        self.store = DEFAULT_STORE.get()()
        self._posted: int | None = None
        self._gone = False  # a store call failed: its server (rank 0's process) is gone

    def post(self, step: int) -> None:
        """Tell the other ranks this rank's last ``rec.step()`` (only when it changed)."""
        if step != self._posted and self._call("set", f"step/{self.rank}", str(step)):
            self._posted = step

    def steps(self) -> dict[int, int | None]:
        """Each group rank's last posted step (``None``: not posted or the store is gone)."""
        out: dict[int, int | None] = {}
        for r in range(len(self.ranks)):
            value = self._read(f"step/{r}")
            out[r] = int(value) if value is not None else None
        return out

    def report(self, message: str) -> None:
        """Tell every rank why this Recorder failed (the first report stays)."""
        if self._read("failed") is None:
            self._call("set", "failed", message)

    def failure(self) -> str | None:
        """The error some rank reported, if any."""
        return self._read("failed")

    def waited_in_vain(self, step: int, cause: BaseException) -> str:
        """The error of a rank whose collective at ``step`` failed: where the others are."""
        others = {r: s for r, s in self.steps().items() if r != self.rank}
        where = ", ".join(f"rank {r} was last at step {'?' if s is None else s}"
                          for r, s in others.items())  # fmt: skip
        differ = any(s is not None and s != step for s in others.values())
        head = ("ranks disagree on the step number" if differ
                else "the other ranks did not join this step")  # fmt: skip
        return (f"{head}: rank {self.rank} is at rec.step() of step {step}, {where} (it did not "
                f"join: {cause}). {_MISCOUNT}")  # fmt: skip

    def agree_at_close(self, steps: int, last: int, failed: bool, wait: float) -> str | None:
        """Post how many steps this rank took (``failed``: it closes with an error and does not
        wait) and wait, at most ``wait`` seconds, for every rank's: the error to raise when the
        counts differ or a rank reported one; ``None`` when they agree, when a rank failed
        otherwise (its own error says why), or, with a warning, when a rank did not close in
        time. A rank already past this rank's ``last`` step fails at once (it may wait in a
        merge this rank never joins). Store reads only: a crashed rank costs the wait, never a
        hang."""
        self._call("set", f"closed/{self.rank}", f"{steps} {int(failed)}")
        if failed:  # failing already (and a peer may be gone with it): nothing to wait for
            self._call("set", f"read/{self.rank}", "1")
            return self.failure()
        closed = self._wait_for("closed", wait, last)
        failure = self.failure()
        if failure is not None or closed is None:
            return failure
        self._call("set", f"read/{self.rank}", "1")
        if self.ranks[self.rank] == 0:  # the store's host stays until every rank has read
            self._wait_for("read", min(wait, 10.0))
        counts = {r: int(v.split()[0]) for r, v in closed.items()}
        if any(v.split()[1] == "1" for v in closed.values()) or len(set(counts.values())) == 1:
            return None
        where = ", ".join(f"rank {r} after {n} rec.step() calls (last step {n - 1})"
                          for r, n in counts.items())  # fmt: skip
        self.report(f"ranks disagree on the number of steps: they closed at {where}. {_MISCOUNT}")
        return self.failure()

    def _wait_for(self, name: str, wait: float, last: int | None = None) -> dict[int, str] | None:
        """Every rank's ``name/<rank>`` note, polled until ``wait`` seconds pass (``None``, with
        a warning), a rank reports an error, one is past step ``last`` (reported) or the store
        is gone (``None``)."""
        deadline, pause = time.monotonic() + wait, 0.005
        while True:
            notes = {r: self._read(f"{name}/{r}") for r in range(len(self.ranks))}
            if all(v is not None for v in notes.values()):
                return notes
            if self._gone or self.failure() is not None:
                return None
            ahead = {} if last is None else {r: s for r, s in self.steps().items()
                                             if s is not None and s > last}  # fmt: skip
            if ahead:
                where = ", ".join(f"rank {r} is at step {s}" for r, s in ahead.items())
                self.report(f"ranks disagree on the number of steps: rank {self.rank} closed "
                            f"after step {last}, {where}. {_MISCOUNT}")  # fmt: skip
                return None
            if time.monotonic() > deadline:
                missing = [r for r, v in notes.items() if v is None]
                if name != "closed":
                    return None
                warnings.warn(f"Recorder.close(): rank(s) {missing} did not close within {wait:.0f}"
                              " s; the ranks' step counts were not compared", RuntimeWarning,
                              stacklevel=4)  # fmt: skip
                return None
            time.sleep(pause)
            pause = min(2 * pause, 0.1)

    def _read(self, key: str) -> str | None:
        if self.store is None or not self._call("check", [self.prefix + key], raw=True):
            return None
        value = self._call("get", key)
        return value.decode() if isinstance(value, bytes) else None

    def _call(self, name: str, *args: Any, raw: bool = False) -> Any:
        if self.store is None:
            return None
        if not raw:
            args = (self.prefix + args[0], *args[1:])
        try:
            result = getattr(self.store, name)(*args)
        except (RuntimeError, ValueError):  # the store's server (rank 0's process) is gone
            self._gone = True
            return None
        return True if result is None else result
