"""Shared fixtures: every test must leave no hook behind; Explorers that record what they send;
messages from the view."""

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


@pytest.fixture
def make():
    """Build Explorers (``make(model, ...)``) whose ``sent`` lists every message they would send
    as ``(content, buffers)``; each is closed after the test."""
    from surgeon_widgets.widget import Explorer  # the widget only for the tests that use it

    made: list[Explorer] = []

    def build(model: torch.nn.Module, *args, **kwargs) -> Explorer:
        ex = Explorer(model, *args, **kwargs)
        ex.sent = []
        ex.send = lambda content, buffers=None: ex.sent.append((content, buffers or []))
        made.append(ex)
        return ex

    yield build
    for ex in made:
        ex.close()


@pytest.fixture
def from_view():
    """``from_view(widget, content)``: the view sends ``content`` (a custom message) to
    ``widget`` (an Explorer, or a run view's ``view``).

    It arrives as a kernel delivers a comm message: through the comm's ``handle_msg`` (the
    comm opens first, as a display does) and ipywidgets' handler.
    """

    def send(ex, content: dict, buffers: list | None = None) -> None:
        ex.open()
        data = {"method": "custom", "content": content}
        ex.comm.handle_msg({"content": {"data": data}, "buffers": buffers or []})

    return send
