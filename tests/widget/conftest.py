"""Fixtures of the widget tests: the kernel's main loop as a test drives it."""

from __future__ import annotations

import pytest

from surgeon_widgets.widget import explorer as explorer_module


class Loop:
    """The kernel's main loop as a test drives it: what is scheduled runs when a cell ends."""

    def __init__(self) -> None:
        self.callbacks: list = []

    def add_callback(self, fn) -> None:  # any thread, as tornado's
        self.callbacks.append(fn)

    def cell_ends(self) -> None:
        while self.callbacks:
            self.callbacks.pop(0)()


@pytest.fixture
def loop(monkeypatch) -> Loop:
    """Explorers made in the test see a kernel's main loop (``Loop``)."""
    made = Loop()
    monkeypatch.setattr(explorer_module, "main_loop_scheduler", lambda: made.add_callback)
    return made
