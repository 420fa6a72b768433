"""Parameter histograms of watched layers, as ``wandb.watch`` shows them.

For each watched module, its parameters (:func:`shown_params`: its own, or for a container
without any, e.g. Hugging Face's ``BertOutput``, those of its direct children, named
``dense.weight``) are reduced by :func:`~surgeon_widgets.engine.stats.tensor_stats` (one
transfer per tensor) at every due forward: the weights (kind ``"weight"``, leaf ``weight``),
the change since the last recorded forward when an optimizer step changed them (kind
``"update"``, leaf ``weight.update``), and, once ``backward()`` has accumulated it, the
gradient (kind ``"weight grad"``, leaf ``weight.grad``, equal to ``param.grad``). Records go
through the Explorer's history and transport like the activations'.

>>> import torch
>>> from torch import nn
>>> model = nn.Sequential(nn.Linear(2, 2))
>>> got = []
>>> steps = iter(range(100))
>>> watch = ParamWatch(model, got.extend, lambda key: (True, next(steps)))
>>> watch.sync(["0"])
>>> model(torch.ones(1, 2)).sum().backward()
>>> watch.close()
>>> sorted({(r.leaf, r.kind) for r in got})  # doctest: +NORMALIZE_WHITESPACE
[('bias', 'weight'), ('bias.grad', 'weight grad'),
 ('weight', 'weight'), ('weight.grad', 'weight grad')]
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from ...engine.guard import inert
from ...engine.registry import HookRegistry
from ...engine.stats import tensor_stats
from ..history import Record
from .failures import Failure, failed, log_failure

__all__ = ["ParamWatch", "params_note", "shown_params"]

NOTE_EXAMPLES = 4  # submodules named in a note saying where a container's weights are


def shown_params(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters a module's "parameters" box shows: its own, or (a container without
    any) its direct children's, named ``child.param``.

    >>> block = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    >>> [name for name, _ in shown_params(block)]
    ['0.weight', '0.bias']
    """
    own = list(module.named_parameters(recurse=False))
    if own:
        return own
    return [
        (f"{child}.{name}", param)
        for child, sub in module.named_children()
        for name, param in sub.named_parameters(recurse=False)
    ]


def params_note(module: nn.Module, name: str = "") -> str:
    """Why the "parameters" box of ``module`` (called ``name``) cannot be ticked, and how to see
    its weights (``""``: it can): the shallowest layers below whose own box can be ticked
    (their own weights or their direct children's), each a name the tree selects.

    >>> params_note(nn.ReLU())
    'ReLU has no parameters'
    >>> params_note(nn.Sequential(nn.Sequential(nn.Sequential(nn.Linear(2, 2)))), "block")
    "no weights of its own or its children's: select 'block.0.0' in the tree, then tick \
'parameters' in its panel"
    """
    if shown_params(module):
        return ""
    holders: list[str] = []
    for sub, m in module.named_modules():
        # a layer below one already named is covered by it (its box shows its children's)
        if sub and shown_params(m) and not any(sub.startswith(f"{h}.") for h in holders):
            holders.append(sub)
    if not holders:
        return f"{type(module).__name__} has no parameters"
    full = [f"{name}.{sub}" if name else sub for sub in holders]
    more = ", ..." if len(full) > NOTE_EXAMPLES else ""
    shown = ", ".join(map(repr, full[:NOTE_EXAMPLES])) + more
    its = "its panel" if len(full) == 1 else "their panels"
    return (f"no weights of its own or its children's: select {shown} in the tree, then tick "
            f"'parameters' in {its}")


