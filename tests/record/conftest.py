"""Fixtures of the record tests: ``spawn`` runs a worker on 2 ranks with a deadline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import `record_workers` by name

from spawning import finish, start

from surgeon_widgets.record.accumulate_native import LIBRARY


@pytest.fixture
def spawn():
    def run(fn, *args, timeout: float = 45.0):
        finish(start(fn, *args), timeout)

    return run


@pytest.fixture(params=["C", "python"])
def native(request, monkeypatch):
    """Each way of reducing on a CPU: the C loop (this machine has a C compiler: it must build)
    and the numpy / torch path that runs where it cannot."""
    if request.param == "C":
        assert LIBRARY.wait(), "the C loop did not build (see the RuntimeWarning)"
    else:
        monkeypatch.setattr(LIBRARY, "get", lambda: None)
    return request.param
