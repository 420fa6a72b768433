"""Training-step cost of a live Explorer (issue 9), eager and under ``torch.compile``.

Arms, each with its own copy of the model (and, compiled, its own ``torch.compile``), so they
interleave without recompiles: none (``plain``), the plain step again timed as another arm
(``noise_control``: the noise floor of the run), and a live Explorer with 4 and with 12 selected
leaf layers at the default throttle (10 updates a second per layer within a 2% time budget).
Its updates are JSON-serialised as a kernel's comm would.

A live Explorer's cost comes in spikes: a step that reduces a layer costs milliseconds, the
steps between cost microseconds. So each arm runs in blocks of consecutive steps lasting
several seconds (at least 2.2 times the throttle's longest wait then, so that every layer
updates at least twice in it; at most 30 s), and a block's figure is its *mean*
step time: a median of single steps would hide the steps that reduce. The first step of a block
is not timed: after the other arms ran, every layer is overdue there, which never happens in a
training loop that does not pause. A ratio is the median over rounds of a block's mean over the
plain arm's block of the same round, on two clocks: wall time (``perf_counter``) and the
process's CPU time (``process_time``, steadier on a shared machine).

Eager: ResNet-18 and a small CNN (15 leaf modules), batch 8 at 64x64; bar (issue 9) 1.05 on
both clocks. Compiled: the small CNN, printed without a bar, with dynamo's graph breaks per arm.

    python benchmarks/bench_live.py            # full (about 6 minutes)
    python benchmarks/bench_live.py --quick    # CI smoke run (< 90 s)
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import torchvision
from torch import nn

from surgeon_widgets.widget import Explorer

BAR = 1.05
MAX_BLOCK = 30.0  # seconds
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


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


def kernel_send(sent: list[int]) -> Callable:
    """A stand-in for the comm: serialise as a kernel would, count the bytes."""

    def send(content: object, buffers: list | None = None) -> None:
        sent.append(len(json.dumps(content)) + sum(len(memoryview(b)) for b in buffers or ()))

    return send


def timed_reports(ex: Explorer, spent: list[float]) -> None:
    """Add the CPU time of each of the Explorer's reductions (stats and send) to ``spent``."""
    report = ex._live.report

    def timed(*args: object, **kwargs: object) -> None:
        start = time.process_time()
        report(*args, **kwargs)  # type: ignore[arg-type]
        spent.append(time.process_time() - start)

    ex._live.report = timed  # type: ignore[method-assign]


def longest_wait(ex: Explorer) -> float:
    """The longest the throttle now holds back an update of one of the selected layers."""
    live = ex._live
    return max((live._spacing(key) for key in live._cost), default=0.0)


def graph_breaks() -> int:
    return sum(torch._dynamo.utils.counters["graph_break"].values())


def block(
    step: Callable, seconds: float, spent: list[float]
) -> tuple[dict[str, float], float, float, float]:
    """Mean seconds per step on each clock over ``seconds`` of consecutive steps; the block's
    whole wall time; the timed steps' CPU seconds and the part of it ``spent`` reducing."""
    resumed = time.perf_counter()
    step()  # resume: not timed (every layer is overdue after the other arms ran)
    mark = len(spent)
    start = {name: clock() for name, clock in CLOCKS.items()}
    n = 0
    while time.perf_counter() - start["wall"] < seconds:
        step()
        n += 1
    took = {name: clock() - start[name] for name, clock in CLOCKS.items()}
    means = {name: took[name] / n for name in CLOCKS}
    return means, time.perf_counter() - resumed, took["cpu"], sum(spent[mark:])