class ParamWatch:
    """Hooks that report the own parameters of a set of modules of ``model``.

    Args:
        model: the model (names as in ``get_layers``).
        sink: called with one update's records.
        due: ``due((name, kind)) -> (is_due, step)``, the Explorer's throttle and step counter.
        on_failure: called with ``(layer, "parameters", error)`` when our hook raised.
    """

    def __init__(
        self,
        model: nn.Module,
        sink: Callable[[list[Record]], None],
        due: Callable[[tuple[str, str]], tuple[bool, int]],
        on_failure: Failure = log_failure,
    ) -> None:
        self.model = model
        self.sink = sink
        self.on_failure = on_failure
        self.due = due
        self.registry = HookRegistry("Explorer parameters")
        self.grads = HookRegistry("Explorer parameter gradients")
        self._attached: set[str] = set()
        self._previous: dict[tuple[str, str], torch.Tensor] = {}  # weights at the last record
        self._steps: dict[str, int] = {}  # last recorded forward step of each layer

    @property
    def attached(self) -> list[str]:
        return sorted(self._attached)

    def sync(self, names: Iterable[str]) -> None:
        """Watch exactly the modules ``names`` (skipping those that show no parameters)."""
        wanted = set(names)
        for name in (self._attached | set(self._steps)) - wanted:
            self.registry.remove(name)
            self.grads.remove(name)
            self._steps.pop(name, None)
            for key in [k for k in self._previous if k[0] == name]:
                del self._previous[key]
        me = weakref.ref(self)
        for name in sorted(wanted - self._attached):
            module = self.model.get_submodule(name)
            params = shown_params(module)
            if not params:
                continue
            self.registry.forward_pre(module, _weights_hook(me, name, params), name=name)
            self.grads.remove(name)  # parked ones (kept for a backward) are not added twice
            for pname, param in params:
                if param.requires_grad:
                    self.grads.post_accumulate_grad(param, _grad_hook(me, name, pname), name)
        self._attached = {n for n in wanted if _has_hooks(self, n)}

    def note(self, name: str) -> str:
        """:func:`params_note` of module ``name`` (``""``: its parameters can be shown)."""
        return params_note(self.model.get_submodule(name), name)

    def park(self, gradients: bool = False) -> None:
        """Take the forward hooks off, keeping the weights (the next :meth:`sync` puts them
        back); ``gradients``: the parameters' gradient hooks too (the backward is done)."""
        self.registry.remove()
        self._attached = set()
        if gradients:
            self.grads.remove()

    def close(self) -> None:
        """Remove every hook and drop the kept weights."""
        self.registry.remove()
        self.grads.remove()
        self._attached = set()
        self._previous.clear()

    def __del__(self) -> None:
        self.close()

    def record_weights(self, name: str, params: list[tuple[str, nn.Parameter]]) -> None:
        due, step = self.due((name, "weight"))
        if not due:
            return
        self._steps[name] = step
        records = []
        for pname, param in params:
            weight = param.detach()
            mode = self.model.training
            records.append(Record(f"{name}/{pname}", name, pname, "weight", step,
                                  tensor_stats(weight), mode))  # fmt: skip
            before = self._previous.get((name, pname))
            if before is not None and before.shape == weight.shape:
                change = tensor_stats(weight - before)
                if change.zeros < 1.0:  # an optimizer step (or the user) changed them
                    leaf = f"{pname}.update"
                    key = f"{name}/{leaf}"
                    records.append(Record(key, name, leaf, "update", step, change, mode))
            self._previous[(name, pname)] = weight.clone()
        self.sink(records)

    def record_grad(self, name: str, pname: str, param: nn.Parameter) -> None:
        if param.grad is None or name not in self._steps:
            return
        leaf = f"{pname}.grad"
        due, _ = self.due((f"{name}/{leaf}", "weight grad"))
        if due:
            stats = tensor_stats(param.grad)
            step = self._steps[name]
            self.sink([Record(f"{name}/{leaf}", name, leaf, "weight grad", step, stats)])


def _has_hooks(watch: ParamWatch, name: str) -> bool:
    return any(n == name for _, n in watch.registry.list())


def _weights_hook(me: weakref.ref[ParamWatch], name: str, params: list[tuple[str, nn.Parameter]]):
    def hook(module: nn.Module, args: Any) -> None:
        watch = me()
        if watch is None or inert(*args):
            return
        try:
            watch.record_weights(name, params)
        except Exception as error:  # never break the user's forward
            failed(watch.on_failure, name, "parameters", error)

    return hook


def _grad_hook(me: weakref.ref[ParamWatch], name: str, pname: str):
    def hook(param: nn.Parameter) -> None:
        watch = me()
        if watch is None or inert(param):
            return
        try:
            watch.record_grad(name, pname, param)
        except Exception as error:  # never break the user's backward
            failed(watch.on_failure, name, "parameters", error)

    return hook
