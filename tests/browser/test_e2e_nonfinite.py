"""End to end (issue 32 item 1): inf multiplied into a weight at a known step, under the default
throttle, in a real JupyterLab; the banner names the module whose output broke and that step,
though the module is not selected and the throttle skipped the step. ResNet-18 and a 2-layer
GPT-2 built from a config; screenshots in the light and dark themes."""

from __future__ import annotations

from support.notebook_page import HOOKS_LISTED, RUN_CELL, notebook_page

AT = 6  # the step whose forward first meets the broken weight

RESNET = """\
import torch, torchvision
from torch import nn
from surgeon_widgets import Explorer

torch.manual_seed(0)
resnet = torchvision.models.resnet18(weights=None, num_classes=10)
ex = Explorer(resnet, selected=["layer4.1.conv2", "fc"], gradients=True)
ex"""

TRAIN_RESNET = f"""\
opt = torch.optim.SGD(resnet.parameters(), lr=0.01)
x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
for step in range(12):
    if step == {AT}:
        with torch.no_grad():
            resnet.layer3[0].conv1.weight.mul_(float("inf"))
    opt.zero_grad()
    nn.functional.cross_entropy(resnet(x), y).backward()
    opt.step()
print("resnet broken", ex.nonfinite[0].key if ex.nonfinite else None)"""

GPT2 = """\
import transformers

torch.manual_seed(0)
config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=32)
gpt2 = transformers.GPT2LMHeadModel(config).train()
fc = next(n for n, m in gpt2.named_modules() if n.endswith("h.1.mlp.c_fc"))
ex2 = Explorer(gpt2, selected=[fc.replace("h.1", "h.0")], gradients=True)
ex2"""

TRAIN_GPT2 = f"""\
opt = torch.optim.SGD(gpt2.parameters(), lr=0.01)
ids = torch.randint(0, 100, (2, 16))
for step in range(12):
    if step == {AT}:
        with torch.no_grad():
            gpt2.get_submodule(fc).weight.mul_(float("inf"))
    opt.zero_grad()
    gpt2(input_ids=ids, labels=ids).loss.backward()
    opt.step()
print("gpt2 broken", ex2.nonfinite[0].key if ex2.nonfinite else None)"""


def shoot(page, banner, path) -> None:
    """The page with ``banner`` at the top of the view (a view is taller than the window)."""
    banner.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(200)
    page.screenshot(path=str(path))


def test_the_banner_names_the_broken_module_and_step(browser, jupyterlab, tmp_path):
    cells = [RESNET, TRAIN_RESNET, GPT2, TRAIN_GPT2]
    with notebook_page(browser, jupyterlab, "lab", "nonfinite_origin_e2e.ipynb", cells) as (
        page,
        errors,
    ):
        page.evaluate(RUN_CELL, 0)
        page.locator('[data-layer="layer4.1.conv2"]').wait_for(timeout=90_000)
        page.wait_for_function(HOOKS_LISTED, arg="fc", timeout=20_000)
        page.evaluate(RUN_CELL, 1)
        page.locator(".jp-OutputArea-output", has_text="resnet broken").wait_for(timeout=120_000)
        line = page.locator(".sw-nonfinite-line").first
        line.wait_for(state="visible", timeout=20_000)
        text = line.inner_text()
        assert text.startswith(
            f"Non-finite values first in layer3.0.conv1 (output) at step {AT}"
        ), text
        shoot(page, line, tmp_path / "resnet_light.png")

        page.evaluate(RUN_CELL, 2)
        views = page.locator(".sw-explorer")
        views.nth(1).wait_for(timeout=120_000)
        page.evaluate(RUN_CELL, 3)
        page.locator(".jp-OutputArea-output", has_text="gpt2 broken").wait_for(timeout=120_000)
        line = views.nth(1).locator(".sw-nonfinite-line")
        line.wait_for(state="visible", timeout=20_000)
        text = line.inner_text()
        assert text.startswith(
            f"Non-finite values first in transformer.h.1.mlp.c_fc (output) at step {AT}"
        ), text
        shoot(page, line, tmp_path / "gpt2_light.png")
        page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: 'JupyterLab Dark'})")  # fmt: skip
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
        page.wait_for_timeout(500)
        shoot(page, views.nth(0).locator(".sw-nonfinite-line"), tmp_path / "resnet_dark.png")
        shoot(page, line, tmp_path / "gpt2_dark.png")
        page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                      "{theme: 'JupyterLab Light'})")  # fmt: skip
        assert errors == [], errors
