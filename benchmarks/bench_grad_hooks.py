"""Cost of the live Explorer's one-shot gradient hooks (issue 20), on many small layers.

A 48-layer MLP (width 32, batch 16): the forward and backward are cheap, so the hooks' own
Python work shows. Arms, each on its own copy of the model, take turns step by step (shuffled
rounds): ``plain``, an Explorer watching all 48 layers without gradients (``activations``) and
with ``gradients=True`` (``gradients``, the default since issue 32), default throttle. Three
loops: training steps (forward, backward, SGD: each backward takes its forward's hooks), an eval
loop under grad that keeps its last 20 outputs (no backward: hooks pile up to the per-layer
bound) and an eval loop under ``torch.no_grad()`` (eval-only use: gradients on must cost what
off costs, and keep the activations' update count). Printed: each arm's
CPU time over ``plain``'s (``process_time``; the range is the lowest and highest ratio of five
windows), and how many gradient hooks ``live_hooks()`` lists at the end (0 after training).

    python benchmarks/bench_grad_hooks.py            # full (about 2 minutes)
    python benchmarks/bench_grad_hooks.py --quick    # CI smoke run (< 30 s)
"""

from __future__ import annotations

import argparse
import copy
import random
import time
from collections import deque
from collections.abc import Callable

import torch
from torch import nn

from surgeon_widgets.engine.registry import live_hooks
from surgeon_widgets.widget import Explorer

LAYERS, WIDTH, BATCH, KEPT = 48, 32, 16, 20


def mlp() -> nn.Sequential:
    return nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))


def training(model: nn.Module) -> Callable[[], None]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, WIDTH)

    def step() -> None:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    return step


def evaluating(model: nn.Module) -> Callable[[], None]:
    kept: deque[torch.Tensor] = deque(maxlen=KEPT)
    x = torch.randn(BATCH, WIDTH)
    return lambda: kept.append(model(x))


def evaluating_no_grad(model: nn.Module) -> Callable[[], None]:
    x = torch.randn(BATCH, WIDTH)

    def step() -> None:
        with torch.no_grad():
            model(x)

    return step


def _counting(sent: list[dict[str, int]], i: int) -> Callable[..., None]:
    def send(content: dict, buffers: object = None) -> None:
        for it in content.get("items", []) if content.get("type") == "stats" else []:
            sent[i][it["kind"]] = sent[i].get(it["kind"], 0) + 1

    return send


def windows(arm: list[float], base: list[float], k: int = 5) -> list[float]:
    n = max(1, len(base) // k)
    return [sum(arm[i : i + n]) / sum(base[i : i + n]) for i in range(0, len(base) - n + 1, n)]


def measure(loop: str, make: Callable[[nn.Module], Callable[[], None]], seconds: float) -> None:
    base = mlp()
    arms: dict[str, Callable[[], None]] = {}
    explorers = []
    sent: list[dict[str, int]] = [{}, {}]  # items of each kind each Explorer sent (its rate)
    for arm in ("plain", "activations", "gradients"):
        model = copy.deepcopy(base).train()
        if arm != "plain":
            names = [str(i) for i in range(LAYERS)]
            ex = Explorer(model, selected=names, gradients=arm == "gradients")
            ex.send = _counting(sent, len(explorers))  # type: ignore[method-assign]
            explorers.append(ex)
        arms[arm] = make(model)
        for _ in range(5):
            arms[arm]()  # warm up
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    order = list(arms)
    shuffle = random.Random(0).shuffle
    begun = time.perf_counter()
    while time.perf_counter() - begun < seconds:
        shuffle(order)
        for arm in order:
            start = time.process_time()
            arms[arm]()
            times[arm].append(time.process_time() - start)
    plain = times["plain"]
    per_step = sum(plain) / len(plain) * 1e3
    print(f"# [{loop}] plain step {per_step:.2f} ms CPU, {len(plain)} rounds, {seconds:g} s")
    for arm in ("activations", "gradients"):
        spread = windows(times[arm], plain)
        print(f"[{loop}] {arm}/plain: {sum(times[arm]) / sum(plain):.3f} CPU "
              f"(windows {min(spread):.3f}-{max(spread):.3f})")  # fmt: skip
    waiting = sum(1 for owner, _, _ in live_hooks() if owner == "Explorer gradients")
    print(f"[{loop}] gradient hooks listed by live_hooks() at the end: {waiting}")
    print(f"[{loop}] updates sent: activations arm {sent[0]}, gradients arm {sent[1]}")
    for ex in explorers:
        ex.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    seconds = 8.0 if args.quick else 60.0
    print("# one thread; CPU = process_time; the machine's load shifts every arm alike")
    measure("training", training, seconds)
    measure(f"eval keeping {KEPT} outputs", evaluating, seconds)
    measure("eval under no_grad", evaluating_no_grad, seconds)


if __name__ == "__main__":
    main()
