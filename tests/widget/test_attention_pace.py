"""The throttle charges an attention layer's update for our work only, not for the layer's own
forward (the user's compute): a slow attention layer (the demo's, on a busy machine) no longer
holds every other key of the Explorer back (issue #32: "88 steps for 3 updates, every 7.4 s")."""

from __future__ import annotations

import time

import torch
from support.models import SelfAttention
from torch import nn

from surgeon_widgets import Explorer

SLOW = 0.2  # seconds of the layer's own work per forward


class SlowAttention(SelfAttention):
    """Attention that also does SLOW seconds of its own work (a stand-in for a big layer)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(SLOW)
        return super().forward(x)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 16)
        self.attn = SlowAttention()
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(self.embed(x)))


def test_an_attention_update_is_charged_our_work_not_the_layers_forward():
    torch.manual_seed(0)
    model = Model().eval()
    ex = Explorer(model, selected=["attn"], max_rate=0)
    try:
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(2, 6, 4))
        throttle = ex._live.throttle
        costs = throttle.costs
        assert ("attn", "attention") in costs and ("attn", "activation") in costs
        # the recorder's pattern and the send take milliseconds; the layer took SLOW each time
        assert costs[("attn", "attention")] < SLOW / 2, costs
        # so the budget's longest wait is not stretched by the layer's forward
        throttle.max_rate = 10
        assert throttle.spacing(("attn", "activation")) <= 1.0
        assert sum(costs.values()) / throttle.budget < 5.0, costs  # was > SLOW / 2% = 10 s
    finally:
        ex.close()
