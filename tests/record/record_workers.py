"""Workers of the 2-process tests (spawned; gloo on 127.0.0.1, every collective timed out)."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from surgeon_widgets import Recorder, read_run
from surgeon_widgets.record import RankMismatchError
from surgeon_widgets.record.buckets import BUCKETS, E_HIGH, E_LOW, SUB_BITS, rebin

TIMEOUT = timedelta(seconds=30)


def init(rank: int, world: int, port: int, timeout: timedelta = TIMEOUT) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timeout)  # fmt: skip


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )  # fmt: skip


class SmallTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True) for _ in range(2)
        )
        self.head = nn.Linear(32, 50)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class MoE(nn.Module):
    """A shared layer and an expert that only runs when ``use_expert`` is set (one rank)."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(6, 6)
        self.expert = nn.Linear(6, 6)
        self.use_expert = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shared(x)
        return self.expert(x) if self.use_expert else x


def capture(module: nn.Module, store: list, grads: list):
    """Our own reference hooks: the output (first tensor) and its gradient, every call."""

    def hook(m, args, out):
        t = out if isinstance(out, torch.Tensor) else out[0]
        store.append(t.detach().double().reshape(-1).clone())
        if t.requires_grad:
            t.register_hook(lambda g: grads.append(g.detach().double().reshape(-1).clone()))

    return module.register_forward_hook(hook)


def gather(values: list[torch.Tensor]) -> np.ndarray:
    """Every rank's values of one step, concatenated (rank order)."""
    local = torch.cat(values).numpy() if values else np.zeros(0)
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, local)
    return np.concatenate(out)


def buckets_of(values: np.ndarray, centre: float) -> np.ndarray:
    """Bucket counts of ``values`` (finite) about ``centre``, from numpy's frexp: the reference
    for the recorder's float32-bit bucketing."""
    v = (values - centre).astype(np.float32)
    mantissa, exponent = np.frexp(np.abs(v))  # |v| = mantissa * 2**exponent, mantissa in [0.5, 1)
    sub = np.floor((mantissa * 2 - 1) * 2**SUB_BITS)
    side = (E_HIGH - E_LOW) << SUB_BITS
    q = np.clip((exponent - 1 - E_LOW) * 2**SUB_BITS + sub + 1, 0, side)
    q[v == 0] = 0
    index = (side + np.where(np.signbit(v), -q, q)).astype(int)
    return np.bincount(index, minlength=BUCKETS).astype(np.float64)


def compare(stats, ref: np.ndarray, where: str, centre: float) -> dict:
    """Assert the merged record equals the stats of the concatenated values.

    ``centre``: the key's previous recorded mean (0 at its first record), the buckets' centre.
    """
    finite = ref[np.isfinite(ref)]
    assert stats.numel == ref.size, (where, stats.numel, ref.size)
    assert stats.min == finite.min() and stats.max == finite.max(), (where, stats.min, finite.min())
    assert abs(stats.mean - finite.mean()) <= 1e-9 * (1 + abs(finite.mean())), where
    assert abs(stats.std - finite.std(ddof=1)) <= 1e-9 * (1 + finite.std()), (
        where,
        stats.std,
        finite.std(ddof=1),
    )
    assert stats.nans == int(np.isnan(ref).sum()) and stats.infs == int(np.isinf(ref).sum()), where
    # the histogram: the buckets of both ranks' values together, re-binned over [min, max],
    # exact zeros left out (a bar of their own)
    expect = rebin(buckets_of(finite, centre)[None], finite.min(keepdims=True),
                   finite.max(keepdims=True), np.array([centre]),
                   zeros=np.array([float((finite == 0).sum())]))[0]  # fmt: skip
    assert np.array_equal(stats.hist, expect.astype(np.float32)), (where, stats.hist, expect)
    assert (stats.lo, stats.hi, stats.under, stats.over) == (finite.min(), finite.max(), 0, 0)
    l2 = np.sqrt((finite * finite).sum())
    assert abs(stats.l2 - l2) <= 1e-9 * l2 + 1e-12, (where, stats.l2, l2)
    return {"numel": stats.numel, "mean": stats.mean, "std": stats.std}


def run_training(model, wrapped, batches, rec, watch, every, loss_fn):
    """Train a few steps; return per recorded step the reference values of each watched layer."""
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.05)
    refs: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for step, batch in enumerate(batches):
        acts = {n: [] for n in watch}
        grads = {n: [] for n in watch}
        handles = [capture(model.get_submodule(n), acts[n], grads[n]) for n in watch]
        loss_fn(wrapped(batch)).backward()
        for h in handles:
            h.remove()
        rec.step()
        opt.step()
        opt.zero_grad()
        if step % every == 0:
            refs[step] = {n: (gather(acts[n]), gather(grads[n])) for n in watch}
    return refs


