"""Cost of the Recorder on a training step: every 1, 10 and 100 steps against no recorder.

One process (the merge's collectives are no-ops with one rank; the 2-rank tests cover them):
a ResNet-18-like CNN at 64x64 and a small transformer, 12 layers each, activations and
gradients. Each arm runs a block of consecutive steps per round, arms interleaved across
rounds so machine drift hits them alike; medians of per-step wall and CPU time are compared.
Also prints bytes per record and the run folder size per recorded step.

Issue: recording every step costs 1.5-2.7x on CPU; hooks attached but not recording cost
nothing measurable (every=100 should read ~1.00).

    python benchmarks/bench_recorder.py            # full
    python benchmarks/bench_recorder.py --quick    # CI smoke run
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

from surgeon_widgets import Recorder
from surgeon_widgets.record.layout import RECORD


def resnet() -> tuple[nn.Module, list[str], callable]:
    model = torchvision.models.resnet18(num_classes=10)
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
    layers = [n for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))][:12]
    return model, layers, lambda m: nn.functional.cross_entropy(m(x), y)


def transformer() -> tuple[nn.Module, list[str], callable]:
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = torch.randn(8, 32, 64)
    layers = [n for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.LayerNorm))][:12]
    return model, layers, lambda m: m(x).pow(2).mean()


def measure(name: str, build, rounds: int, block: int) -> None:
    model, layers, loss_fn = build()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    folder = Path(tempfile.mkdtemp())
    arms = {"none": None} | {f"every {k}": k for k in (1, 10, 100)}
    recorders = {
        arm: Recorder(model, folder / arm, layers=layers, every=k) for arm, k in arms.items() if k
    }
    for rec in recorders.values():  # attached all the time, but only one arm's records
        rec._hooks.remove()
    wall: dict[str, list[float]] = {a: [] for a in arms}
    cpu: dict[str, list[float]] = {a: [] for a in arms}
    for r in range(rounds + 1):
        for arm in arms:
            rec = recorders.get(arm)
            if rec is not None:  # only this arm's hooks are on the model now
                _attach(rec, model)
            for _ in range(block):
                t0, c0 = time.perf_counter(), time.process_time()
                loss_fn(model).backward()
                if rec is not None:
                    rec.step()
                opt.step()
                opt.zero_grad()
                if r:  # round 0 warms up
                    wall[arm].append(time.perf_counter() - t0)
                    cpu[arm].append(time.process_time() - c0)
            if rec is not None:
                rec._hooks.remove()
    base, base_cpu = statistics.median(wall["none"]), statistics.median(cpu["none"])
    print(f"[{name}] {len(layers)} layers, activations + gradients; no recorder: "
          f"{base * 1e3:.1f} ms/step (medians of {rounds * block})")  # fmt: skip
    for arm in list(arms)[1:]:
        ratio = statistics.median(wall[arm]) / base
        ratio_cpu = statistics.median(cpu[arm]) / base_cpu
        mean_ratio = statistics.mean(wall[arm]) / statistics.mean(wall["none"])
        print(f"[{name}] {arm:>9}: step ratio {ratio:.2f} median, {mean_ratio:.2f} mean "
              f"(cpu {ratio_cpu:.2f})")  # fmt: skip
    every1 = recorders["every 1"]
    for rec in recorders.values():
        rec.close()
    per_step = every1.cost.bytes_written / max(every1.cost.recorded, 1)
    print(f"[{name}] bytes per record: {RECORD.size}; per recorded step: {per_step:.0f} "
          f"({len(every1.keys)} keys); 12 layers x 10k steps of activations: "
          f"{12 * 10_000 * RECORD.size / 1e6:.1f} MB")  # fmt: skip
    print(f"[{name}] rec.cost (every 1): {every1.cost}")


def _attach(rec: Recorder, model: nn.Module) -> None:
    import weakref

    from surgeon_widgets.record.recorder import _forward_hook

    index = {k.key: k.index for k in rec.keys}
    for name in rec.layers:
        hook = _forward_hook(
            weakref.ref(rec), index[f"{name}/output"], index.get(f"{name}/grad_output")
        )
        rec._hooks.forward(model.get_submodule(name), hook, name=name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds, for CI")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rounds, block = (3, 10) if args.quick else (15, 20)
    measure("resnet18-64px", resnet, rounds, block)
    measure("transformer-2x64", transformer, rounds, block)


if __name__ == "__main__":
    main()
