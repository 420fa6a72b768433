"""Training-step cost of live attention maps under ``torch.compile`` (issue 9 §5).

A tiny BERT (hidden 64, 2 layers, 2 heads, SDPA attention; batch 8 x 32 tokens), compiled
whole (``torch.compile(model)``). Arms, each its own copy and its own compile, interleaved
in blocks of steps:

* ``plain``: no Explorer;
* ``none``: a live Explorer with nothing selected (full mode only: each arm compiles);
* ``attention``: one attention layer selected, default throttle (10 maps a second);
* ``attention_every``: the same with ``max_rate=0`` (a map on every step: the worst case).

A selected attention layer runs eagerly
(:func:`surgeon_widgets.widget.runtime.compiled.run_eagerly`),
which splits the compiled graph there; the graph and break counts come from
``torch._dynamo.explain`` on the model as the arm leaves it. Prints ratios to ``plain`` of the
same process (no bar: the issue asks for the figure).

    python benchmarks/bench_attention_compiled.py            # full
    python benchmarks/bench_attention_compiled.py --quick    # CI smoke run
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn
from transformers import BertConfig, BertModel

from surgeon_widgets.engine.attention.capture import attention_layers
from surgeon_widgets.widget import Explorer


def tiny_bert() -> BertModel:
    config = BertConfig(
        vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip
    return BertModel(config)


def trainer(model: nn.Module, run: nn.Module, ids: torch.Tensor) -> Callable[[], None]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        run(input_ids=ids).last_hidden_state.pow(2).mean().backward()
        opt.step()

    return step


def graphs(model: nn.Module, ids: torch.Tensor) -> tuple[int, int]:
    """(graphs, graph breaks) of ``model`` as it is now (hooks and wrappers included)."""
    explained = torch._dynamo.explain(model)(input_ids=ids)
    return explained.graph_count, explained.graph_break_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", module="torch._inductor")
    rounds, block = (4, 3) if args.quick else (10, 5)
    base = tiny_bert().train()
    layer = attention_layers(base)[0]
    ids = torch.randint(0, 256, (8, 32))
    arms = {"plain": None, "none": [], "attention": [layer], "attention_every": [layer]}
    if args.quick:
        del arms["none"]  # the compiles dominate a quick run
    steps: dict[str, Callable[[], None]] = {}
    explorers: dict[str, Explorer] = {}
    models: dict[str, nn.Module] = {}
    for arm, selected in arms.items():
        model = models[arm] = copy.deepcopy(base)
        run = torch.compile(model)
        if selected is not None:
            rate = 0.0 if arm == "attention_every" else 10.0
            ex = explorers[arm] = Explorer(run, selected=selected, max_rate=rate)
            ex.send = lambda *a, **kw: None  # type: ignore[method-assign]  # no kernel here
        steps[arm] = trainer(model, run, ids)
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
    print(f"[tiny_bert compiled] plain train step {plain * 1e3:.2f} ms (medians of "
          f"{rounds * block}; warm-up with compiles {warm:.1f} s)")  # fmt: skip
    for arm in [a for a in arms if a != "plain"]:
        ratio = statistics.median(wall[arm]) / plain
        print(f"[tiny_bert compiled] live explorer {arm}/plain: {ratio:.3f}")
    maps = explorers["attention_every"]._live.attention.latest(layer)
    assert maps is not None, "no attention map was recorded under torch.compile"
    for ex in explorers.values():
        assert ex.errors == [], ex.errors
    plain_graphs = graphs(models["plain"], ids)
    selected_graphs = graphs(models["attention"], ids)
    print(f"[tiny_bert compiled] graphs, breaks: plain {plain_graphs}, "
          f"{layer} selected {selected_graphs}")  # fmt: skip
    for ex in explorers.values():
        ex.close()


if __name__ == "__main__":
    main()