def check_run(folder: Path, refs, watch) -> dict:
    run = read_run(folder)
    assert run.status["state"] == "finished", run.status
    assert run.steps == sorted(refs), (run.steps, sorted(refs))
    checked = 0
    for n in watch:
        stats = run.stats(n)
        outs, grads = stats[f"{n}/output"].values, stats[f"{n}/grad_output"].values
        steps = stats[f"{n}/output"].steps
        for i, step in enumerate(steps):
            # a step's buckets are centred on the means of the last record merged before it
            # began: with 2+ ranks a record is merged while the next step trains
            last = i - 1 if dist.get_world_size() == 1 or step - steps[i - 1] >= 2 else i - 2
            centres = (outs[last].mean, grads[last].mean) if last >= 0 else (0.0, 0.0)
            compare(outs[i], refs[step][n][0], f"{n} step {step}", centres[0])
            compare(grads[i], refs[step][n][1], f"{n} grad step {step}", centres[1])
            assert stats[f"{n}/output"].values[i].ranks == dist.get_world_size()
            checked += 2
    return {"checked": checked, "steps": run.steps, "layers": run.layers}


def scenario(kind: str, arch: str, folder: Path, rank: int) -> dict:
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = small_cnn() if arch == "cnn" else SmallTransformer()
    g = torch.Generator().manual_seed(100 + rank)
    if arch == "cnn":
        batches = [torch.randn(4, 3, 16, 16, generator=g) for _ in range(5)]
        watch = ["0", "2", "6"]
    else:
        batches = [torch.randint(0, 50, (2, 6), generator=g) for _ in range(5)]
        watch = ["embed", "blocks.0.linear1", "head"]
    if kind == "ddp":
        wrapped = DDP(model)
    else:
        for m in (
            [model.blocks[0], model.blocks[1]] if arch == "transformer" else [model[0], model[2]]
        ):
            fully_shard(m)
        wrapped = fully_shard(model)
    params_of = watch[-1]
    rec = Recorder(wrapped, folder, layers=watch, every=2, gradients=True, params=True)
    refs = run_training(
        model, wrapped, batches, rec, watch, 2, lambda out: out.float().pow(2).mean()
    )
    # parameters after the last step's update: every value counted once over the ranks
    rec.close()
    dist.barrier()
    out = check_run(folder, refs, watch) if rank == 0 else {}
    if rank == 0:
        run = read_run(folder)
        weight = run.stats(params_of)[f"{params_of}/weight"]
        full = sum(p.numel() for p in [model.get_submodule(params_of).weight])
        assert weight.latest.numel == full, (weight.latest.numel, full)
        out["weight_numel"] = weight.latest.numel
        grad = run.stats(params_of)[f"{params_of}/weight.grad"]  # after backward, before step
        assert grad.steps == [0, 2, 4] and grad.latest.numel == full, (grad.steps, full)
        out["grad_numel"] = grad.latest.numel
        out["keys"] = [k["key"] for k in run.keys]
    return out


def main_worker(rank: int, world: int, port: int, root: str) -> None:
    init(rank, world, port)
    results = {}
    try:
        for kind, arch in [
            ("ddp", "cnn"),
            ("fsdp", "transformer"),
            ("ddp", "transformer"),
            ("fsdp", "cnn"),
        ]:
            results[f"{kind}-{arch}"] = scenario(kind, arch, Path(root) / f"{kind}-{arch}", rank)
        results["moe"] = moe(Path(root) / "moe", rank)
    finally:
        dist.destroy_process_group()
    Path(root, f"result{rank}.json").write_text(json.dumps(results))


