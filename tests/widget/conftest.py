"""Fixtures of the widget tests: messages from the view, as the kernel delivers them."""

from __future__ import annotations

import pytest


@pytest.fixture
def from_view():
    """``from_view(ex, content)``: the view sends ``content`` (a custom message) to ``ex``.

    It reaches the Explorer as a kernel delivers a comm message: through the comm's
    ``handle_msg`` (the comm opens first, as a display does) and ipywidgets' handler.
    """

    def send(ex, content: dict, buffers: list | None = None) -> None:
        ex.open()
        data = {"method": "custom", "content": content}
        ex.comm.handle_msg({"content": {"data": data}, "buffers": buffers or []})

    return send
