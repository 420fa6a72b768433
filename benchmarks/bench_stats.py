"""Cost of ``tensor_stats`` in sums of the same tensor (issues 17 §2, 31 §2), per size and dtype.

Arms on one tensor, one thread: ``x.sum()`` (the floor: one read), ``tensor_stats(x)`` (ours)
and ``aminmax+histc+moments`` (what one would write by hand: ``torch.aminmax``, ``torch.histc``
over ``[min, max]``, ``torch.std_mean`` and ``torch.linalg.vector_norm``, on the float32 upcast
for float16/bfloat16). Sizes 1e5, 1e6, 1e7 (full mode also 1e8) of ``randn * 3 + 1`` through a
ReLU (a third zeros, like an activation), for float32, float16 and bfloat16; 1e3 and 1e4 show
the fixed cost of a call (printed in microseconds).

Rounds run every arm once, in a shuffled order (drift of the machine hits all arms alike); an
arm's sample is the time of enough calls to last about 20 ms; the figure is the median per call
over the rounds, on the thread's CPU clock (``--clock wall`` for wall time). Bar: ours within
6x of the sum on 1e7 float32 values, plain torch calls, nothing compiled (issue 31; goal 4x).

    python benchmarks/bench_stats.py            # full (about 3 minutes)
    python benchmarks/bench_stats.py --quick    # CI smoke run (< 60 s)
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch

from surgeon_widgets.engine.stats import BINS, tensor_stats

BAR, GOAL = 6.0, 4.0
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def by_hand(x: torch.Tensor) -> None:
    """min/max, a histogram over them, mean/std and L2: the usual separate torch calls."""
    xf = x if x.dtype == torch.float32 else x.float()
    lo, hi = torch.aminmax(xf)
    torch.histc(xf, BINS, float(lo), float(hi))
    torch.std_mean(xf)
    torch.linalg.vector_norm(xf)


def arms(x: torch.Tensor) -> dict[str, Callable[[], object]]:
    return {
        "sum": x.sum,
        "tensor_stats": lambda: tensor_stats(x),
        "aminmax+histc+moments": lambda: by_hand(x),
    }


def per_call(arm: Callable[[], object], clock: Callable[[], float], target: float) -> int:
    """How many calls of ``arm`` last about ``target`` seconds."""
    start = clock()
    arm()
    took = max(clock() - start, 1e-6)
    return max(1, round(target / took))


def measure(x: torch.Tensor, rounds: int, clock: Callable[[], float]) -> dict[str, float]:
    """Median seconds per call of every arm on ``x``, arms interleaved round by round."""
    funcs = arms(x)
    reps = {name: per_call(f, clock, 0.02) for name, f in funcs.items()}  # also warms up
    times: dict[str, list[float]] = {name: [] for name in funcs}
    order = list(funcs)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            f, k = funcs[name], reps[name]
            start = clock()
            for _ in range(k):
                f()
            times[name].append((clock() - start) / k)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clock", choices=list(CLOCKS), default="cpu")
    parser.add_argument("--sizes", help="comma-separated sizes instead of the mode's, e.g. 1e4,1e7")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help=f"of {list(DTYPES)}")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    sizes = [10**3, 10**4, 10**5, 10**6, 10**7] + ([] if args.quick else [10**8])
    if args.sizes:
        sizes = [int(float(size)) for size in args.sizes.split(",")]
    dtypes = {name: DTYPES[name] for name in args.dtypes.split(",")}
    rounds = 5 if args.quick else 15
    clock = CLOCKS[args.clock]
    print(f"# one thread, {args.clock} clock, median of {rounds} interleaved rounds per size")
    for numel in sizes:
        base = torch.relu(torch.randn(numel) * 3 + 1)
        for name, dtype in dtypes.items():
            x = base.to(dtype)
            got = measure(x, rounds, clock)
            label = f"{numel:.0e} {name}"
            s = tensor_stats(x)
            print(f"# [{label}] sum {got['sum'] * 1e6:.1f} us, ours "
                  f"{got['tensor_stats'] * 1e6:.1f} us, by hand "
                  f"{got['aminmax+histc+moments'] * 1e6:.1f} us; histogram of "
                  f"{s.sampled or s.numel} values")  # fmt: skip
            ours = got["tensor_stats"] / got["sum"]
            line = f"tensor_stats/sum[{label}]: {ours:.2f}"
            if numel == 10**7 and name == "float32":
                line = f"{line:<44} target <= {BAR:g} (goal {GOAL:g})   "
                line += "ok" if ours <= BAR else "MISSED"
            print(line)
            print(f"aminmax+histc+moments/sum[{label}]: "
                  f"{got['aminmax+histc+moments'] / got['sum']:.2f}")  # fmt: skip
            vs = got["tensor_stats"] / got["aminmax+histc+moments"]
            print(f"tensor_stats/aminmax+histc+moments[{label}]: {vs:.3f}", flush=True)


if __name__ == "__main__":
    main()
