"""A small distributed training job that records itself (``python -m ... RUN``).

Trains the demo :class:`~surgeon_widgets.demo.TinyCNN` (from a seeded random start) on the
synthetic shapes with DDP over ``--nprocs`` CPU processes (gloo on 127.0.0.1), and records
four layers with a :class:`~surgeon_widgets.Recorder` into the folder ``RUN``. Follow it from
a notebook with ``Explorer.from_run(RUN)`` while it runs (``--delay`` slows each step down).

    python -m surgeon_widgets.demo.record_job runs/demo --steps 60 --nprocs 2 --every 2
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from ..record import Recorder
from .data import shape_batch
from .models import TinyCNN

__all__ = ["LAYERS", "main", "train"]

LAYERS = ["block1.conv", "block2.relu", "block3.conv", "fc"]


def train(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    """One rank of the job (also the whole job with ``world == 1``)."""
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=60))  # fmt: skip
    torch.manual_seed(0)
    model = TinyCNN()
    wrapped = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.05, momentum=0.9)
    with Recorder(wrapped, args.run, layers=LAYERS, every=args.every, gradients=True,
                  params=True) as rec:  # fmt: skip
        for step in range(args.steps):
            images, labels = shape_batch(args.batch, seed=1000 * step + rank)
            loss = nn.functional.cross_entropy(wrapped(images), labels)
            loss.backward()
            rec.step(step)
            opt.step()
            opt.zero_grad()
            if args.fail_at is not None and step == args.fail_at:
                raise RuntimeError(f"failing on purpose at step {step} (--fail-at)")
            time.sleep(args.delay)
        if rank == 0:
            print(f"loss {loss.item():.3f}; {rec.cost}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="the run folder to write")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to sleep after each step")
    parser.add_argument(
        "--fail-at", type=int, default=None, help="raise at this step (demo of a failed run)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.nprocs == 1:
        train(0, 1, 0, args)
    else:
        mp.start_processes(train, args=(args.nprocs, _free_port(), args), nprocs=args.nprocs,
                           start_method="spawn")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
