"""The Recorder's hook side: one rank's values of the current step, from the hooks to the buckets.

A recorded layer's forward hook (:func:`forward_hook`) hands its output to :class:`Intake`,
which counts the call on the host (calls, values, shapes, train / eval) and either holds the
output until ``step()`` (small, and known to stay as the hook saw it: :data:`RETAIN_LIMIT`,
:data:`HOLD_CALLS`; its gradient by ``retain_grad()``) or reduces it at once into the step's
buckets (in C on a CPU, batched when small, else in torch); the gradient then by a tensor hook
as backward computes it. Nothing here communicates or syncs the host.

>>> import torch
>>> from surgeon_widgets.engine.registry import HookRegistry
>>> from surgeon_widgets.record.exchange import Buckets
>>> from surgeon_widgets.record.layout import FINITE, Key
>>> from surgeon_widgets.record.cost import RecorderCost
>>> keys = [Key(0, "0/output", "0", "output", "activation")]
>>> intake = Intake(keys, HookRegistry("example"), RecorderCost())
>>> intake.buckets = Buckets(1, torch.device("cpu"))
>>> intake.take(0, torch.ones(3)); intake.take(0, torch.zeros(2))
>>> intake.flush()
>>> intake.buckets.sums[0, FINITE].item()
5.0
"""

from __future__ import annotations

import functools
import time
import warnings
import weakref
from typing import Any

import numpy as np
import torch
from torch import nn

from ..engine.guard import inert
from ..engine.registry import HookRegistry
from ..engine.tensors import first_tensor
from ..engine.torch_internals import GRAPH_TASK_ID
from .accumulate import Workspace, accumulate, real_values
from .accumulate_native import C_DTYPES, many, one
from .batch import BATCH_LIMIT, Batch
from .layout import CALLS, EVALED, HAS, HOST_SUMS, MAX_DIMS, MAX_WIDTH, TRAINED, Key, dtype_code

__all__ = ["HOLD_CALLS", "RETAIN_LIMIT", "Intake", "forward_hook"]


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


def _in_backward() -> bool:
    # activation checkpointing recomputes forwards inside the autograd engine: not a new call
    return GRAPH_TASK_ID.get()() != -1


