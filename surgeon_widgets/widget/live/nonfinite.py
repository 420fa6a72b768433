"""Where values first went NaN / Inf: every module's output checked on its device, every step.

While layers are selected, :class:`NonFiniteWatch` puts a forward hook on every module of the
model (selected or not, the model itself last; not those that keep finite values finite, such
as ``ReLU``: :data:`FINITE_IN_FINITE_OUT`) and a one-shot hook on the gradient of the
model's output; the :class:`~.steps.StepClock` hands it each step's inputs. Each check is
``torch.aminmax`` of each floating tensor, appended to the step's list in call order: the
input, each module's output as it finishes (a container after the modules it calls; an
output already checked unchanged, e.g. a ``Sequential``'s, is not read again), then the
gradient of the model's output in the backward. ``aminmax`` reads the tensor once and writes
two values; NaN propagates into both and an Inf shows in one. (A sum costs the same but a
finite float16 tensor can sum to Inf; ``isfinite`` writes a mask: 14x the time on a CPU.)
Nothing is read on the host in a hook.

The forward's list is reduced on its device when the model's own forward ends, the
backward's at the next step's start (about ten small ops each, 40-110 us on a CPU, no
transfer): the first non-finite entry of the first step that had one, and that step, are
kept with ``torch.where`` in a 3-value state tensor. :meth:`read` (the Explorer's, at each
update and when a cell ends) moves it to the host once: the step is exact whatever the
throttle skipped, and a step's forward comes before its backward, so the gradient is named
only when the forward of its step was finite. Once found, the origin never changes: the
hooks go.

Parameters' gradients are not checked: reading them all every step (ResNet-18: 11.7M values,
2.7 ms a step on one CPU thread, twice the forward outputs' 1.4 ms) would double the cost. A
gradient that breaks inside the model (the output's was finite) is named by the forward it
breaks next: the module whose weights the optimizer made NaN, at the next step. Costs
(``benchmarks/bench_live.py``, ``nonfinite_flags_on/off``, one CPU thread, nothing
non-finite): ResNet-18 trained at 8x64x64, 58 hooks: +0.7-1.1% a step; a small plain CNN at
64x64 (outputs large beside its arithmetic): +2.5-4.6%. (Checking after a first sighting
instead, at the next forward, would name the wrong layer in training: the NaN gradients of
the break have made every weight NaN by then, and the first layer's output breaks first.)

A ``torch.compile``'d model is checked in the forwards that run eagerly (the recorded steps,
:mod:`..runtime.eager_steps`); the compiled steps between them are not: a break there is
named at the next recorded step. A model with parts compiled in place is not watched (a hook
on every module would break their graphs at each). Names are the model's own
(``engine/naming.py``).

>>> import torch
>>> from torch import nn
>>> from .steps import StepClock
>>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
>>> clock = StepClock(model)
>>> watch = NonFiniteWatch(model, clock)
>>> watch.attach()
>>> _ = model(torch.ones(1, 2))
>>> with torch.no_grad():
...     _ = model[2].weight.fill_(float("inf"))
>>> _ = model(torch.ones(1, 2)); watch.read()
NonFinite(layer='2', key='2/output', step=1, nans=0, infs=0)
>>> watch.close(); clock.close()
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ...engine import guard
from ...engine.registry import HookRegistry
from ...engine.tensors import iter_tensors
from ..history import NonFinite
from ..runtime.compiled import compile_safe
from .failures import Failure, failed, log_failure
from .hooks import leaf_label
from .steps import StepClock

__all__ = ["FINITE_IN_FINITE_OUT", "INPUT", "LAYOUTS", "OUTPUT_GRAD", "NonFiniteWatch"]

INPUT = "input"  # the key of the model's input (layer "")
OUTPUT_GRAD = "grad_output"  # the key of the gradient of the model's output (layer "")
LAYOUTS = 64  # call orders kept between two reads; a read is forced before more
# Modules whose output is finite when their input is: not hooked. Were their output non-finite,
# so was their input, the output of a module checked before them (or the model's input), which
# is named. (Not Dropout: its 1/(1-p) can overflow float16; not average pools: sums.)
FINITE_IN_FINITE_OUT = (
    nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.Sigmoid, nn.Tanh, nn.Identity, nn.Flatten, nn.Unflatten,
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
)  # fmt: skip
PENDING = 4  # output-gradient hooks kept waiting for a backward (forwards with none: eval)
FORWARD, BACKWARD = 0, 1  # a step's two lists


class NonFiniteWatch:
    """Finiteness flags of every module output, input and gradient of ``model``, on its device.

    Args:
        model: the module whose submodules are hooked (the user's own, unwrapped).
        clock: the shared step clock; each counted forward starts a step here.
        on_failure: ``(layer, kind, error)`` of a check that raised (the forward goes on).
    """

    def __init__(
        self, model: nn.Module, clock: StepClock, on_failure: Failure = log_failure
    ) -> None:
        self.model = model
        self.clock = clock
        self.on_failure = on_failure
        self.found: NonFinite | None = None
        self.registry = HookRegistry("Explorer non-finite")
        self.grads = HookRegistry("Explorer non-finite gradients")
        self._pending: deque[Any] = deque()  # handles of output-gradient hooks
        self._values: list[torch.Tensor] = []  # the open list's mins and maxes, in call order
        self._names: list[tuple[str, str]] = []  # (layer, key) of each pair
        self._part = FORWARD
        self._step = -1
        self._last: tuple[weakref.ref[torch.Tensor], int] | None = None  # the last output read
        # per part: (first step, (layer, key) of each entry) of each call order since a read
        self._layouts: tuple[deque, deque] = (deque(), deque())
        self._state: torch.Tensor | None = None  # [step, part, index] (int64); step -1: none
        self._unread = False
        clock.listen(_begin_of(weakref.ref(self)))  # the clock must not keep this alive

    @property
    def attached(self) -> bool:
        return len(self.registry) > 0

    def attach(self) -> None:
        """Hook every module (nothing once the origin is found)."""
        if self.attached or self.found is not None:
            return
        self._close()
        self._step, self._part = max(self.clock.step, 0), FORWARD  # mid-forward: this one
        me = weakref.ref(self)  # the model must not keep the widget alive
        for name, module in self.model.named_modules():
            if type(module) in FINITE_IN_FINITE_OUT and name:
                continue
            key = f"{name}/output" if name else "output"
            self.registry.forward(module, _output_hook(me, name, key, module), name=name)

    def park(self, gradients: bool = False) -> None:
        """Take the forward hooks off; ``gradients``: the gradient hooks too (the backward of
        the last forward is done)."""
        self.registry.remove()
        if gradients:
            self.grads.remove()
            self._pending.clear()

    def close(self) -> None:
        """Remove every hook (what is already on the device can still be :meth:`read`)."""
        self.park(gradients=True)

    def begin(self, step: int, args: Any, kwargs: Any) -> None:
        """A forward of the model starts (step ``step``): close the last step's lists, check
        the input."""
        try:
            self._close()
            self._step, self._part, self._last = step, FORWARD, None
            if self.attached:
                self._check("", INPUT, (args, kwargs))
        except Exception as error:  # never break the user's forward
            failed(self.on_failure, "", "non-finite", error)

    def _begin(self, step: int, args: Any, kwargs: Any) -> None:
        if self.attached or self._values:
            self.begin(step, args, kwargs)

    def read(self) -> NonFinite | None:
        """The first non-finite value's place (one small transfer, only when a list was
        reduced since the last read); ``None`` while none was seen. Counts are not known
        here (``nans = infs = 0``); the history adds them when it has that step's record."""
        if self.found is not None or not self._unread or self._state is None:
            return self.found
        self._unread = False
        step, part, index = self._state.tolist()
        if step < 0:
            for runs in self._layouts:  # no step before now can be named any more
                while len(runs) > 1:
                    runs.popleft()
            return None
        layer, key = _layout(self._layouts[part], step)[index]
        self.found = NonFinite(layer, key, step, 0, 0)
        self.close()
        return self.found

    def output(self, name: str, key: str, output: Any) -> None:
        """Check the output of module ``name`` (its forward hook; ``key``: of a tensor)."""
        if type(output) is torch.Tensor:  # most modules: the short way
            if self._fresh(output):
                self._check_tensor(name, key, output)
        else:
            for label, tensor in iter_tensors(output):
                if self._fresh(tensor):
                    leaf = leaf_label("output", label)
                    self._check(name, f"{name}/{leaf}" if name else leaf, tensor)
        if name == "":  # the model's own forward ended: its list is complete
            self._close()
            self._part = BACKWARD
            if torch.is_grad_enabled():
                self._watch_output_grad(output)

    def gradient(self, grad: torch.Tensor) -> None:
        """Check the gradient of the model's output (in the backward)."""
        self._check("", OUTPUT_GRAD, grad)

    def _fresh(self, tensor: torch.Tensor) -> bool:
        """Not the tensor read last, unchanged (a container returning its last child's)."""
        version = -1 if tensor.is_inference() else tensor._version
        last = self._last
        if last is not None and last[0]() is tensor and last[1] == version:
            return False
        self._last = (weakref.ref(tensor), version)
        return True

    def _check(self, layer: str, key: str, value: Any) -> None:
        for _, tensor in iter_tensors(value):
            if tensor.is_complex():
                tensor = torch.view_as_real(tensor)
            self._check_tensor(layer, key, tensor)

    def _check_tensor(self, layer: str, key: str, tensor: torch.Tensor) -> None:
        if tensor.is_floating_point() and tensor.numel():  # integers are always finite
            low, high = torch.aminmax(tensor.detach())
            self._values += (low, high)
            self._names.append((layer, key))

    def _close(self) -> None:
        """Reduce the open list on its device into the state (no transfer)."""
        values, names = self._values, tuple(self._names)
        if not values:
            return
        self._values, self._names = [], []
        runs = self._layouts[self._part]
        if not runs or runs[-1][1] != names:
            if len(runs) >= LAYOUTS:
                self.read()  # a call order per step: read now rather than forget one
            runs.append((self._step, names))
        try:
            pairs = torch.stack(values)
        except RuntimeError:  # a model spread over devices: onto the first one's
            pairs = torch.stack([v.to(values[0].device) for v in values])
        bad = ~torch.isfinite(pairs.view(-1, 2)).all(dim=1)
        index = bad.to(torch.uint8).argmax()  # the first maximum: the first non-finite
        candidate = torch.stack([index * 0 + self._step, index * 0 + self._part, index])
        state = self._state
        if state is None:
            state = torch.full((3,), -1, dtype=torch.int64, device=pairs.device)
        new = bad.any() & (state[0] < 0)
        self._state = torch.where(new.to(state.device), candidate.to(state.device), state)
        self._unread = True

    def _watch_output_grad(self, output: Any) -> None:
        me = weakref.ref(self)
        for _, tensor in iter_tensors(output):
            if tensor.requires_grad:
                hook = _output_grad_hook(me)
                self._pending.append(self.grads.tensor(tensor, hook, "", once=True))
                if len(self._pending) > PENDING:
                    self.grads.discard(self._pending.popleft())
                return  # the first output's (a loss, or the logits)


