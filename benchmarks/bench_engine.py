"""Engine benchmark: Inspect, Extract and get_nodes against a plain forward and the baselines.

Prints one ratio per line, ``name/baseline[model]: value``, with its target when it has one:

    inspect_12_layers/plain[resnet50]: 1.013   target <= 1.02   ok

Timings are medians of interleaved runs on one thread (every variant runs once per round, in
a rotating order), so slow drift of the machine hits all variants alike.

    python benchmarks/bench_engine.py           # full: ResNet-50 at 224x224, BERT-base
    python benchmarks/bench_engine.py --quick   # CI: ResNet-50 at 64x64, 2-layer BERT, < 90 s
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from surgeon_widgets import Extract, Inspect, get_layers, get_nodes

# ---------------------------------------------------------------------------------------------
# Timing


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


@dataclass(frozen=True)
class Run:
    """How to time: rounds per variant, clock, and the least work (seconds) per sample."""

    rounds: int
    clock: str = "cpu"
    min_sample: float = 0.1


def interleaved(fns: dict[str, Callable[[], object]], run: Run) -> dict[str, float]:
    """Median seconds per call of each variant.

    Each round runs every variant once, in a rotating order; a variant faster than
    ``run.min_sample`` is called several times per sample. The default ``cpu`` clock is this
    thread's CPU time: with ``torch.set_num_threads(1)`` every op runs on this thread, so other
    processes on a busy machine do not count.
    """
    now, rounds, min_sample = CLOCKS[run.clock], run.rounds, run.min_sample
    names = list(fns)
    number = {}
    for name in names:  # warm-up and calibration
        start = now()
        fns[name]()
        number[name] = max(1, math.ceil(min_sample / max(now() - start, 1e-6)))
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn, n = fns[name], number[name]
            start = now()
            for _ in range(n):
                fn()
            times[name].append((now() - start) / n)
    return {name: statistics.median(ts) for name, ts in times.items()}


def report(label: str, value: float, target: str | None = None) -> None:
    """Print ``label: value``, and the target with ok/MISSED (``'<= 1.02'`` or ``'>= 1'``)."""
    line = f"{label}: {value:.3f}"
    if target:
        op, bound = target.split()
        met = value <= float(bound) if op == "<=" else value >= float(bound)
        line = f"{line:<48} target {target:<8} {'ok' if met else 'MISSED'}"
    print(line, flush=True)


def note(text: str) -> None:
    print(f"# {text}", flush=True)


def spread(names: list[str], k: int) -> list[str]:
    """``k`` names evenly spread over ``names`` (all of them if fewer)."""
    if len(names) <= k:
        return list(names)
    step = (len(names) - 1) / (k - 1)
    return [names[round(i * step)] for i in range(k)]


# ---------------------------------------------------------------------------------------------
# Models


def resnet50() -> nn.Module:
    from torchvision.models import resnet50 as build

    torch.manual_seed(0)
    return build(weights=None).eval()


def bert(quick: bool) -> nn.Module:
    from transformers import BertConfig, BertModel

    if quick:
        config = BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
        )
    else:
        config = BertConfig(
            hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
        )
    torch.manual_seed(0)
    return BertModel(config).eval()


# ---------------------------------------------------------------------------------------------
# Benchmarks


def bench_inspect(label: str, model: nn.Module, inputs: dict, layers: dict, run: Run) -> None:
    """Inspect on 1 and 12 layers vs the plain forward and vs surgeon-pytorch's Inspect."""
    import surgeon_pytorch

    note(f"{label}: 1 layer {layers[1]}; 12 layers {layers[12]}")
    # the plain forward twice: their ratio is the noise floor of this run (ideally 1.000)
    fns = {"plain": lambda: model(**inputs), "plain_again": lambda: model(**inputs)}
    for k, names in layers.items():
        ours = Inspect(model, layer=names)
        theirs = surgeon_pytorch.Inspect(model, layer=names)
        fns[f"ours_{k}"] = lambda ours=ours: ours(**inputs)
        fns[f"surgeon_{k}"] = lambda theirs=theirs: theirs(**inputs)
    with torch.no_grad():
        t = interleaved(fns, run)
    note(f"{label}: plain forward {t['plain'] * 1e3:.1f} ms (median of {run.rounds})")
    report(f"noise_control_plain/plain[{label}]", t["plain_again"] / t["plain"])
    report(f"inspect_1_layer/plain[{label}]", t["ours_1"] / t["plain"], "<= 1.02")
    report(f"inspect_12_layers/plain[{label}]", t["ours_12"] / t["plain"], "<= 1.02")
    report(f"inspect_1_layer/surgeon_inspect[{label}]", t["ours_1"] / t["surgeon_1"])
    report(f"inspect_12_layers/surgeon_inspect[{label}]", t["ours_12"] / t["surgeon_12"])