class Intake:
    """One rank's counts and values of the current step, per key (``keys``), added into
    ``buckets`` (set by the Recorder: the step's :class:`~.exchange.Buckets`); the time spent is
    counted in ``cost.hook_seconds``; gradients' tensor hooks go to ``grad_hooks``."""

    def __init__(self, keys: list[Key], grad_hooks: HookRegistry, cost: Any) -> None:
        self.keys = keys
        self.cost = cost
        self.buckets: Any = None
        self._grad_hooks = grad_hooks
        self.work = Workspace()
        # each key's largest shape this step (ndim, dims, dtype code; -inf: not called), written
        # only when it changes: most keys see the shape of the last step
        self._shape_rows = np.full((len(keys), MAX_WIDTH - EVALED - 1), float("-inf"))
        self._row_is: list[np.ndarray | None] = [None] * len(keys)  # the row in there
        self._last_shape: list[Any] = [None] * len(keys)  # (shape, dtype) of the last call
        self._last_row: list[Any] = [None] * len(keys)  # its row
        self._batches: dict[torch.device, Batch] = {}  # small values, reduced in step()
        # values read in step() (see RETAIN_LIMIT): (key, output, its version at the hook,
        # train / eval forward, or None for the output's gradient)
        self.held: list[tuple[int, torch.Tensor, int, bool | None]] = []
        self._probed: list[tuple[int, torch.Tensor, int]] = []  # outputs of layers not yet known
        self._holding = [0] * len(keys)  # per output key: its calls held this step
        # per output key: are its layer's outputs left as their hook saw them (None: not known)
        self.in_place_free: list[bool | None] = [None] * len(keys)
        self.reset()

    def reset(self) -> None:
        """This step's counts that the host knows, per key (they join the buckets in step())."""
        k = len(self.keys)
        self._calls, self._numel, self._evals = [0] * k, [0] * k, [0] * k
        self._trained, self._evaled = [False] * k, [False] * k

    def take(self, index: int, value: torch.Tensor, train: bool = True) -> None:
        """Count one call's ``value`` for key ``index`` (from a hook or step(); no sync)."""
        start = time.perf_counter()
        n = self.count(index, value, train)
        if n:  # empty, or an eval forward left out: nothing to add
            self._add_values(index, value, n)
        self.cost.hook_seconds += time.perf_counter() - start

    def count(self, index: int, value: torch.Tensor, train: bool) -> int:
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

    def seen(
        self, index: int, output: torch.Tensor, train: bool, in_backward: bool, grad: Any
    ) -> None:
        """A forward of the layer of output key ``index`` (a hook's call). Its output's values,
        and its gradient when ``grad`` = ``(key, tensor hook, name)``, are read in step() (held;
        the gradient by ``retain_grad``) when the output is small and the layer's outputs are
        known to stay as their hook saw them (:data:`RETAIN_LIMIT`); else reduced now, and the
        gradient by the tensor hook as backward computes it (also for an output recomputed in
        backward: reentrant checkpointing's inner backward)."""
        safe = self.in_place_free[index]
        held = (safe is not False and not in_backward and output.numel() <= RETAIN_LIMIT
                and self._holding[index] < HOLD_CALLS)  # fmt: skip
        if held:
            self._holding[index] += 1
        if not in_backward:
            if held and safe:
                self.held.append((index, output, output._version, train))
            else:
                self.take(index, output, train)
        if held and not safe:  # first seen: find out
            self._probed.append((index, output, output._version))
        if grad is None:
            return
        grad_index, hook, name = grad
        if held and safe and not output.is_leaf and not output.retains_grad:
            output.retain_grad()
            self.held.append((grad_index, output, output._version, None))
            return
        self._grad_hooks.tensor(output, hook, name=name)

    def read_held(self, step: int) -> None:
        """Count this step's held outputs and retained gradients, all in one C call on a CPU;
        and learn from the probed outputs which layers' outputs stay as their hook saw them."""
        for index, output, version in self._probed:
            self.in_place_free[index] = (self.in_place_free[index] is not False
                                          and output._version == version)  # fmt: skip
        values: list[torch.Tensor] = []
        keys: list[int] = []
        for index, output, version, train in self.held:
            if output._version != version:  # modified in place: its values and .grad are new
                self._changed_in_place(index, step)
                continue
            value = output if train is not None else output.grad
            if value is None:  # no backward reached it
                continue
            if train and self._evaled[index]:  # eval forwards came first: _count drops them
                kept = [i for i, key in enumerate(keys) if key != index]
                values, keys = [values[i] for i in kept], [keys[i] for i in kept]
            if self.count(index, value, train is not False):
                values.append(value)
                keys.append(index)
        self.unhold()
        table = self.buckets.table
        left = range(len(values)) if table is None else many(values, keys, table)
        for i in left:
            self._add_values(keys[i], values[i], values[i].numel())

    def unhold(self) -> None:
        """Let go of this step's held and probed outputs."""
        self.held.clear()
        self._probed.clear()
        self._holding = [0] * len(self.keys)

    def _changed_in_place(self, index: int, step: int) -> None:
        """A held output (or the output whose gradient was retained) of key ``index`` was
        modified in place after its hook, which its layer's earlier outputs were not: that
        call is left out, and the layer's outputs are reduced at the hook from now on."""
        layer = self.keys[index].layer
        output = next(k.index for k in self.keys if k.layer == layer and k.kind == "activation")
        if self.in_place_free[output]:
            warnings.warn(f"Recorder: the output of {layer!r} was modified in place after its "
                          f"forward at step {step}, which its earlier steps did not do: "
                          "this forward's values and gradient are left out of the record, and "
                          "from now on its outputs are read at the hook", RuntimeWarning,
                          stacklevel=4)  # fmt: skip
        self.in_place_free[output] = False

    def _add_values(self, index: int, value: torch.Tensor, n: int) -> None:
        """Reduce ``value`` at once (one C call, on a CPU), or batch it (small), or reduce it
        in torch (large)."""
        table = self.buckets.table
        if table is not None:
            if n <= BATCH_LIMIT and value.dtype in C_DTYPES and not value.is_contiguous():
                value = value.detach().contiguous()  # one small copy costs less than a batch
            if one(value, index, table):
                return
        if n <= BATCH_LIMIT and self._batched(index, value):
            return
        i = slice(index, index + 1)
        values = real_values(value).reshape(-1)
        x = self.work.get(n, torch.float64, values.device, 3).copy_(values)
        b = self.buckets
        accumulate(b.sums[i], b.maxes[i], x, None, float(b.centres[index]), self.work)

    def _batched(self, index: int, value: torch.Tensor) -> bool:
        """Copy ``value`` into its device's batch (reduced first when full); False: no room."""
        batch = self._batches.get(value.device)
        if batch is None:
            batch = self._batches[value.device] = Batch(value.device)
        if batch.add(index, value):
            return True
        b = self.buckets
        batch.reduce(b.sums, b.maxes, b.centres, self.work)
        return batch.add(index, value)

    def _drop(self, index: int) -> None:
        """Forget key ``index``'s eval forwards of this step: training forwards replace them."""
        self._evals[index] += self._calls[index]
        self._calls[index] = self._numel[index] = 0
        self._evaled[index] = False
        self._row_is[index] = None  # the next call writes its row
        for batch in self._batches.values():
            batch.drop(index)
        self.buckets.sums[index].zero_()
        self.buckets.maxes[index].fill_(float("-inf"))

    def flush(self) -> None:
        """Reduce the batched small values (one pass for all keys) and write the host counts."""
        b = self.buckets
        for batch in self._batches.values():
            batch.reduce(b.sums, b.maxes, b.centres, self.work)
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


def forward_hook(me: weakref.ref[Any], index: int, grad_index: int | None):
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
        rec._intake.seen(index, t, train, _in_backward(), grad if wants else None)

    return hook


def _grad_hook(me: weakref.ref[Any], index: int):
    @_eager
    def hook(grad: torch.Tensor) -> None:
        rec = me()
        if rec is None or rec._closed or inert(grad):
            return
        rec._intake.take(index, grad)

    return hook
