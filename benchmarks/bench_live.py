"""Training-step cost of a live Explorer (issue 9), eager and under ``torch.compile``.

Each arm has its own copy of the model (and, compiled, its own ``torch.compile``), so arms
interleave without recompiles: none, a live Explorer with 4 selected layers, and with 12, all
at the default throttle (10 updates a second per layer). Medians of interleaved blocks of
steps; ratios against the plain arm of the same process. Eager uses a ResNet-18 at 64x64;
compiled a small CNN (15 leaf modules), so inductor's compile stays within CI's time.

Bar (issue 9): eager within 1.05. Compiled: printed (each selected layer costs one graph
break through ``torch.compiler.disable``).

    python benchmarks/bench_live.py            # full
    python benchmarks/bench_live.py --quick    # CI smoke run
"""

from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import torchvision
from torch import nn

from surgeon_widgets.widget import Explorer

BAR = 1.05


def small_cnn() -> nn.Module:
    blocks: list[nn.Module] = []
    channels = [3, 16, 32, 32, 64]
    for a, b in itertools.pairwise(channels):
        blocks += [nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU()]
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def spread_leaves(model: nn.Module, k: int) -> list[str]:
    leaves = [n for n, m in model.named_modules() if n and not list(m.children())]
    return [leaves[round(i * (len(leaves) - 1) / (k - 1))] for i in range(k)]


def trainer(model: nn.Module, run: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(run(x), y).backward()
        opt.step()

    return step


def measure(
    name: str, base: nn.Module, compiled: bool, batch: int, rounds: int, block: int
) -> None:
    x, y = torch.randn(batch, 3, 64, 64), torch.randint(0, 10, (batch,))
    steps: dict[str, Callable] = {}
    explorers = []
    for arm, k in (("plain", 0), ("4_layers", 4), ("12_layers", 12)):
        model = copy.deepcopy(base).train()
        run = torch.compile(model) if compiled else model
        if k:
            ex = Explorer(run, selected=spread_leaves(model, k))  # default throttle
            ex.send = lambda *a, **kw: None  # type: ignore[method-assign]  # no kernel here
            explorers.append(ex)
        steps[arm] = trainer(model, run, x, y)
    started = time.perf_counter()
    for step in steps.values():
        for _ in range(3):
            step()  # warm up (and compile)
    warm = time.perf_counter() - started
    wall: dict[str, list[float]] = {arm: [] for arm in steps}
    for _ in range(rounds):
        for arm, step in steps.items():
            for _ in range(block):
                start = time.perf_counter()
                step()
                wall[arm].append(time.perf_counter() - start)
    plain = statistics.median(wall["plain"])
    mode = "compiled" if compiled else "eager"
    print(f"[{name} {mode}] plain train step {plain * 1e3:.1f} ms (medians of {rounds * block}; "
          f"warm-up {warm:.1f} s)")  # fmt: skip
    for arm in ("4_layers", "12_layers"):
        ratio = statistics.median(wall[arm]) / plain
        verdict = "" if compiled else (" ok" if ratio <= BAR else f" MISSED (bar {BAR})")
        print(f"[{name} {mode}] live explorer {arm}/plain: {ratio:.3f}{verdict}")
    for ex in explorers:
        records = len(ex._history)
        assert records > 0, f"{mode}: the live Explorer recorded nothing"
        assert ex.errors == [], ex.errors
        ex.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", module="torch._inductor")
    rounds, block = (4, 3) if args.quick else (10, 5)
    measure("resnet18_64px", torchvision.models.resnet18(num_classes=10), False, 8, rounds, block)
    measure("small_cnn_64px", small_cnn(), False, 8, rounds, block)
    if not args.no_compile:
        measure("small_cnn_64px", small_cnn(), True, 8, rounds, block)


if __name__ == "__main__":
    main()
