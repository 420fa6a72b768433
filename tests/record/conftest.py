"""Fixtures of the record tests: ``spawn`` runs a worker on 2 ranks with a deadline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import `record_workers` by name

from spawning import finish, start


@pytest.fixture
def spawn():
    def run(fn, *args, timeout: float = 45.0):
        finish(start(fn, *args), timeout)

    return run
