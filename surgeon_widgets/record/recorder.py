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
import functools
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..engine.guard import inert
from ..engine.module_tree import module_rows
from ..engine.naming import UnknownNameError
from ..engine.registry import HookRegistry
from ..engine.tensors import first_tensor
from ..engine.torch_internals import GRAPH_TASK_ID
from ..engine.wrappers import unwrap
from .accumulate import Workspace, accumulate, real_values
from .accumulate_native import C_DTYPES, LIBRARY, Table, many, one
from .batch import BATCH_LIMIT, Batch
from .collect import RankMismatchError, distributed, finish_exchange, layer_hash, start_exchange
from .layout import (
    BINS,
    CALLS,
    DTYPES,
    EVALED,
    FIELDS,
    FORMAT,
    HAS,
    HEAD,
    HOST_SUMS,
    MAX_DIMS,
    MAX_WIDTH,
    MODES,
    RECORD,
    SUM_WIDTH,
    TRAINED,
    Key,
    dtype_code,
)  # fmt: skip
from .merge import display_bins, next_centres
from .params import local_values
from .peers import Board, agree_at_start, recorder_group
from .pending import Pending
from .runfolder import RunWriter, first_step
from .signals import on_stop_signals

__all__ = ["Recorder", "RecorderCost"]


@dataclass
class RecorderCost:
    """Where the recorder's time went (this rank), and what it wrote (writer rank).

    ``hook_seconds``: counting and reducing values, at the hooks or in ``step()`` (values held
    until then); ``step_seconds``: the rest of ``step()`` (merge, exchange, writing).
    """

    steps: int = 0
    recorded: int = 0
    hook_seconds: float = 0.0
    step_seconds: float = 0.0
    bytes_written: int = 0
    record_size: int = RECORD.size

    @property
    def seconds(self) -> float:
        return self.hook_seconds + self.step_seconds

    def __str__(self) -> str:
        per = self.seconds / self.recorded * 1e3 if self.recorded else 0.0
        return (f"{self.recorded} of {self.steps} steps recorded; {self.seconds:.3f} s in the "
                f"recorder ({per:.2f} ms per recorded step: values {self.hook_seconds:.3f} s, "
                f"the rest of step() {self.step_seconds:.3f} s); {self.bytes_written} bytes "
                f"written ({self.record_size} per record)")  # fmt: skip


