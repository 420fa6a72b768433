"""Cost of keeping a shown Explorer's static picture and snapshot current (runtime/still_output).

A ResNet-18-like CNN (64x64 images) trains with 4 selected layers at the default throttle; the
Explorer is shown (its comm open), so every update asks for a refresh. Arms, interleaved in
blocks of consecutive steps: refresh never (``interval`` infinite), every 5 s (the default),
every 0.5 s with no cost bound (``COST_SHARE`` 1: as often as renders finish). The picture
renders on a worker thread; what the training loop pays is the GIL that thread takes and the
publish on the model's thread. Also printed: one render's time and the snapshot's size.

Target: <= 1.02 at the default interval.

    python benchmarks/bench_still.py            # full (~ 2 minutes)
    python benchmarks/bench_still.py --quick    # CI smoke run (< 40 s)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchvision
from torch import nn

from surgeon_widgets.widget import Explorer
from surgeon_widgets.widget.runtime import still_output
from surgeon_widgets.widget.runtime.still_output import COST_SHARE, REFRESH_SECONDS
from surgeon_widgets.widget.snapshot import state_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, block = (3, 10) if args.quick else (12, 25)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a shared machine: one core per arm, steadier medians
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    ex = Explorer(model, selected=["conv1", "layer1.0.conv1", "layer3.1.conv2", "fc"])
    ex.send = lambda c, b=None: None  # type: ignore[method-assign]
    ex.open()  # shown: the refresh runs (no kernel here: the display is not updated)
    arms = {"never": float("inf"), "default": REFRESH_SECONDS, "every_0.5s": 0.5}
    wall: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(3):
        step()
    published = dict.fromkeys(arms, 0)
    for _ in range(rounds):
        for arm, interval in arms.items():
            ex._still.interval = interval
            still_output.COST_SHARE = 1.0 if arm == "every_0.5s" else COST_SHARE
            before = ex._still.published
            for _ in range(block):
                start = time.perf_counter()
                step()
                wall[arm].append(time.perf_counter() - start)
            ex._still.flush() if interval != float("inf") else None  # no render across arms
            published[arm] += ex._still.published - before
    started = time.perf_counter()
    still = ex._render_still()
    render = time.perf_counter() - started
    ex.close()
    plain = statistics.median(wall["never"])
    print(f"[still] train step {plain * 1e3:.1f} ms (median of {rounds * block}); one render "
          f"{render * 1e3:.0f} ms, PNG {len(still.png) / 1024:.0f} KiB, snapshot "
          f"{state_size(still.state) / 1024:.1f} KiB")  # fmt: skip
    for arm in ("default", "every_0.5s"):
        ratio = statistics.median(wall[arm]) / plain
        print(f"[still] refresh {arm}/never: {ratio:.3f}  ({published[arm]} published)")


if __name__ == "__main__":
    main()
