"""Inside a training process the package starts only the threads ARCHITECTURE.md lists, and no
process (issue 31's bar: 200 CPU steps with an Explorer, 12 layers with gradients, and a
Recorder)."""

from __future__ import annotations

import subprocess
import threading

import torch
from torch import nn

from surgeon_widgets import Recorder
from surgeon_widgets.widget.explorer import Explorer

LISTED = {"surgeon-recorder-heartbeat", "surgeon-widgets still", "surgeon-run-view"}


def twelve_layers() -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(6)])


def test_training_with_an_explorer_and_a_recorder_starts_only_listed_threads(
    tmp_path, monkeypatch
):
    started: list[str] = []
    processes: list[object] = []
    start, popen = threading.Thread.start, subprocess.Popen.__init__

    def counted_start(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    def counted_popen(self, *args, **kwargs) -> None:
        processes.append(args[0] if args else kwargs.get("args"))
        popen(self, *args, **kwargs)

    monkeypatch.setattr(threading.Thread, "start", counted_start)
    monkeypatch.setattr(subprocess.Popen, "__init__", counted_popen)
    torch.manual_seed(0)
    watched, recorded = twelve_layers(), twelve_layers()
    layers = [name for name, m in watched.named_modules() if isinstance(m, (nn.Linear, nn.Tanh))]
    assert len(layers) == 12
    ex = Explorer(watched, selected=layers, gradients=True, max_rate=0)
    opt = torch.optim.SGD([*watched.parameters(), *recorded.parameters()], lr=1e-3)
    try:
        with Recorder(recorded, tmp_path / "run", layers=layers, every=10) as rec:
            for _ in range(200):
                x = torch.randn(8, 32)
                loss = watched(x).pow(2).mean() + recorded(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                rec.step()
        assert ex.stats(layers[0])[f"{layers[0]}/output"].steps[-1] == 199
    finally:
        ex.close()
    assert "surgeon-recorder-heartbeat" in started  # the count sees our threads
    assert set(started) <= LISTED and processes == [], (started, processes)
