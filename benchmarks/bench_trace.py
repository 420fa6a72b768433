"""How long a trace takes, and that one trace per model serves everything that needs it.

For BERT, GPT-2, ViT and Swin configs (random weights) and torchvision's ResNet-18:

* ``fx``: torch.fx (Hugging Face models fail at once; the time to fail is printed);
* ``export static``: ``torch.export`` with the example's exact shapes;
* ``first call``: :func:`surgeon_widgets.engine.tracing.trace` (fx, else export with the
  cheap dynamic dims, else static);
* ``cached``: the same call again (the shared trace);
* ``traces``: how many real traces ran while ``get_nodes``, the Explorer's node rows,
  ``analyze_cut``, ``suggest_fix``, ``Extract`` and ``Extract`` again (the widget's
  ``submodel()``) were each called once, from a cold cache. Target: 1; 2 under torch.fx,
  where Extract's train/eval check traces the other mode once (that trace is cached too).

Then the time limit (``tracing.DYNAMIC_TIME_LIMIT``), on Swin with symbolic heights and
widths (the slow dynamic export: 49 s even at the quick size): the dynamic attempt is aborted
at the first module or torch call past the limit (:mod:`surgeon_widgets.engine.time_limit`)
and the static trace used. A static export of the same inputs is timed before and after the abort
(target: CPU-time ratio after / before <= 1.5; when torch.export's dynamic markers stayed on
the input tensors it took 64-195 s after an abort, against 0.5-0.9 s), and the model must keep
its own parameters. A raw ``torch.export`` aborted the same way prints the overshoot (seconds
from the deadline to the abort: one shape computation of a symbolic Swin can take seconds) and the
markers it leaves on its input (the cause; ``tracing`` exports aliases of the example tensors,
so the user's stay clean).

Wall-clock seconds (one run each: traces are seconds long, noise is small against them).

    python benchmarks/bench_trace.py           # BERT-base, GPT-2 small, ViT-B/16, Swin-T
    python benchmarks/bench_trace.py --quick   # 2 layers, hidden 64: CI's quick mode
"""

from __future__ import annotations

import argparse
import contextlib
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torchvision
import transformers

from surgeon_widgets import Extract, get_nodes
from surgeon_widgets.engine import tracing
from surgeon_widgets.engine.cut.analyze import analyze_cut, suggest_fix
from surgeon_widgets.engine.time_limit import TimeLimitExceeded, call_within
from surgeon_widgets.widget.views.tree import node_rows


def models(quick: bool) -> dict[str, Callable[[], tuple[torch.nn.Module, Any, str, str]]]:
    ids = torch.randint(0, 100, (1, 32 if quick else 128))
    side = 64 if quick else 224

    def bert():
        size = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                    intermediate_size=128) if quick else {}  # fmt: skip
        model = transformers.BertModel(transformers.BertConfig(vocab_size=100, **size))
        return model, {"input_ids": ids}, "encoder.layer.0", "encoder.layer.1"

    def gpt2():
        size = dict(n_layer=2, n_embd=64, n_head=2) if quick else {}
        model = transformers.GPT2Model(transformers.GPT2Config(vocab_size=100, **size))
        return model, {"input_ids": ids, "use_cache": False}, "h.0", "h.1"

    def vit():
        size = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                    intermediate_size=128) if quick else {}  # fmt: skip
        config = transformers.ViTConfig(image_size=side, patch_size=16, **size)
        pixels = torch.rand(1, 3, side, side)
        return transformers.ViTModel(config), {"pixel_values": pixels}, "layers.0", "layers.1"

    def swin():
        size = dict(embed_dim=16, depths=[2, 2], num_heads=[2, 2]) if quick else {}
        config = transformers.SwinConfig(image_size=side, **size)
        pixels = torch.rand(1, 3, side, side)
        names = ("encoder.layers.0.blocks.0", "encoder.layers.0.blocks.1")
        return transformers.SwinModel(config), {"pixel_values": pixels}, *names

    def resnet18():
        model = torchvision.models.resnet18()
        return model, torch.rand(1, 3, side, side), "layer1", "layer2"

    return {"bert": bert, "gpt2": gpt2, "vit": vit, "swin": swin, "resnet18": resnet18}


