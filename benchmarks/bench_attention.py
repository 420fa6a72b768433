"""What capturing one layer's attention pattern costs, against the alternatives.

On a BERT-base-shaped model (random weights, built from a config) at 128 and 512 tokens:

* ``no_capture``: the model as it is (SDPA attention);
* ``capture_1_layer``: :func:`capture_attention` on one middle layer, full patterns;
* ``capture_1_layer_reduced``: the same with ``full=False`` (pooled uint8 maps);
* ``eager``: the whole model switched to eager attention;
* ``eager_output_attentions``: eager with ``output_attentions=True`` (every layer's weights).

Runs are interleaved (one of each variant per round, in turn) and the medians are compared.
Prints lines like ``capture_1_layer/no_capture @128: 1.07``. By default torch runs on one
thread and each run is timed by that thread's CPU time (``time.thread_time``), so machines
shared with other work still give stable ratios; ``--threads N`` times wall-clock instead.

    python benchmarks/bench_attention.py           # BERT-base shape: 12 x 768, 12 heads
    python benchmarks/bench_attention.py --quick   # a smaller model, under a minute
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
from transformers import BertConfig, BertModel

from surgeon_widgets.engine.attention.capture import capture_attention

BASE = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
}
QUICK = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
}


def build(shape: dict[str, int]) -> tuple[BertModel, BertModel]:
    """The default (SDPA) model and an eager twin with the same weights."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, max_position_embeddings=512, **shape)
    sdpa = BertModel(config).eval()
    eager = BertModel._from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    return sdpa, eager


def variants(sdpa: BertModel, eager: BertModel, tokens: int) -> dict[str, Callable[[], object]]:
    inputs = {"input_ids": torch.randint(0, 1000, (1, tokens))}
    layer = f"encoder.layer.{sdpa.config.num_hidden_layers // 2}.attention.self"
    return {
        "no_capture": lambda: sdpa(**inputs),
        "capture_1_layer": lambda: capture_attention(sdpa, inputs, [layer]),
        "capture_1_layer_reduced": lambda: capture_attention(sdpa, inputs, [layer], full=False),
        "eager": lambda: eager(**inputs),
        "eager_output_attentions": lambda: eager(**inputs, output_attentions=True),
    }


def measure(
    runs: dict[str, Callable[[], object]],
    rounds: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median seconds per variant over ``rounds`` interleaved rounds (after one warm-up)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.no_grad():
        for run in runs.values():
            run()
        for _ in range(rounds):
            for name, run in runs.items():
                start = clock()
                run()
                times[name].append(clock() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller model, fewer rounds")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads; 1 (default) times thread CPU time, more wall time",
    )
    args = parser.parse_args(argv)
    shape = QUICK if args.quick else BASE
    rounds = args.rounds or (5 if args.quick else 9)
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    sdpa, eager = build(shape)
    print(
        f"model: BERT {shape}, batch 1, {rounds} rounds, {args.threads} torch thread(s), "
        f"clock {clock.__name__}"
    )
    for tokens in (128, 512):
        medians = measure(variants(sdpa, eager, tokens), rounds, clock)
        print(f"no_capture @{tokens}: {medians['no_capture'] * 1e3:.1f} ms")
        for name, value in medians.items():
            if name != "no_capture":
                print(f"{name}/no_capture @{tokens}: {value / medians['no_capture']:.2f}")


if __name__ == "__main__":
    main()
