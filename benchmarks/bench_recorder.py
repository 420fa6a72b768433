"""Cost of the Recorder on a training step: every 1, 10 and 100 steps against no recorder.

One process (the merge's collectives are no-ops with one rank; the 2-rank tests cover them):
a ResNet-18-like CNN at 64x64 and a small transformer, 12 layers each, activations and
gradients. Each arm runs a block of consecutive steps per round, arms interleaved across
rounds so machine drift hits them alike; medians of per-step wall and CPU time are compared.
Also prints bytes per record and the run folder size per recorded step.

Issue: recording every step costs 1.5-2.7x on CPU; hooks attached but not recording cost
nothing measurable (every=100 should read ~1.00).

Two ranks (issue 17 item 4: every=1 <= 1.5x, every=10 <= 1.05x): the transformer under DDP on
2 spawned gloo processes, the same interleaved arms; rank 0 prints the ratios.

Fixed cost (issue 17 item 4): 12 tiny Linear layers (8 -> 8, batch 4), outputs and gradients,
every=1: (recorded step - plain step) / keys, target <= 30 us per key per recorded step. Two
copies of the model, one recorded, blocks interleaved.

C loop off (issue 31 item 3: its own gain): the "no C" arms (every 1 / 10, and a third copy in
the fixed cost) run with only ``record/accumulate_native``'s C loop turned off, interleaved with
the others; bars for that path: 2 ranks every=10 <= 1.05x, every=1 <= 1.6x.

    python benchmarks/bench_recorder.py            # full
    python benchmarks/bench_recorder.py --quick    # CI smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

from surgeon_widgets import Recorder
from surgeon_widgets.record import accumulate_native
from surgeon_widgets.record.layout import RECORD


def c_loop(on: bool) -> None:
    """Turn only the C loop (``record/accumulate_native``) on or off for the arms that follow:
    off, every reduction takes the torch / numpy path (issue 31 item 3: its own gain)."""
    accumulate_native.LIBRARY = BUILT if on else None


BUILT = accumulate_native.LIBRARY  # the C loop built with the package (None: it was not)


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


def measure(name: str, build, rounds: int, block: int, wrap=None) -> None:
    model, layers, loss_fn = build()
    model = wrap(model) if wrap is not None else model
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    folder = Path(tempfile.mkdtemp())
    arms = {"none": None} | {f"every {k}{c}": k for k in (1, 10, 100)
                                   for c in ("", " no C") if k < 100 or not c}
    recorders = {}
    for arm, k in arms.items():
        if k:
            c_loop("no C" not in arm)
            recorders[arm] = Recorder(model, folder / arm.replace(" ", "_"), layers=layers, every=k)
    for rec in recorders.values():  # attached all the time, but only one arm's records
        rec._hooks.remove()
    wall: dict[str, list[float]] = {a: [] for a in arms}
    cpu: dict[str, list[float]] = {a: [] for a in arms}
    for r in range(rounds + 1):
        for arm in arms:
            rec = recorders.get(arm)
            c_loop("no C" not in arm)
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
        print(f"[{name}] {arm:>14}: step ratio {ratio:.2f} median, {mean_ratio:.2f} mean "
              f"(cpu {ratio_cpu:.2f})")  # fmt: skip
    every1 = recorders["every 1"]
    for arm, rec in recorders.items():
        c_loop("no C" not in arm)
        rec.close()
    c_loop(True)
    per_step = every1.cost.bytes_written / max(every1.cost.recorded, 1)
    print(f"[{name}] bytes per record: {RECORD.size}; per recorded step: {per_step:.0f} "
          f"({len(every1.keys)} keys); 12 layers x 10k steps of activations: "
          f"{12 * 10_000 * RECORD.size / 1e6:.1f} MB")  # fmt: skip
    print(f"[{name}] rec.cost (every 1): {every1.cost}")


def fixed_cost(rounds: int, block: int) -> None:
    torch.manual_seed(0)
    plain = nn.Sequential(*[nn.Linear(8, 8) for _ in range(12)])
    recorded = nn.Sequential(*[nn.Linear(8, 8) for _ in range(12)])
    recorded.load_state_dict(plain.state_dict())
    no_c = nn.Sequential(*[nn.Linear(8, 8) for _ in range(12)])
    no_c.load_state_dict(plain.state_dict())
    x = torch.randn(4, 8)
    recs = {"recorded": Recorder(recorded, tempfile.mkdtemp(), every=1)}
    c_loop(False)
    recs["recorded, no C"] = Recorder(no_c, tempfile.mkdtemp(), every=1)
    arms = (("plain", plain), ("recorded", recorded), ("recorded, no C", no_c))
    times: dict[str, list[float]] = {arm: [] for arm, _ in arms}
    for r in range(rounds + 1):
        for arm, model in arms:
            c_loop(arm != "recorded, no C")
            rec = recs.get(arm)
            for _ in range(block):
                t0 = time.perf_counter()
                model(x).sum().backward()
                if rec is not None:
                    rec.step()
                if r:
                    times[arm].append(time.perf_counter() - t0)
    plain_s = statistics.median(times["plain"])
    for arm, rec in recs.items():
        c_loop(arm != "recorded, no C")
        rec.close()
        rec_s = statistics.median(times[arm])
        per_key = (rec_s - plain_s) / len(rec.keys) * 1e6
        print(f"[fixed cost] 12 Linear(8, 8), {len(rec.keys)} keys, every=1, {arm}: plain "
              f"{plain_s * 1e6:.0f} us/step, recorded {rec_s * 1e6:.0f} us/step: "
              f"{per_key:.1f} us per key per recorded step (target <= 30)")  # fmt: skip
        print(f"[fixed cost] rec.cost ({arm}): {rec.cost}")
    c_loop(True)


def _attach(rec: Recorder, model: nn.Module) -> None:
    import weakref

    from surgeon_widgets.record.intake import forward_hook

    index = {k.key: k.index for k in rec.keys}
    for name in rec.layers:
        hook = forward_hook(
            weakref.ref(rec), index[f"{name}/output"], index.get(f"{name}/grad_output")
        )
        rec._hooks.forward(rec.model.get_submodule(name), hook, name=name)


def _ranks_worker(rank: int, world: int, port: int, rounds: int, block: int) -> None:
    from datetime import timedelta

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))  # fmt: skip
    try:
        if rank:  # the ratios are rank 0's (both ranks step together)
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                measure("2 ranks DDP transformer-2x64", transformer, rounds, block,
                        DistributedDataParallel)  # fmt: skip
        else:
            measure("2 ranks DDP transformer-2x64", transformer, rounds, block,
                    DistributedDataParallel)  # fmt: skip
    finally:
        dist.destroy_process_group()


def two_ranks(rounds: int, block: int) -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_ranks_worker, args=(2, port, rounds, block), nprocs=2,
                       start_method="spawn")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds, for CI")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rounds, block = (3, 10) if args.quick else (15, 20)
    fixed_cost(*((5, 20) if args.quick else (30, 40)))
    measure("resnet18-64px", resnet, rounds, block)
    measure("transformer-2x64", transformer, rounds, block)
    two_ranks(rounds, block)


if __name__ == "__main__":
    main()