def bench_extract(model: nn.Module, x: torch.Tensor, run: Run) -> None:
    """ResNet-50 cut after layer2: time and parameters vs the full model and torchvision."""
    from torchvision.models.feature_extraction import create_feature_extractor

    ours = Extract(model, node_out="layer2")
    theirs = create_feature_extractor(model, return_nodes=["layer2"])
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x)["layer2"])
        t = interleaved(
            {"full": lambda: model(x), "ours": lambda: ours(x), "torchvision": lambda: theirs(x)},
            run,
        )

    def count(m: nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    note(f"parameters: full {count(model):,}, ours {count(ours):,}, torchvision {count(theirs):,}")
    report("extract_layer2_forward/full_forward[resnet50]", t["ours"] / t["full"], "<= 0.6")
    report("extract_layer2_forward/torchvision[resnet50]", t["ours"] / t["torchvision"], "<= 1.02")
    report("extract_layer2_params/torchvision[resnet50]", count(ours) / count(theirs), "<= 1")


def bench_tracing(model: nn.Module, run: Run) -> None:
    """get_nodes and building an Extract, vs surgeon-pytorch."""
    import surgeon_pytorch

    t = interleaved(
        {
            "get_nodes": lambda: get_nodes(model),
            "surgeon_get_nodes": lambda: surgeon_pytorch.get_nodes(model),
            "extract": lambda: Extract(model, node_out="layer2"),
            "surgeon_extract": lambda: surgeon_pytorch.Extract(model, node_out="layer2.3.add"),
        },
        run,
    )
    note(f"get_nodes {t['get_nodes'] * 1e3:.1f} ms, surgeon {t['surgeon_get_nodes'] * 1e3:.1f} ms")
    report("get_nodes/surgeon_get_nodes[resnet50]", t["get_nodes"] / t["surgeon_get_nodes"], "<= 1")
    report("extract_build/surgeon_extract_build[resnet50]", t["extract"] / t["surgeon_extract"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, few rounds (CI)")
    parser.add_argument(
        "--clock", choices=list(CLOCKS), default="cpu", help="cpu: this thread's CPU time"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    quick = args.quick
    run = Run(rounds=5, clock=args.clock, min_sample=0.02) if quick else Run(21, args.clock, 0.1)
    side = 64 if quick else 224
    note(
        f"mode {'quick' if quick else 'full'}, torch {torch.__version__}, 1 thread, "
        f"{run.rounds} interleaved rounds, medians, {run.clock} clock"
    )

    model = resnet50()
    x = torch.randn(1, 3, side, side)
    stages = ["conv1", "layer1", "layer2", "layer3", "layer4", "fc"]
    deeper = [name for name in get_layers(model) if name not in stages]
    layers = {1: ["layer3"], 12: stages + spread(deeper, 6)}
    bench_inspect(f"resnet50 1x3x{side}x{side}", model, {"x": x}, layers, run)
    bench_extract(model, x, run)
    bench_tracing(model, run)

    text = bert(quick)
    ids = torch.randint(0, text.config.vocab_size, (1, 128))
    n = text.config.num_hidden_layers
    blocks = [f"encoder.layer.{i}" for i in range(n)]
    parts = ("attention", "attention.self", "attention.output", "intermediate", "output")
    inner = [f"encoder.layer.{i}.{part}" for i in range(n) for part in parts]
    bert_layers = {1: [blocks[-1]], 12: (blocks + inner)[:12]}
    label = f"bert {n}x{text.config.hidden_size} seq128"
    bench_inspect(label, text, {"input_ids": ids}, bert_layers, run)

    note(f"total {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