def seconds(run: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    try:
        result = run()
    except Exception as error:
        result = error
    return time.perf_counter() - start, result


def count_traces(model: torch.nn.Module, inputs: Any, a: str, b: str) -> int:
    """Real traces run by every consumer of a trace, called once each from a cold cache."""
    calls = []
    real = tracing._trace_uncached

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    tracing.clear_trace_cache(model)
    tracing._trace_uncached = counting
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            get_nodes(model, example_inputs=inputs)
            node_rows(model, inputs, frozenset(n for n, _ in model.named_modules()))
            traced = tracing.trace(model, example_inputs=inputs)
            analyze_cut(traced, {a: "h"}, b)
            suggest_fix(traced, {a: "h"}, b)
            Extract(model, {a: "h"}, b, example_inputs=inputs)
            Extract(model, {a: "h"}, b, example_inputs=inputs)
    finally:
        tracing._trace_uncached = real
    return len(calls)


def measure(model: torch.nn.Module, inputs: Any) -> tuple[str, float, float, float, Any]:
    fx_time, fx = seconds(lambda: tracing._fx_trace(model, None, None))
    fx_text = f"{fx_time:.2f} s" + (" (fails)" if isinstance(fx, Exception) else "")
    kwargs = inputs if isinstance(inputs, dict) else {}
    positional = () if isinstance(inputs, dict) else (inputs,)
    with torch.no_grad():
        static, _ = seconds(lambda: torch.export.export(model, positional, kwargs, strict=False))
    tracing.clear_trace_cache(model)
    first, traced = seconds(lambda: tracing.trace(model, example_inputs=inputs))
    cached, again = seconds(lambda: tracing.trace(model, example_inputs=inputs))
    assert again is traced, "the second call must return the shared trace"
    return fx_text, static, first, cached, traced


def static_export(model: torch.nn.Module, inputs: dict[str, Any]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (this process's, all threads: the ratio holds on a busy
    machine, where the wall clock measures the neighbours)."""
    cpu = time.process_time()
    with torch.no_grad():
        took, _ = seconds(lambda: tracing._export(model, (), inputs, None))
    return took, time.process_time() - cpu


def time_limit_case(quick: bool) -> None:
    """Swin, every input dimension dynamic, under a limit: aborted, static used, not slowed."""
    model, inputs, *_ = models(quick)["swin"]()
    model.eval()
    limit = 2.0 if quick else 10.0
    static_export(model, inputs)  # warm
    before = min(static_export(model, inputs) for _ in range(2))
    params = {k: (v, v.detach().clone()) for k, v in model.state_dict(keep_vars=True).items()}
    cheap, tracing._cheap_dims = tracing._cheap_dims, lambda value: list(range(value.dim()))
    saved, tracing.DYNAMIC_TIME_LIMIT = tracing.DYNAMIC_TIME_LIMIT, limit
    try:
        tracing.clear_trace_cache(model)
        took, traced = seconds(lambda: tracing.trace(model, example_inputs=inputs))
    finally:
        tracing._cheap_dims, tracing.DYNAMIC_TIME_LIMIT = cheap, saved
    after = min(static_export(model, inputs) for _ in range(2))
    now = model.state_dict(keep_vars=True)
    left = [k for k, (v, copy) in params.items() if now[k] is not v or not torch.equal(v, copy)]
    print(f"\ntime limit: swin, dynamic H/W, DYNAMIC_TIME_LIMIT={limit:g} s")
    print(f"  trace: {took:.2f} s ({getattr(traced, 'note', traced)})")
    ratio = after[1] / before[1]
    print(f"  static export before the abort {before[0]:.2f} s (CPU {before[1]:.2f} s), after "
          f"{after[0]:.2f} s (CPU {after[1]:.2f} s): CPU ratio {ratio:.2f}; "
          f"model tensors changed: {left or 'none'}")  # fmt: skip
    if ratio > 1.5 or left:
        print("  target missed: a trace after an abort must be as fast as before it")
    pixels = inputs["pixel_values"].clone()  # the cause, shown on a raw torch.export
    dims = {"pixel_values": dict.fromkeys(range(4), torch.export.Dim.AUTO)}
    started = time.monotonic()
    raw = {"pixel_values": pixels}
    with torch.no_grad(), tracing._quiet_torch_logs(), contextlib.suppress(TimeLimitExceeded):
        call_within(1.0, lambda: torch.export.export(
            model, (), raw, strict=False, dynamic_shapes=dims), model=model)  # fmt: skip
    overshoot = time.monotonic() - started - 1.0
    marks = sorted(k for k in vars(pixels) if k.startswith("_dynamo"))
    print(f"  a raw torch.export with a 1 s limit: aborted {overshoot:.2f} s past the deadline; "
          f"it leaves on its input: {marks or 'nothing'}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"{'model':<9} {'fx':>16} {'export static':>14} {'first call':>11} {'cached':>9} "
          f"{'traces':>6}  note")  # fmt: skip
    for name, build in models(args.quick).items():
        model, inputs, a, b = build()
        model.eval()
        fx_text, static, first, cached, traced = measure(model, inputs)
        count = count_traces(model, inputs, a, b)
        method = getattr(traced, "method", "?")
        note = f"{method}; {traced.note}" if getattr(traced, "note", "") else method
        print(f"{name:<9} {fx_text:>16} {static:>12.2f} s {first:>9.2f} s {cached * 1e3:>6.2f} ms "
              f"{count:>6}  {note}", flush=True)  # fmt: skip
        target = 2 if method == "fx" else 1
        if count != target:
            print(f"  target missed: {name} traced {count} times (target {target})")
    time_limit_case(args.quick)


if __name__ == "__main__":
    main()