def moe(folder: Path, rank: int) -> dict:
    torch.manual_seed(0)
    model = MoE()
    model.use_expert = rank == 0
    # rank 1 writes this run (writer=1): it never ran the expert, yet records it
    rec = Recorder(model, folder, layers=["shared", "expert"], every=1, gradients=True, writer=1)
    acts: list = []
    grads: list = []
    handle = capture(model.expert, acts, grads)
    for _ in range(3):
        model(torch.randn(3, 6)).sum().backward()
        rec.step()
    handle.remove()
    rec.close()
    acts = [torch.from_numpy(gather(acts[-1:]))]
    grads = [torch.from_numpy(gather(grads[-1:]))]
    dist.barrier()
    if rank != 1:
        return {"pid": os.getpid()}
    run = read_run(folder)
    expert, shared = run.stats("expert"), run.stats("shared")
    assert [s.ranks for s in expert["expert/output"].values] == [1, 1, 1]
    assert [s.ranks for s in shared["shared/output"].values] == [2, 2, 2]
    assert expert["expert/output"].latest.numel == 18 and shared["shared/output"].latest.numel == 36
    out, grad = expert["expert/output"].values, expert["expert/grad_output"].values
    # every=1 on 2 ranks: the last step's buckets are centred on the record before the last
    compare(out[-1], acts[-1].numpy(), "expert", out[-3].mean)
    compare(grad[-1], grads[-1].numpy(), "expert grad", grad[-3].mean)
    assert run.manifest["writer_rank"] == 1 and run.status["pid"] == os.getpid()  # rank 1 wrote
    return {"expert_ranks": expert["expert/output"].latest.ranks, "shared_ranks": 2}


def skip_worker(rank: int, world: int, port: int, root: str) -> None:
    """Rank 1 skips a step, twice: with explicit step numbers both ranks get RankMismatchError in
    their next step(); with the implicit counter rank 0's last collective finds no partner (an
    error from close()). Never a hang."""
    init(rank, world, port, timeout=timedelta(seconds=4))
    for explicit in (True, False):
        model = nn.Sequential(nn.Linear(4, 4))
        rec = Recorder(model, Path(root) / f"skip{explicit}", every=1, gradients=False)
        message = ""
        started = time.monotonic()
        try:
            for i in range(4):
                model(torch.randn(2, 4))
                if rank == 1 and i == 1:
                    continue  # the bug under test: this rank skipped a step
                rec.step(i) if explicit else rec.step()
            rec.close()  # the last step's merge is checked here
        except RankMismatchError as error:
            message = str(error)
            rec.close(message)
        Path(root, f"skip{explicit}{rank}.json").write_text(
            json.dumps({"message": message, "seconds": time.monotonic() - started})
        )
    # the group is broken now (a peer left mid-collective): gloo's teardown may abort
    os._exit(0)


def miscount_worker(rank: int, world: int, port: int, root: str) -> None:
    """Rank 1 calls rec.step() once more, then once less, than rank 0, at steps that do not
    record (every=10: only step 0 merges), then both the same: each rank notes what close()
    raised and the writer (rank 0) the folder's state. Never a hang."""
    init(rank, world, port, timeout=timedelta(seconds=20))
    for name, extra in (("extra", 1), ("missing", -1), ("same", 0)):
        model = nn.Sequential(nn.Linear(4, 4))
        message, kind, started = "", "", time.monotonic()
        try:
            with Recorder(model, Path(root) / name, every=10, gradients=False, timeout=3) as rec:
                for _ in range(6 + (extra if rank == 1 else 0)):
                    model(torch.randn(2, 4))
                    rec.step()
        except Exception as error:  # the test checks which
            message, kind = str(error), type(error).__name__
        state = read_run(Path(root) / name).state if rank == 0 else ""
        Path(root, f"{name}{rank}.json").write_text(json.dumps(
            {"message": message, "kind": kind, "seconds": time.monotonic() - started,
             "state": state}
        ))  # fmt: skip
    dist.destroy_process_group()


def live_worker(rank: int, world: int, port: int, root: str) -> None:
    """A slow job: the parent follows the folder while it is written."""
    init(rank, world, port)
    torch.manual_seed(0)
    model = small_cnn()
    from torch.nn.parallel import DistributedDataParallel as DDP

    wrapped = DDP(model)
    go = Path(root, "go")
    rec = Recorder(wrapped, Path(root) / "live", layers=["0", "6"], every=1, gradients=True)
    for step in range(40):
        wrapped(torch.randn(2, 3, 16, 16)).sum().backward()
        rec.step()
        if step == 2:
            deadline = time.monotonic() + 30
            while not go.exists() and time.monotonic() < deadline:  # the parent is following
                time.sleep(0.05)
        time.sleep(0.02)
    rec.close()
    dist.destroy_process_group()


