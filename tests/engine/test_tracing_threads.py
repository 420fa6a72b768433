"""An fx trace of ours leaves the module calls of every other thread alone.

torch.fx patches ``nn.Module.__call__`` and ``__getattr__`` for the whole process while it
traces; without the tracer's thread check, a user's model running on another thread meanwhile
raised ``NameError: module is not installed as a submodule`` (seen: 355,305 of 355,492 calls).
"""

from __future__ import annotations

import threading

import torch
from torch import nn

from surgeon_widgets.engine import tracing


def mlp() -> nn.Module:
    layers = [nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4)]
    return nn.Sequential(*layers)


def test_module_calls_on_another_thread_run_untouched_while_we_trace():
    traced, other = mlp(), mlp()  # other: the user's model on another thread
    x = torch.randn(8, 16)
    with torch.no_grad():
        expected = other(x)
    stop = threading.Event()
    errors: list[BaseException] = []
    calls = [0]
    wrong = [0]

    def user_loop() -> None:
        while not stop.is_set():
            try:
                with torch.no_grad():
                    for model in (other, traced):  # another model, and the very one traced
                        out = model(x)
                        wrong[0] += not isinstance(out, torch.Tensor)
                    wrong[0] += not torch.equal(other(x), expected)
                calls[0] += 1
            except BaseException as error:  # every error is the finding
                errors.append(error)
                return

    thread = threading.Thread(target=user_loop)
    thread.start()
    try:
        for _ in range(200):
            tracing.clear_trace_cache(traced)
            trace = tracing.trace(traced)
            assert trace.method == "fx" and "2" in trace.module_outputs
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert errors == [] and wrong[0] == 0, (errors[:1], wrong[0])
    assert calls[0] > 0  # the other thread really ran meanwhile
