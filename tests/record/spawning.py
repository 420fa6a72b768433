"""Start 2 worker processes (spawn, gloo on 127.0.0.1) with a hard deadline: never a hang."""

from __future__ import annotations

import time

import pytest
import torch.multiprocessing as mp
from support.servers import free_port


def start(fn, *args, world: int = 2):
    """Start ``fn(rank, world, port, *args)`` on ``world`` processes; returns the context."""
    return mp.start_processes(fn, args=(world, free_port(), *args), nprocs=world, join=False,
                              start_method="spawn")  # fmt: skip


def finish(context, timeout: float = 45.0) -> None:
    """Wait for every worker; kill them all and fail if the deadline passes."""
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(deadline - time.monotonic(), 0.1)):
            if time.monotonic() > deadline:
                pytest.fail(f"workers still running after {timeout} s")
    finally:
        for p in context.processes:
            if p.is_alive():
                p.kill()