def _begin_of(me: weakref.ref[NonFiniteWatch]):
    def begin(step: int, args: Any, kwargs: Any) -> None:
        watch = me()
        if watch is not None:
            watch._begin(step, args, kwargs)

    return begin


def _layout(runs: Iterable[tuple[int, tuple]], step: int) -> tuple:
    """The call order of ``step``: the last run that began at or before it."""
    names: tuple = ()
    for first, order in runs:
        if first > step:
            break
        names = order
    return names


def _output_hook(me: weakref.ref[NonFiniteWatch], name: str, key: str, module: nn.Module):
    target = weakref.ref(module)

    def observe(hooked: nn.Module, args: Any, output: Any) -> None:
        watch = me()
        if watch is None or hooked is not target() or guard.inert(output):
            return
        try:
            watch.output(name, key, output)
        except Exception as error:  # never break the user's forward
            failed(watch.on_failure, name, "non-finite", error)

    return compile_safe(observe)


def _output_grad_hook(me: weakref.ref[NonFiniteWatch]):
    def hook(grad: torch.Tensor) -> None:
        watch = me()
        if watch is None or guard.inert(grad):
            return
        try:
            watch.gradient(grad)
        except Exception as error:
            failed(watch.on_failure, "", "non-finite", error)

    return hook