def steady_worker(rank: int, world: int, port: int, root: str, user_handler: bool) -> None:
    """DDP steps until a signal comes (SIGTERM from the parent, as torchrun sends) or the
    writer is killed; rank 0 writes. ``user_handler``: rank 0 has its own SIGTERM handler."""
    import signal
    import sys

    init(rank, world, port, timeout=timedelta(seconds=10))
    from torch.nn.parallel import DistributedDataParallel as DDP

    if user_handler and rank == 0:

        def handler(signum, frame):
            Path(root, "user_handler_ran").write_text(read_run(Path(root) / "run").status["state"])
            sys.exit(3)

        signal.signal(signal.SIGTERM, handler)
    torch.manual_seed(0)
    wrapped = DDP(small_cnn())
    with Recorder(wrapped, Path(root) / "run", layers=["0", "6"], every=1, timeout=10) as rec:
        for step in range(2000):
            wrapped(torch.randn(2, 3, 16, 16)).sum().backward()
            rec.step()
            if step == 3:
                Path(root, f"ready{rank}").write_text(str(os.getpid()))
            time.sleep(0.01)


def extra_step(rank: int, root: str) -> None:
    """Rank 1 calls rec.step() twice after step 1, under DDP: before, the Recorder's all_reduce
    paired with DDP's and gloo aborted the job (SIGABRT). Ends the process."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    wrapped = DDP(small_cnn())
    message, kind, started = "", "", time.monotonic()
    try:
        with Recorder(wrapped, Path(root) / "extra", layers=["0", "6"], every=1, timeout=3) as rec:
            started = time.monotonic()
            for step in range(6):
                wrapped(torch.randn(2, 3, 16, 16)).sum().backward()
                rec.step()
                if rank == 1 and step == 1:
                    rec.step()  # the bug under test: one call too many on this rank
    except Exception as error:  # the test checks which
        message, kind = str(error), type(error).__name__
    Path(root, f"extra{rank}.json").write_text(json.dumps(
        {"message": message, "kind": kind, "seconds": time.monotonic() - started}
    ))  # fmt: skip
    if rank == 0:  # the writer: its folder says failed before it goes
        Path(root, "state").write_text(read_run(Path(root) / "extra").state)
    os._exit(0)  # the training group is broken (a peer left mid-collective)


def resume_then_extra_step_worker(rank: int, world: int, port: int, root: str) -> None:
    """One job (a spawn is the slow part): :func:`resume`, then :func:`extra_step`."""
    init(rank, world, port, timeout=timedelta(seconds=20))
    resume(rank, root)
    extra_step(rank, root)


def resume(rank: int, root: str) -> None:
    """Record 4 steps, refuse the folder without resume, resume 3 more; layer lists that
    differ between ranks (order, names) and from the run being resumed are named."""
    folder = Path(root) / "run"
    torch.manual_seed(0)
    model = small_cnn()
    out: dict = {}

    def train(rec, steps):
        for _ in range(steps):
            model(torch.randn(2, 3, 16, 16)).sum().backward()
            rec.step()

    with Recorder(model, folder, layers=["0", "6"], every=1, gradients=False) as rec:
        train(rec, 4)
    dist.barrier()
    before = {p.name: p.read_bytes() for p in sorted((folder / "keys").iterdir())}
    for name, kwargs in [("refused", {}), ("other_layers", {"resume": True, "layers": ["0", "2"]})]:
        try:
            Recorder(model, folder, **{"layers": ["0", "6"], "every": 1, "gradients": False,
                                       **kwargs})  # fmt: skip
        except (FileExistsError, ValueError, RankMismatchError) as error:
            out[name] = f"{type(error).__name__}: {error}"
    after = {p.name: p.read_bytes() for p in sorted((folder / "keys").iterdir())}
    out["untouched"] = before == after
    for name, layers in [("order", ["0", "6"] if rank == 0 else ["6", "0"]),
                         ("names", ["0", "6"] if rank == 0 else ["0", "2"])]:  # fmt: skip
        try:
            Recorder(model, Path(root) / name, layers=layers, every=1, gradients=False)
        except RankMismatchError as error:
            out[name] = str(error)
    with Recorder(model, folder, layers=["0", "6"], every=1, gradients=False, resume=True) as again:
        out["first_step"] = again._step
        out["own_group_once"] = again._group is rec._group and rec._group is not dist.group.WORLD
        rec = again
        train(rec, 3)
    dist.barrier()
    if rank == 0:
        run = read_run(folder)
        series = run.stats("0")["0/output"]
        out.update(steps=run.steps, state=run.state, status_step=run.status["step"],
                   ranks=[s.ranks for s in series.values], resumed=run.status["resumed"],
                   records=run.status["records"])  # fmt: skip
    Path(root, f"resume{rank}.json").write_text(json.dumps(out))
    dist.barrier()
