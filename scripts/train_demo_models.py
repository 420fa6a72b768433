"""Train the embedded demo models and save them to ``surgeon_widgets/data/``.

Seeded and deterministic, CPU only, data generated on the fly (no downloads); takes about a
minute on 2 cores. Usage::

    python scripts/train_demo_models.py            # train both, save, report
    python scripts/train_demo_models.py --check    # only evaluate the saved weights
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from surgeon_widgets.demo import (
    CNN_WEIGHTS,
    TRANSFORMER_WEIGHTS,
    TinyCNN,
    TinyTransformer,
    load_cnn,
    load_transformer,
    reversal_batch,
    shape_batch,
)

DATA_DIR = Path(__file__).resolve().parents[1] / "surgeon_widgets" / "data"
EVAL_SEED = 10**9  # training seeds are 1, 2, 3, ... per step; evaluation uses fresh ones


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # deterministic, and fastest for models this small


def anti_diagonal_mass(model: TinyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """Mean attention probability on the anti-diagonal, per ``(layer, head)``."""
    weights = model.attention_weights(tokens)  # layers, batch, heads, query, key
    return weights.flip(-1).diagonal(dim1=-2, dim2=-1).mean((1, 3))


@torch.no_grad()
def evaluate_transformer(model: TinyTransformer, n: int = 4096) -> dict[str, object]:
    model.eval()
    tokens, targets = reversal_batch(n, seed=EVAL_SEED)
    pred = model(tokens).argmax(-1)
    return {
        "token_acc": (pred == targets).float().mean().item(),
        "sequence_acc": (pred == targets).all(-1).float().mean().item(),
        "anti_diagonal": anti_diagonal_mass(model, tokens[:512]),
    }


@torch.no_grad()
def evaluate_cnn(model: TinyCNN, n: int = 2048) -> dict[str, object]:
    model.eval()
    images, labels = shape_batch(n, seed=EVAL_SEED)
    return {"acc": (model(images).argmax(-1) == labels).float().mean().item()}


def train_transformer(steps: int = 1500, batch: int = 128, lr: float = 3e-3) -> TinyTransformer:
    seed_everything(0)
    model = TinyTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    for step in range(steps):
        tokens, targets = reversal_batch(batch, seed=step + 1)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 250 == 0 or step == steps - 1:
            print(f"  transformer step {step:5d} loss {loss.item():.4f}")
    return model.eval()


def train_cnn(steps: int = 400, batch: int = 64, lr: float = 3e-3) -> TinyCNN:
    seed_everything(0)
    model = TinyCNN()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    for step in range(steps):
        images, labels = shape_batch(batch, seed=step + 1)
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  cnn step {step:5d} loss {loss.item():.4f}")
    return model.eval()


def save(model: torch.nn.Module, filename: str) -> Path:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    path = DATA_DIR / filename
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    torch.save(state, path)
    return path


def report(transformer: TinyTransformer, cnn: TinyCNN) -> None:
    t = evaluate_transformer(transformer)
    c = evaluate_cnn(cnn)
    mass = t["anti_diagonal"]
    print(f"reversal: token acc {t['token_acc']:.4f}, sequence acc {t['sequence_acc']:.4f}")
    for layer, row in enumerate(mass.tolist()):
        print(f"  layers.{layer}.attn anti-diagonal mass per head: {[round(m, 3) for m in row]}")
    print(f"shapes: acc {c['acc']:.4f}")
    sizes = {f: (DATA_DIR / f).stat().st_size for f in (TRANSFORMER_WEIGHTS, CNN_WEIGHTS)}
    total = sum(sizes.values())
    print(f"weights: {sizes}, total {total / 1e6:.3f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="evaluate the saved weights only")
    args = parser.parse_args()
    if not args.check:
        start = time.perf_counter()
        print("training TinyTransformer (digit reversal)")
        save(train_transformer(), TRANSFORMER_WEIGHTS)
        print(f"  {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        print("training TinyCNN (shapes)")
        save(train_cnn(), CNN_WEIGHTS)
        print(f"  {time.perf_counter() - start:.1f} s")
    report(load_transformer(), load_cnn())


if __name__ == "__main__":
    main()
