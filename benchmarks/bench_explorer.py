"""Overhead of the Explorer's live stats on a training step, bytes per update, tree build time.

For a ResNet-18-like CNN (64x64 images) and a small BERT, one training step (forward, loss,
backward, SGD step) is timed without the widget and with 4 and 12 selected layers, at the
default throttle (10 updates a second per layer) and updating every step (``max_rate=0``).
Runs are interleaved (a block of consecutive steps of each arm per round, so the throttle
sees a real loop) and medians compared, so drift in machine load hits every arm alike. Wall
time is the target; CPU time (``process_time``) is printed beside it because on a shared,
oversubscribed machine it is the steadier measure. Sends are serialised to JSON as a kernel
would.

Targets (issue): <= 1.05 at the default throttle, <= 1.15 updating every step.

    python benchmarks/bench_explorer.py            # full (~ a few minutes)
    python benchmarks/bench_explorer.py --quick    # CI smoke run (< 60 s)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torchvision
import transformers
from torch import nn

from surgeon_widgets.widget import Explorer

Step = Callable[[], None]
Setup = tuple[nn.Module, Step, Any]


def resnet_step(batch: int) -> Setup:
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, 3, 64, 64), torch.randint(0, 10, (batch,))

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return model, step, x


def bert_step(batch: int) -> Setup:
    config = transformers.BertConfig(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
        vocab_size=1000, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(config).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids, y = torch.randint(0, 1000, (batch, 32)), torch.randint(0, 2, (batch,))

    def step() -> None:
        opt.zero_grad()
        model(input_ids=ids, labels=y).loss.backward()
        opt.step()

    return model, step, {"input_ids": ids}


def spread_leaves(model: nn.Module, k: int, ran: set[str]) -> list[str]:
    """``k`` leaf modules that run in forward, spread evenly from the input to the output."""
    leaves = [n for n, m in model.named_modules() if n in ran and not list(m.children())]
    return [leaves[round(i * (len(leaves) - 1) / (k - 1))] for i in range(k)]


def measure(name: str, model: nn.Module, step: Step, inputs: Any, rounds: int, block: int) -> None:
    probe = Explorer(model, inputs)  # which modules run (their output shapes)
    ran = set(probe.shapes)
    probe.close()
    sizes: list[int] = []
    # one live Explorer per model (issue 9): every arm reuses it with its rate and selection
    ex = Explorer(model)
    ex.send = lambda c, b=None: sizes.extend(  # type: ignore[method-assign]
        [len(json.dumps(c)) + sum(len(x) for x in b or [])]
    )
    arms: dict[str, tuple[float | None, list[str]]] = {"plain": (None, [])}
    for k in (4, 12):
        for label, rate in (("", 10.0), ("_every_step", 0.0)):
            arms[f"explorer_train_step_{k}_layers{label}"] = (rate, spread_leaves(model, k, ran))
    wall: dict[str, list[float]] = {arm: [] for arm in arms}
    cpu: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(2):
        step()  # warm up allocator and autograd
    for _ in range(rounds):
        for arm, (rate, layers) in arms.items():
            if rate is not None:
                ex.max_rate = rate
                ex.select(layers)
            for _ in range(block):  # consecutive steps, so the throttle sees a real loop
                start, start_cpu = time.perf_counter(), time.process_time()
                step()
                wall[arm].append(time.perf_counter() - start)
                cpu[arm].append(time.process_time() - start_cpu)
            ex.select([])
    ex.close()
    plain, plain_cpu = statistics.median(wall["plain"]), statistics.median(cpu["plain"])
    print(f"[{name}] plain train step: {plain * 1e3:.1f} ms wall, {plain_cpu * 1e3:.1f} ms CPU "
          f"(medians of {rounds * block})")  # fmt: skip
    for arm in arms:
        if arm != "plain":
            ratio = statistics.median(wall[arm]) / plain
            ratio_cpu = statistics.median(cpu[arm]) / plain_cpu
            print(f"[{name}] {arm}/plain: {ratio:.2f}  (CPU time: {ratio_cpu:.2f})")
    if sizes:
        print(f"[{name}] bytes per update (one layer): {statistics.median(sizes):.0f} median, "
              f"{max(sizes)} max")  # fmt: skip


def tree_build() -> None:
    config = transformers.LlamaConfig(
        num_hidden_layers=80, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256,
    )  # fmt: skip
    start = time.perf_counter()
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    built = time.perf_counter()
    ex = Explorer(model)
    done = time.perf_counter()
    print(f"[llama-70b-meta] model on meta: {(built - start) * 1e3:.0f} ms; explorer tree "
          f"build: {(done - built) * 1e3:.0f} ms for {len(ex.rows)} rows")  # fmt: skip
    ex.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds, for CI (< 60 s)")
    parser.add_argument("--rounds", type=int, default=None)
    # one thread: on shared machines oversubscribed intra-op threads make timings meaningless
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    rounds = args.rounds or (4 if args.quick else 8)
    block = 3 if args.quick else 5
    batch = 8 if args.quick else 16
    measure("resnet18_64px", *resnet_step(batch), rounds, block)
    measure("bert_small", *bert_step(batch), rounds, block)
    tree_build()


if __name__ == "__main__":
    main()