def measure(
    name: str,
    base: nn.Module,
    compiled: bool,
    batch: int,
    rounds: int,
    seconds: float,
    longest_block: float = MAX_BLOCK,
) -> None:
    mode = "compiled" if compiled else "eager"
    label = f"{name} {mode}"
    x, y = torch.randn(batch, 3, 64, 64), torch.randint(0, 10, (batch,))
    arms = {"plain": 0, "noise_control": 0, "4_layers": 4, "12_layers": 12}
    steps: dict[str, Callable] = {}
    explorers: dict[str, Explorer] = {}
    sent: dict[str, list[int]] = {}
    breaks: dict[str, int] = {}
    reduced: dict[str, list[float]] = {}  # CPU seconds of each reduction
    started = time.perf_counter()
    for arm, k in arms.items():
        if arm == "noise_control":  # the plain step again, timed as another arm
            steps[arm], breaks[arm] = steps["plain"], breaks["plain"]
            continue
        model = copy.deepcopy(base).train()
        run = torch.compile(model) if compiled else model
        if k:
            ex = explorers[arm] = Explorer(run, selected=spread_leaves(model, k))
            ex.send = kernel_send(sent.setdefault(arm, []))  # type: ignore[method-assign]
            timed_reports(ex, reduced.setdefault(arm, []))
        steps[arm] = trainer(model, run, x, y)
        before = graph_breaks()
        for _ in range(3):
            steps[arm]()  # warm up (and compile)
        breaks[arm] = graph_breaks() - before
        sent.get(arm, []).clear()
        reduced.get(arm, []).clear()
    warm = time.perf_counter() - started
    per: dict[str, dict[str, list[float]]] = {arm: {c: [] for c in CLOCKS} for arm in arms}
    ran = dict.fromkeys(arms, 0.0)  # wall seconds, for the update rate
    ran_cpu = dict.fromkeys(arms, 0.0)  # of the timed steps, and the part spent reducing
    reduced_cpu = dict.fromkeys(arms, 0.0)
    waits: dict[str, float] = {}
    order = list(arms)
    for r in range(rounds):
        for arm in order[r % len(order) :] + order[: r % len(order)]:  # rotating order
            length = seconds
            if arm in explorers:  # every layer updates at least twice in the timed steps
                wait = longest_wait(explorers[arm])
                waits[arm] = max(waits.get(arm, 0.0), wait)
                length = min(max(seconds, 2.2 * wait), longest_block)
            means, elapsed, cpu, reducing = block(steps[arm], length, reduced.get(arm, []))
            ran[arm] += elapsed
            ran_cpu[arm] += cpu
            reduced_cpu[arm] += reducing
            for clock, value in means.items():
                per[arm][clock].append(value)
    plain = {c: statistics.median(per["plain"][c]) for c in CLOCKS}
    print(f"# [{label}] plain train step {plain['wall'] * 1e3:.1f} ms wall, "
          f"{plain['cpu'] * 1e3:.1f} ms CPU; {rounds} rounds of blocks of >= {seconds:g} s per arm "
          f"(block means; medians of per-round ratios); warm-up {warm:.1f} s")  # fmt: skip
    for arm in order[1:]:
        # each round's block against the plain block of the same round: load that drifts
        # between rounds cancels
        ratio = {
            c: statistics.median(a / b for a, b in zip(per[arm][c], per["plain"][c], strict=True))
            for c in CLOCKS
        }
        what = "noise_control_plain" if arm == "noise_control" else f"live_explorer_{arm}"
        line = f"[{label}] {what}/plain: {ratio['wall']:.3f} wall, {ratio['cpu']:.3f} CPU"
        if arm == "noise_control":
            pass
        elif not compiled:
            met = max(ratio.values()) <= BAR
            line = f"{line:<72} bar {BAR} {'ok' if met else 'MISSED'}"
        if compiled:
            line += f"   graph breaks {breaks[arm]}"
        print(line, flush=True)
    for arm, ex in explorers.items():
        records = len(ex._history)
        assert records > 0, f"{label}: the live Explorer recorded nothing"
        assert ex.errors == [], ex.errors
        share = reduced_cpu[arm] / ran_cpu[arm]
        print(f"# [{label}] {arm}: {len(sent[arm]) / ran[arm]:.1f} updates/s sent while it ran, "
              f"{statistics.median(sent[arm]):.0f} bytes median; reductions took {share:.1%} "
              f"of its timed CPU time; longest wait of a layer {waits[arm]:.1f} s")  # fmt: skip
        ex.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None, help="length of a block")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", module="torch._inductor")
    rounds = args.rounds or (3 if args.quick else 5)
    seconds = args.seconds or (1.2 if args.quick else 4.0)
    print(f"# one thread, batch 8 at 64x64; clocks: wall = perf_counter, CPU = process_time; "
          f"bar {BAR} on both (eager)")  # fmt: skip
    # quick mode (a CI smoke run) keeps its blocks short: layers whose wait is longer update
    # in the untimed first steps only, so its ratios may read low; judge on the full run
    longest = seconds if args.quick else MAX_BLOCK
    resnet = torchvision.models.resnet18(num_classes=10)
    measure("resnet18_64px", resnet, False, 8, rounds, seconds, longest)
    measure("small_cnn_64px", small_cnn(), False, 8, rounds, seconds, longest)
    if not args.no_compile:
        measure("small_cnn_64px", small_cnn(), True, 8, rounds, seconds, longest)

if __name__ == "__main__":
    main()
