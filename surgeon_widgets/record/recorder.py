"""Recorder: merged statistics of selected layers on every rank of a training job, to a run folder.

Hooks only add into two device buckets (they never communicate or sync the host); every
collective happens in :meth:`Recorder.step`: two fixed-shape all_reduces (see
:mod:`.collect`) on the Recorder's own process group (:mod:`.peers`), so they never pair with
the training's. Which steps record is a pure function of the step counter
(``step % every == 0``). :meth:`Recorder.close` does no collective (the ranks compare their
step counts in the job's store, a bounded wait). The writer rank's run
folder says ``running`` (heartbeat), then ``finished``, ``failed`` (an error, also another
rank's) or ``stopped`` (SIGTERM / SIGINT, :mod:`.signals`); ``resume=True`` appends to a run.

>>> import tempfile, torch
>>> from torch import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
>>> folder = tempfile.mkdtemp()
>>> rec = Recorder(model, folder, layers=["0", "2"], every=2)
>>> for _ in range(4):
...     model(torch.randn(5, 4)).sum().backward()
...     rec.step()
>>> rec.close()
>>> rec.cost.recorded, rec.cost.steps
(2, 4)
"""

from __future__ import annotations

import atexit
import signal
import time
import weakref
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist
from torch import nn

from ..engine.module_tree import module_rows
from ..engine.naming import UnknownNameError
from ..engine.registry import HookRegistry
from ..engine.wrappers import unwrap
from .collect import RankMismatchError, distributed, layer_hash
from .cost import RecorderCost
from .exchange import Merges, bucket_device
from .intake import Intake, forward_hook
from .layout import BINS, DTYPES, FIELDS, FORMAT, MODES, RECORD, make_keys
from .params import local_values
from .peers import Board, agree_at_start, recorder_group
from .pending import Pending
from .runfolder import RunWriter, first_step
from .signals import on_stop_signals

__all__ = ["Recorder", "RecorderCost"]