def _in_backward() -> bool:
    # activation checkpointing recomputes forwards inside the autograd engine: not a new call
    return GRAPH_TASK_ID.get()() != -1


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

    Where values are read: an output of at most :data:`RETAIN_LIMIT` values is kept until
    :meth:`step`, and its gradient by ``retain_grad()`` (after backward such an output tensor
    has ``.grad``, as if you had called it; the gradient is its total over the step's backward
    passes, one call), all reduced there at once, once the layer's first recorded forward shows
    that nothing edits its output in place after the hook; at most :data:`HOLD_CALLS` calls of a
    layer per step (later ones are reduced at the hook). Larger outputs, and those edited in
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
        self.keys = self._make_keys(modules)
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
        self._device = self._bucket_device()
        self._centres = np.zeros(len(self.keys))  # each key's last merged mean (same on all ranks)
        # the buckets this step fills; with 2+ ranks the last recorded step's are merged
        # meanwhile, in the spare set (see _record)
        self._exchange: _Exchange | None = None
        self._spare = _Buckets(len(self.keys), self._device) if self._world > 1 else None
        self._use(_Buckets(len(self.keys), self._device))
        if self._device.type == "cpu":
            LIBRARY.get()  # the C loop builds meanwhile
        self._work = Workspace()
        # each key's largest shape this step (ndim, dims, dtype code; -inf: not called), written
        # only when it changes: most keys see the shape of the last step
        self._shape_rows = np.full((len(self.keys), MAX_WIDTH - EVALED - 1), float("-inf"))
        self._row_is: list[np.ndarray | None] = [None] * len(self.keys)  # the row in there
        self._last_shape: list[Any] = [None] * len(self.keys)  # (shape, dtype) of the last call
        self._last_row: list[Any] = [None] * len(self.keys)  # its row
        self._batches: dict[torch.device, Batch] = {}  # small values, reduced in step()
        # values read in step() (see RETAIN_LIMIT): (key, output, its version at the hook,
        # train / eval forward, or None for the output's gradient)
        self._held: list[tuple[int, torch.Tensor, int, bool | None]] = []
        self._probed: list[tuple[int, torch.Tensor, int]] = []  # outputs of layers not yet known
        self._holding = [0] * len(self.keys)  # per output key: its calls held this step
        # per output key: are its layer's outputs left as their hook saw them (None: not known)
        self._in_place_free: list[bool | None] = [None] * len(self.keys)
        self._reset_host()
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
        self._grad_hooks = HookRegistry("Recorder gradients")
        me = weakref.ref(self)
        index = {k.key: k.index for k in self.keys}
        for name in self.layers:
            grad = index.get(f"{name}/grad_output")
            self._hooks.forward(
                modules[name], _forward_hook(me, index[f"{name}/output"], grad), name=name
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
                if self._finish():  # nothing recorded since: the buckets take its new centres
                    self._use(self._buckets)
                if self._unwritten is not None:
                    self._unwritten.flush_due()
        finally:
            self._grad_hooks.remove()  # hooks of outputs whose backward never came
            self._unhold()
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
        self._unhold()
        text = error if isinstance(error, str) or error is None else (
            f"{type(error).__name__}: {error}")  # fmt: skip
        if text is not None and not isinstance(error, RankMismatchError):
            text = self._peer_failure() or text
        mismatch = None
        try:  # the last recorded step's collectives, issued on every rank: only a wait
            self._finish(None if text is None else CLOSE_WAIT)
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

    def _make_keys(self, modules: dict[str, nn.Module]) -> list[Key]:
        specs = []
        for name in self.layers:
            specs.append((f"{name}/output", name, "output", "activation"))
        if self.gradients:
            specs += [(f"{n}/grad_output", n, "grad_output", "gradient") for n in self.layers]
        if self.params:
            for name in self.layers:
                for pname, _ in modules[name].named_parameters():
                    specs.append((f"{name}/{pname}", name, pname, "parameter"))
                    if self.gradients:
                        specs.append((f"{name}/{pname}.grad", name, f"{pname}.grad",
                                      "parameter_gradient"))  # fmt: skip
        return [Key(i, *spec) for i, spec in enumerate(specs)]

    def _bucket_device(self) -> torch.device:
        if distributed(self.group) and dist.get_backend(self.group) == "gloo":
            return torch.device("cpu")
        first = next(iter(self.model.parameters()), None)
        return first.device if first is not None and not first.is_meta else torch.device("cpu")

    def _peer_failure(self) -> str | None:
        return self._board.failure() if self._board is not None else None

    def _wait(
        self, exchange: _Exchange, timeout: float | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """An exchange's reduced buckets; a rank that waited in vain names where the others are."""
        b = exchange.buckets
        try:
            return finish_exchange(exchange.works, b.sums.view(-1), b.maxes_flat, exchange.step,
                                   timeout)  # fmt: skip
        except RankMismatchError as error:
            if self._board is None:
                raise
            cause = error.__cause__
            if not isinstance(cause, RuntimeError):  # the ranks disagreed, every one knows
                self._board.report(str(error))
                raise
            message = self._board.waited_in_vain(exchange.step, cause)
            self._board.report(message)
            raise RankMismatchError(message) from cause

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

    def _reset_host(self) -> None:
        """This step's counts that the host knows, per key (they join the buckets in step())."""
        k = len(self.keys)
        self._calls, self._numel, self._evals = [0] * k, [0] * k, [0] * k
        self._trained, self._evaled = [False] * k, [False] * k

    def _take(self, index: int, value: torch.Tensor, train: bool = True) -> None:
        """Count one call's ``value`` for key ``index`` (from a hook or step(); no sync)."""
        start = time.perf_counter()
        n = self._count(index, value, train)
        if n:  # empty, or an eval forward left out: nothing to add
            self._add_values(index, value, n)
        self.cost.hook_seconds += time.perf_counter() - start

    def _count(self, index: int, value: torch.Tensor, train: bool) -> int:
        """Count one call of key ``index`` in the host's columns; how many values it adds (0:
        none, or an eval forward left out of a training record)."""
        if not train:
            if self._trained[index]:  # this step's record holds its training forwards
                self._evals[index] += 1
                return 0
            self._evaled[index] = True
        elif self._evaled[index]:  # eval forwards came first: they leave the training record
            self._drop(index)
        self._trained[index] = train
        calls = self._calls[index]
        self._calls[index] = calls + 1
        n = value.numel()
        self._numel[index] += n
        shape = (value.shape, value.dtype)
        if shape != self._last_shape[index]:
            self._last_shape[index] = shape
            self._last_row[index] = _shape_row(tuple(value.shape), value.dtype)
        row = self._last_row[index]
        if self._row_is[index] is not row:
            if calls:  # another shape this step: the largest of each dimension
                np.maximum(self._shape_rows[index], row, out=self._shape_rows[index])
                row = None
            else:
                self._shape_rows[index] = row
            self._row_is[index] = row
        return n

    def _seen(
        self, index: int, output: torch.Tensor, train: bool, in_backward: bool, grad: Any
    ) -> None:
        """A forward of the layer of output key ``index`` (a hook's call). Its output's values,
        and its gradient when ``grad`` = ``(key, tensor hook, name)``, are read in step() (held;
        the gradient by ``retain_grad``) when the output is small and the layer's outputs are
        known to stay as their hook saw them (:data:`RETAIN_LIMIT`); else reduced now, and the
        gradient by the tensor hook as backward computes it (also for an output recomputed in
        backward: reentrant checkpointing's inner backward)."""
        safe = self._in_place_free[index]
        held = (safe is not False and not in_backward and output.numel() <= RETAIN_LIMIT
                and self._holding[index] < HOLD_CALLS)  # fmt: skip
        if held:
            self._holding[index] += 1
        if not in_backward:
            if held and safe:
                self._held.append((index, output, output._version, train))
            else:
                self._take(index, output, train)
        if held and not safe:  # first seen: find out
            self._probed.append((index, output, output._version))
        if grad is None:
            return
        grad_index, hook, name = grad
        if held and safe and not output.is_leaf and not output.retains_grad:
            output.retain_grad()
            self._held.append((grad_index, output, output._version, None))
            return
        self._grad_hooks.tensor(output, hook, name=name)

    def _read_held(self) -> None:
        """Count this step's held outputs and retained gradients, all in one C call on a CPU;
        and learn from the probed outputs which layers' outputs stay as their hook saw them."""
        for index, output, version in self._probed:
            self._in_place_free[index] = (self._in_place_free[index] is not False
                                          and output._version == version)  # fmt: skip
        values: list[torch.Tensor] = []
        keys: list[int] = []
        for index, output, version, train in self._held:
            if output._version != version:  # modified in place: its values and .grad are new
                self._changed_in_place(index)
                continue
            value = output if train is not None else output.grad
            if value is None:  # no backward reached it
                continue
            if train and self._evaled[index]:  # eval forwards came first: _count drops them
                kept = [i for i, key in enumerate(keys) if key != index]
                values, keys = [values[i] for i in kept], [keys[i] for i in kept]
            if self._count(index, value, train is not False):
                values.append(value)
                keys.append(index)
        self._unhold()
        table = self._buckets.table
        left = range(len(values)) if table is None else many(values, keys, table)
        for i in left:
            self._add_values(keys[i], values[i], values[i].numel())

    def _unhold(self) -> None:
        """Let go of this step's held and probed outputs."""
        self._held.clear()
        self._probed.clear()
        self._holding = [0] * len(self.keys)

    def _changed_in_place(self, index: int) -> None:
        """A held output (or the output whose gradient was retained) of key ``index`` was
        modified in place after its hook, which its layer's earlier outputs were not: that
        call is left out, and the layer's outputs are reduced at the hook from now on."""
        layer = self.keys[index].layer
        output = next(k.index for k in self.keys if k.layer == layer and k.kind == "activation")
        if self._in_place_free[output]:
            warnings.warn(f"Recorder: the output of {layer!r} was modified in place after its "
                          f"forward at step {self._step}, which its earlier steps did not do: "
                          "this forward's values and gradient are left out of the record, and "
                          "from now on its outputs are read at the hook", RuntimeWarning,
                          stacklevel=4)  # fmt: skip
        self._in_place_free[output] = False

    def _add_values(self, index: int, value: torch.Tensor, n: int) -> None:
        """Reduce ``value`` at once (one C call, on a CPU), or batch it (small), or reduce it
        in torch (large)."""
        table = self._buckets.table
        if table is not None:
            if n <= BATCH_LIMIT and value.dtype in C_DTYPES and not value.is_contiguous():
                value = value.detach().contiguous()  # one small copy costs less than a batch
            if one(value, index, table):
                return
        if n <= BATCH_LIMIT and self._batched(index, value):
            return
        i = slice(index, index + 1)
        values = real_values(value).reshape(-1)
        x = self._work.get(n, torch.float64, values.device, 3).copy_(values)
        b = self._buckets
        accumulate(b.sums[i], b.maxes[i], x, None, float(b.centres[index]), self._work)

    def _batched(self, index: int, value: torch.Tensor) -> bool:
        """Copy ``value`` into its device's batch (reduced first when full); False: no room."""
        batch = self._batches.get(value.device)
        if batch is None:
            batch = self._batches[value.device] = Batch(value.device)
        if batch.add(index, value):
            return True
        b = self._buckets
        batch.reduce(b.sums, b.maxes, b.centres, self._work)
        return batch.add(index, value)

    def _drop(self, index: int) -> None:
        """Forget key ``index``'s eval forwards of this step: training forwards replace them."""
        self._evals[index] += self._calls[index]
        self._calls[index] = self._numel[index] = 0
        self._evaled[index] = False
        self._row_is[index] = None  # the next call writes its row
        for batch in self._batches.values():
            batch.drop(index)
        self._buckets.sums[index].zero_()
        self._buckets.maxes[index].fill_(float("-inf"))

    def _flush(self) -> None:
        """Reduce the batched small values (one pass for all keys) and write the host counts."""
        b = self._buckets
        for batch in self._batches.values():
            batch.reduce(b.sums, b.maxes, b.centres, self._work)
        sums, maxes = b.host_sums, b.host_maxes
        # HAS (this rank called the key), CALLS, NUMEL, EVALS: one write into the table
        counts = np.array((self._calls, self._calls, self._numel, self._evals), dtype=np.float64)
        np.minimum(counts[HAS], 1.0, out=counts[HAS])
        sums[...] = counts.T
        maxes[:, 0] = self._trained
        maxes[:, EVALED - TRAINED] = self._evaled
        if not all(self._calls):  # keys not called this step: -inf (and written anew next time)
            for i in np.flatnonzero(counts[CALLS] == 0):
                self._shape_rows[i] = float("-inf")
                self._row_is[i] = None
        maxes[:, EVALED - TRAINED + 1 :] = self._shape_rows
        if b.device.type != "cpu":  # host tables, copied in
            b.sums[:, :HOST_SUMS].copy_(torch.from_numpy(sums))
            b.maxes[:, TRAINED:].copy_(torch.from_numpy(maxes))
            maxes.fill(float("-inf"))

    def _record(self) -> None:
        rank = self._rank
        start = time.perf_counter()
        self._read_held()
        self.cost.hook_seconds += time.perf_counter() - start
        for key, module in self._params:
            param = module.get_parameter(key.leaf.removesuffix(".grad"))
            if key.kind == "parameter_gradient":
                param = param.grad
            values = None if param is None else local_values(param, rank)
            if values is not None:
                self._take(key.index, values)
        start = time.perf_counter()
        self._flush()
        self.cost.hook_seconds += time.perf_counter() - start
        if self._board is not None:
            self._board.post(self._step)
        group = self._group if self._group is not None else self.group
        filled = self._buckets
        works = [] if self._world == 1 else start_exchange(
            filled.sums.view(-1), filled.maxes_flat, self._step, self._hash, group)  # fmt: skip
        # with 2+ ranks this step's merge runs while the next step trains (a collective's
        # latency, not its size, is most of its cost on gloo): it is waited for, checked and
        # written in the next step() (or close()), and the next step fills the spare buckets
        self._finish()
        self._exchange = _Exchange(works, filled, self._step)
        if self._spare is None:
            self._finish()
            self._use(filled)
        else:
            self._spare, spare = filled, self._spare
            self._use(spare)
        self._reset_host()
        self.cost.recorded += 1

    def _use(self, buckets: _Buckets) -> None:
        """Fill ``buckets`` (zeroed) from now on, bucketed about the last merged means."""
        self._buckets = buckets
        np.copyto(buckets.centres, self._centres)

    def _finish(self, timeout: float | None = None) -> bool:
        """Wait for the last recorded step's merge (if not done yet), keep its records, and
        zero its buckets; buckets used from now on are centred on its means. ``False``: there
        was none."""
        exchange, self._exchange = self._exchange, None
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

    def _keep(self, exchange: _Exchange, timeout: float | None = None) -> np.ndarray:
        """The exchange's merged sum bucket, waited for and checked; the writer keeps its
        records (once: the heartbeat may have). Under ``exchange.lock``."""
        if exchange.sums is None:
            b, k = exchange.buckets, len(self.keys)
            # (one rank sent nothing: nothing to wait for or check)
            if b.table is not None:  # on a CPU the buckets were reduced in place
                if self._world > 1:
                    self._wait(exchange, timeout)
                sums, maxes = b.host_table
            else:  # copied to the CPU
                sums, maxes = (self._wait(exchange, timeout) if self._world > 1
                               else (b.sums.cpu(), b.maxes_flat.cpu()))  # fmt: skip
                sums = sums.view(k, SUM_WIDTH).numpy()
                maxes = maxes[HEAD:].view(k, MAX_WIDTH).numpy()
            if self._unwritten is not None:  # merged and written in batches (see .pending)
                bins = None if b.table is None else b.table.display_bins()
                if bins is None:
                    bins = display_bins(sums, maxes, b.centres)
                self._unwritten.add(exchange.step, sums, maxes, bins)
                self.cost.bytes_written = self._writer.bytes
            exchange.sums = sums
        return exchange.sums

    def _on_beat(self) -> None:
        """The writer's heartbeat: a merge that is done is kept now, so a paused training loop
        (no next step() yet) still gets its last records out; then the due writes."""
        self._keep_if_done()
        self._unwritten.flush_due()

    def _keep_if_done(self) -> None:
        """Keep the records of a merge whose collectives are done (the writer's heartbeat and
        stop signal; never waits: a busy training thread keeps them itself)."""
        exchange = self._exchange
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


RETAIN_LIMIT = 1 << 16
"""Values: an output this small is held until ``step()`` and its gradient kept
(``retain_grad``), all read there in one C call: a call at the hook and a Python tensor hook that
backward calls (with its registration) cost more than reducing them. Larger ones are reduced at
the hook and as backward computes them, so none is held. An output edited in place after its
hook (a convolution before ``ReLU(inplace=True)``) would be read with its new values and the
new values' gradient: a layer's first recorded outputs are read at the hook and checked
(their version) in ``step()``, and a layer whose outputs change stays at the hook."""

HOLD_CALLS = 4
"""Calls of one layer held per step (each at most :data:`RETAIN_LIMIT` values): later calls of
the step are reduced at the hook, so that many forwards before one ``step()`` (an eval loop at a
recording step, accumulated micro-batches) keep at most this many outputs per layer alive."""

CLOSE_AGREE = 120.0
"""Seconds ``close()`` waits for the other ranks' step counts (the Recorder's ``timeout`` plus
:data:`CLOSE_WAIT` where given): a rank may still be training its last steps."""

CLOSE_WAIT = 10.0
"""Seconds ``close(error)`` waits for the last recorded step's merge (a peer may be gone)."""


class _Buckets:
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


class _Exchange:
    """A recorded step's collectives under way, the buckets they read and write, and once they
    are done and checked, the merged sum bucket (its records kept)."""

    def __init__(self, works: list[Any], buckets: _Buckets, step: int) -> None:
        self.works, self.buckets, self.step = works, buckets, step
        self.sums: np.ndarray | None = None
        self.lock = threading.Lock()


@functools.lru_cache(maxsize=1024)
def _shape_row(shape: tuple[int, ...], dtype: torch.dtype) -> np.ndarray:
    """``[ndim, dims (-1 padded), dtype code]`` of the max bucket (cached: shapes repeat)."""
    dims = list(shape[:MAX_DIMS]) + [-1] * (MAX_DIMS - min(len(shape), MAX_DIMS))
    row = np.array([len(shape), *dims, dtype_code(dtype)], dtype=np.float64)
    row.setflags(write=False)
    return row


def _eager(fn):
    # under torch.compile the hook runs eagerly (a graph break) instead of being traced away;
    # in eager mode it is called directly (the disabled wrapper costs more than the hook)
    disabled = torch.compiler.disable(fn, recursive=True)

    @functools.wraps(fn)
    def hook(*args: Any) -> None:
        if torch.compiler.is_compiling():
            return disabled(*args)
        return fn(*args)

    return hook


def _forward_hook(me: weakref.ref[Recorder], index: int, grad_index: int | None):
    # made once per layer: a hook made per forward would cost more than recording its values
    grad = None if grad_index is None else (grad_index, _grad_hook(me, grad_index), str(grad_index))

    @_eager
    def hook(module: nn.Module, args: Any, output: Any) -> None:
        rec = me()
        # rec.recording, read in place: every recorded layer's forward asks
        if rec is None or rec._closed or rec._step % rec.every:
            return
        t = output if type(output) is torch.Tensor else first_tensor(output)
        if t is None or inert(t):
            return
        train = rec.model.training
        wants = grad is not None and train and t.requires_grad and torch.is_grad_enabled()
        rec._seen(index, t, train, _in_backward(), grad if wants else None)

    return hook


def _grad_hook(me: weakref.ref[Recorder], index: int):
    @_eager
    def hook(grad: torch.Tensor) -> None:
        rec = me()
        if rec is None or rec._closed or inert(grad):
            return
        rec._take(index, grad)

    return hook


def _stop_signal(me: weakref.ref[Recorder]):
    def stopped(signum: int) -> None:
        rec = me()
        if rec is not None and rec._writer is not None and not rec._closed:
            rec._keep_if_done()
            rec._unwritten.flush(wait=False)  # the process may end right after
            rec._writer.stopped(signal.Signals(signum).name)

    return stopped


def _close_at_exit(me: weakref.ref[Recorder]) -> None:
    rec = me()
    if rec is not None and not rec._closed:
        rec.close("the process exited without rec.close()")
