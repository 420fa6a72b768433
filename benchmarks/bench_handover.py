"""Cost per forward of the Explorer's click hand-over (the root forward pre-hook).

The pre-hook is registered only while a change waits for the model's thread or the drain
fallback is on; between two drains (at most one every 100 ms) it only reads the clock. This
times a small model's forward (2 layers, hidden 64, so a fixed per-forward cost shows):
plain, with a no-op root pre-hook (any root hook, such as the live view's step counter, takes
torch's slower call path), and with ours added (between drains), interleaved rounds, the
least disturbed round of each; and the hook's body alone. Target: ours adds about 1 us. It
also times a real hand-over: a selection posted from another thread, applied at the next
forward.

    python benchmarks/bench_handover.py            # full
    python benchmarks/bench_handover.py --quick    # CI smoke run (a few seconds)
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch
from torch import nn

from surgeon_widgets.widget.explorer import Explorer
from surgeon_widgets.widget.runtime.handover import Handover
from surgeon_widgets.widget.runtime.kernel_comms import _Drain


class _Idle:
    """A cell watch that says no cell runs, so a due drain returns at once (never the case
    between two drains, which is what is timed here)."""

    running = False


def per_forward(model: nn.Module, x: torch.Tensor, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        model(x)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds, for CI")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rounds, n = (7, 2000) if args.quick else (21, 10000)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    x = torch.randn(4, 64)
    handover = Handover(model)
    drain = _Drain(kernel=None, comm=None, cells=_Idle())  # type: ignore[arg-type]
    plain, other, hooked = [], [], []
    with torch.no_grad():
        per_forward(model, x, n)  # warm up
        for _ in range(rounds):
            plain.append(per_forward(model, x, n))
            # any root hook (e.g. the live view's step counter) takes torch's slower call path;
            # the cost of ours is what it adds on top of such a hook
            noop = model.register_forward_pre_hook(lambda module, args: None)
            other.append(per_forward(model, x, n))
            handover.poll = drain
            drain.next = time.monotonic() + 3600  # between two drains
            hooked.append(per_forward(model, x, n))
            handover.poll = None
            noop.remove()
    # the hook's own body, called as torch calls it (no forward around it: steadier numbers)
    handover.poll = drain
    hook = next(iter(model._forward_pre_hooks.values()))
    bodies = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            hook(model, (x,))
        bodies.append((time.perf_counter() - start) / n)
    handover.close()
    # the least disturbed round of each arm (a shared machine only ever adds time)
    base, with_other, with_hook = min(plain), min(other), min(hooked)
    print(f"[handover] the pre-hook's body between drains: {min(bodies) * 1e6:.2f} us per call")
    print(f"[handover] forward: plain {base * 1e6:.1f} us, with a no-op root pre-hook "
          f"{with_other * 1e6:.1f} us, plus ours (between drains) {with_hook * 1e6:.1f} us")
    print(f"[handover] our pre-hook adds {(with_hook - with_other) * 1e6:.2f} us per forward "
          f"(target ~1 us); over a hookless root {(with_hook - base) * 1e6:.2f} us")

    # a selection made on another thread (as on the kernel subshell), applied at the next forward
    ex = Explorer(model, max_rate=0)
    waits = []
    with torch.no_grad():
        for i in range(rounds):
            thread = threading.Thread(target=setattr, args=(ex, "selected", [["0"], ["2"]][i % 2]))
            thread.start()
            thread.join()
            start = time.perf_counter()
            model(x)  # applies the selection, then records it
            waits.append(time.perf_counter() - start - base)
            assert ex._live.activations.attached == ex.selected
    ex.close()
    wait = statistics.median(waits) * 1e6
    print(f"[handover] a posted selection applied at the next forward: {wait:.0f} us median "
          "(attach the hooks and record the first update)")


if __name__ == "__main__":
    main()