class Recorder:
    """Record merged statistics of ``layers`` of ``model`` every ``every`` steps into ``path``.

    Call :meth:`step` once per optimizer step on every rank, after ``backward()``. Each
    recorded step writes one record per key: ``layer/output`` (the first tensor of the
    output), ``layer/grad_output`` (its gradient, ``gradients=True``), ``layer/<param>`` and
    ``layer/<param>.grad`` (``params=True``; the gradient also needs ``gradients=True``; read
    from local shards in :meth:`step`), merged over every rank of ``group``.

    Forwards while ``model.training`` is False (an eval pass) are kept out of a step's
    training records: a record holds the training forwards of its step, or, at a step with
    none, its eval forwards. The record's ``mode`` says which (``RunStats.mode``: ``train``,
    ``eval``, or ``mixed`` when ranks differed) and ``eval_calls`` counts the eval forwards
    left out. Each record's histogram covers all of that step's finite values (fixed
    log-spaced buckets merged over ranks, shown as 64 bins over the record's min/max).

    Where values are read: an output of at most :data:`~.intake.RETAIN_LIMIT` values is kept until
    :meth:`step`, and its gradient by ``retain_grad()`` (after backward such an output tensor
    has ``.grad``, as if you had called it; the gradient is its total over the step's backward
    passes, one call), all reduced there at once, once the layer's first recorded forward shows
    that nothing edits its output in place after the hook; at most
    :data:`~.intake.HOLD_CALLS` calls of a layer per step (later ones are reduced at the hook).
    Larger outputs, and those edited in
    place (a convolution before ``ReLU(inplace=True)``), are reduced at the hook and their
    gradients by a tensor hook as backward computes them (each backward pass one call). A layer
    that starts editing its output in place later leaves that one call out, with a warning.

    Args:
        model: the user's module, also inside DDP, after ``fully_shard`` or ``torch.compile``
            (names are the module's own: no ``module.`` / ``_orig_mod.`` prefixes).
        path: the run folder: new or empty (created), or a run to continue with ``resume``.
        layers: module names (``get_layers(model)``); default every leaf module.
        every: record steps ``0, every, 2 * every, ...``.
        gradients: also record the gradient of each layer's output (tensor hooks).
        params: also record the parameters of each layer and of its submodules
            (``block/dense.weight``), and with ``gradients`` their ``.grad`` (as wandb.watch).
        group: the data-parallel process group (default: the world). The Recorder makes its
            own group over the same ranks once (over a subgroup: make your groups first).
        writer: the group rank that writes the folder.
        fsync: fsync each record (slower; for filesystems that need it).
        resume: append to the run already in ``path`` (same keys and ``every``): steps go on
            after its last step. Without it a non-empty folder is refused, untouched.
        timeout: seconds the Recorder's collectives wait for the other ranks (default: torch's
            30 minutes, as the training's own collectives).

    Raises:
        UnknownNameError: a layer name the model does not have (closest names listed).
        FileExistsError: ``path`` holds a run (and ``resume`` is not set) or other files.
        RankMismatchError: (at construction, or with 2+ ranks in the ``step()`` after the
            recorded step, or in ``close()``: the last one, or counts of ``step()`` calls
            that differ) ranks disagree on the layer list or on the step number; raised on
            every rank, the folder then says ``failed``.
    """

    def __init__(
        self,
        model: nn.Module,
        path: str | Path,
        layers: Sequence[str] | None = None,
        every: int = 50,
        gradients: bool = True,
        params: bool = False,
        *,
        group: Any = None,
        writer: int = 0,
        fsync: bool = False,
        resume: bool = False,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Recorder needs an nn.Module, got {type(model).__name__}")
        if isinstance(layers, str):
            layers = [layers]
        if not isinstance(every, int) or every < 1:
            raise ValueError(
                f"every must be a whole number >= 1 (record every N-th step), got {every!r}"
            )
        self.model = unwrap(model)
        modules = dict(self.model.named_modules())
        del modules[""]
        if layers is None:
            layers = [n for n, m in modules.items() if not any(True for _ in m.children())]
        self.layers = list(dict.fromkeys(layers))
        for name in self.layers:
            if name not in modules:
                raise UnknownNameError(name, modules, "layer",
                                       f"Valid names include {list(modules)[:8]}; "
                                       "get_layers(model) lists them all")  # fmt: skip
        if not self.layers:
            raise ValueError(f"no layers to record: {type(self.model).__name__} has no submodules; "
                             "wrap it (nn.Sequential(model)) or pass layers=[...]")  # fmt: skip
        self.path = Path(path)
        self.every, self.gradients, self.params, self.group = every, gradients, params, group
        params_of = {n: [p for p, _ in modules[n].named_parameters()] for n in self.layers}
        self.keys = make_keys(self.layers, params_of, gradients, params)
        self.cost = RecorderCost()
        self._step = 0  # the step number of the next rec.step()
        self._step_calls = 0
        self._closed = False
        self._world = dist.get_world_size(group) if distributed(group) else 1
        self._rank = dist.get_rank(group) if distributed(group) else 0
        if not 0 <= writer < self._world:
            raise ValueError(
                f"writer must be a rank of the group (0..{self._world - 1}), got {writer}"
            )
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self._timeout = timeout
        self._group = recorder_group(group, None if timeout is None else timedelta(seconds=timeout))
        self._board = Board(self._group) if self._group is not None else None
        self._hash = layer_hash([k.key for k in self.keys], every)
        self._device = bucket_device(self.model, group)
        # the buckets this step fills; with 2+ ranks the last recorded step's are merged
        # meanwhile, in the spare set (see .exchange)
        self._merges = Merges(len(self.keys), self._device, self._world,
                              self._group if self._group is not None else group, self._board,
                              self._hash,
                              self._merged if self._rank == writer else None)  # fmt: skip
        self._grad_hooks = HookRegistry("Recorder gradients")
        self._intake = Intake(self.keys, self._grad_hooks, self.cost)
        self._intake.buckets = self._merges.current
        self._params = [(key, modules[key.layer]) for key in self.keys
                        if key.kind in ("parameter", "parameter_gradient")]  # fmt: skip
        start: int | Exception = -1
        if self._rank == writer:
            try:
                start = first_step(self.path, [k.key for k in self.keys], every, resume)
            except (OSError, ValueError) as error:
                start = error
        self._step = agree_at_start(self._group, [k.key for k in self.keys], every, self._hash,
                                    start, writer, self.path, self._device)  # fmt: skip
        self._writer = self._unwritten = None
        if self._rank == writer:
            resume_at = self._step if (self.path / "manifest.json").exists() else None
            watch = self._board.failure if self._board is not None else None
            self._writer = RunWriter(self.path, self._manifest(model), self.keys, fsync,
                                     resume_at=resume_at, watch=watch)  # fmt: skip
            self._unwritten = Pending(self._writer, len(self.keys))
            self._writer.every_beat(self._on_beat)
            self._undo_signals = on_stop_signals(_stop_signal(weakref.ref(self)))
        self._hooks = HookRegistry("Recorder")
        me = weakref.ref(self)
        index = {k.key: k.index for k in self.keys}
        for name in self.layers:
            grad = index.get(f"{name}/grad_output")
            self._hooks.forward(
                modules[name], forward_hook(me, index[f"{name}/output"], grad), name=name
            )
        atexit.register(_close_at_exit, me)

    # -- public -----------------------------------------------------------------------------

    @property
    def recording(self) -> bool:
        """Does the current step record? A pure function of the step counter."""
        return self._step % self.every == 0

    @property
    def step_count(self) -> int:
        """How many times :meth:`step` was called (on this Recorder)."""
        return self._step_calls

    def step(self, step: int | None = None) -> None:
        """End one optimizer step: on a recording step, merge over ranks and write the records.

        Call it on every rank, once per optimizer step, after ``backward()``. ``step``: your
        own step number (default: the last one + 1, from 0 or after a resumed run's last).
        With 2+ ranks a recorded step's merge runs while the next step trains: it is checked
        and written by the next ``step()`` (or :meth:`close`), which raises its errors.
        Passing ``step`` lets a rank that skipped a step be caught then (the ranks' numbers
        differ: :class:`RankMismatchError` on every rank); without it a skipped or extra call
        is a :class:`RankMismatchError` when the Recorder's collective times out (``timeout``),
        naming each rank's last step, and the other ranks raise it when theirs fail.
        """
        if self._closed:
            raise RuntimeError("this Recorder is closed; make a new one to record again")
        if step is not None:
            if not isinstance(step, int) or step < 0:
                raise ValueError(f"step must be a whole number >= 0, got {step!r}")
            self._step = step
        start, reading = time.perf_counter(), self.cost.hook_seconds
        try:
            if self.recording:
                self._record()
            else:
                if self._merges.finish():  # nothing recorded since: the buckets take its new
                    self._merges.use(self._merges.current)  # centres
                if self._unwritten is not None:
                    self._unwritten.flush_due()
        finally:
            self._grad_hooks.remove()  # hooks of outputs whose backward never came
            self._intake.unhold()
            if self._writer is not None:
                self._writer.beat(self._step)
            self._step += 1
            self._step_calls += 1
            self.cost.steps = self._step_calls
            # the values read here are counted in hook_seconds
            read = self.cost.hook_seconds - reading
            self.cost.step_seconds += time.perf_counter() - start - read

    def close(self, error: BaseException | str | None = None) -> None:
        """Remove every hook; mark the run finished (or failed, with ``error``). No collective.

        The last recorded step's merge, issued in its ``step()`` on every rank, is waited for
        (with ``error``, at most :data:`CLOSE_WAIT` seconds) and written; its
        :class:`RankMismatchError`, if the ranks disagreed, is raised here. With 2+ ranks each
        rank then posts its number of ``step()`` calls to the job's store and waits (at most
        :data:`CLOSE_AGREE` seconds) for the others': counts that differ are a
        :class:`RankMismatchError` on every rank, and the folder says ``failed``. A run stopped by a
        signal stays ``stopped``. With ``error``, an error another rank reported (its
        :class:`RankMismatchError`) is what the folder says.
        """
        if self._closed:
            return
        self._closed = True
        self._hooks.remove()
        self._grad_hooks.remove()
        self._intake.unhold()
        text = error if isinstance(error, str) or error is None else (
            f"{type(error).__name__}: {error}")  # fmt: skip
        if text is not None and not isinstance(error, RankMismatchError):
            text = self._peer_failure() or text
        mismatch = None
        try:  # the last recorded step's collectives, issued on every rank: only a wait
            self._merges.finish(None if text is None else CLOSE_WAIT)
        except RankMismatchError as failed:
            mismatch, text = failed, text or f"RankMismatchError: {failed}"
        if self._board is not None:
            self._board.post(self._step - 1)  # where this rank ended, for a rank still waiting
            # an extra or missing rec.step() on any rank fails every rank (store reads, bounded)
            wait = CLOSE_AGREE if self._timeout is None else self._timeout + CLOSE_WAIT
            failure = self._board.agree_at_close(self._step_calls, self._step - 1,
                                                 text is not None, wait)  # fmt: skip
            if failure is not None and text is None:
                mismatch = RankMismatchError(failure)
                text = f"RankMismatchError: {failure}"
        if self._writer is not None:
            self._undo_signals()
            try:
                self._unwritten.flush()
            finally:
                self.cost.bytes_written = self._writer.bytes
                self._writer.close("finished" if text is None else "failed", text)
        if mismatch is not None and error is None:
            raise mismatch

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self.close(error)
        # the training's own collective failed because another rank's Recorder did: say why
        failure = None if error is None or isinstance(error, RankMismatchError) else (
            self._peer_failure())  # fmt: skip
        if failure is not None and isinstance(error, Exception):
            raise RankMismatchError(failure) from error

    def __repr__(self) -> str:
        where = f"rank {self._rank}/{self._world}, step {self._step}"
        return (f"Recorder({str(self.path)!r}, {len(self.layers)} layers, "
                f"{len(self.keys)} keys, every={self.every}, {where})")  # fmt: skip

    # -- inside -----------------------------------------------------------------------------

    def _peer_failure(self) -> str | None:
        return self._board.failure() if self._board is not None else None

    def _manifest(self, model: nn.Module) -> dict:
        return {
            "record": {"size": RECORD.size, "struct": RECORD.format, "fields": FIELDS,
                       "bins": BINS, "hist_dtype": "float32", "dtypes": DTYPES,
                       "modes": MODES, "version": FORMAT},
            "keys": [k.to_json() for k in self.keys],
            "layers": self.layers, "every": self.every, "gradients": self.gradients,
            "params": self.params, "world_size": self._world, "writer_rank": self._rank,
            "model": type(self.model).__name__, "wrapper": type(model).__name__,
            "rows": module_rows(self.model), "created": time.time(),
        }  # fmt: skip

    def _record(self) -> None:
        rank, intake = self._rank, self._intake
        start = time.perf_counter()
        intake.read_held(self._step)
        self.cost.hook_seconds += time.perf_counter() - start
        for key, module in self._params:
            param = module.get_parameter(key.leaf.removesuffix(".grad"))
            if key.kind == "parameter_gradient":
                param = param.grad
            values = None if param is None else local_values(param, rank)
            if values is not None:
                intake.take(key.index, values)
        start = time.perf_counter()
        intake.flush()
        self.cost.hook_seconds += time.perf_counter() - start
        if self._board is not None:
            self._board.post(self._step)
        intake.buckets = self._merges.start(self._step)
        intake.reset()
        self.cost.recorded += 1

    def _merged(self, step: int, sums: np.ndarray, maxes: np.ndarray, bins: np.ndarray) -> None:
        """The writer keeps a merged step's records (written in batches: see .pending)."""
        self._unwritten.add(step, sums, maxes, bins)
        self.cost.bytes_written = self._writer.bytes

    def _on_beat(self) -> None:
        """The writer's heartbeat: a merge that is done is kept now, so a paused training loop
        (no next step() yet) still gets its last records out; then the due writes."""
        self._merges.keep_if_done()
        self._unwritten.flush_due()


CLOSE_AGREE = 120.0
"""Seconds ``close()`` waits for the other ranks' step counts (the Recorder's ``timeout`` plus
:data:`CLOSE_WAIT` where given): a rank may still be training its last steps."""

CLOSE_WAIT = 10.0
"""Seconds ``close(error)`` waits for the last recorded step's merge (a peer may be gone)."""


def _stop_signal(me: weakref.ref[Recorder]):
    def stopped(signum: int) -> None:
        rec = me()
        if rec is not None and rec._writer is not None and not rec._closed:
            rec._merges.keep_if_done()
            rec._unwritten.flush(wait=False)  # the process may end right after
            rec._writer.stopped(signal.Signals(signum).name)

    return stopped


def _close_at_exit(me: weakref.ref[Recorder]) -> None:
    rec = me()
    if rec is not None and not rec._closed:
        rec.close("the process exited without rec.close()")
