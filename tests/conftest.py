"""Shared fixtures: every test must leave no hook behind."""

from __future__ import annotations

import gc

import pytest
import torch

from surgeon_widgets.engine.registry import live_hooks


@pytest.fixture(autouse=True)
def no_hooks_left():
    """Fail any test after which a hook added by this package is still registered."""
    torch.manual_seed(0)
    yield
    gc.collect()
    assert live_hooks() == [], f"hooks left behind: {live_hooks()}"
