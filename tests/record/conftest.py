"""Fixtures of the record tests: ``spawn`` runs a worker on 2 ranks with a deadline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import `record_workers` by name

from spawning import finish, start

from surgeon_widgets.record import accumulate_native


@pytest.fixture
def spawn():
    def run(fn, *args, timeout: float = 45.0):
        finish(start(fn, *args), timeout)

    return run


@pytest.fixture(params=["C", "python"])
def native(request, monkeypatch):
    """Each way of reducing on a CPU: the C loop (built with the package: `pip install -e .` on
    a machine with a C compiler, as this one) and the numpy / torch path that runs without it."""
    if request.param == "C":
        assert accumulate_native.LIBRARY is not None, "the C loop was not built with the package"
    else:
        monkeypatch.setattr(accumulate_native, "LIBRARY", None)
    return request.param
