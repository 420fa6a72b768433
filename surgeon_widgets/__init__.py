"""surgeon_widgets: look inside PyTorch models, in code and live in Jupyter."""

from typing import Any

from .engine.attention import attention_layers, capture_attention, reduce_pattern
from .engine.extract import Extract
from .engine.inspect import Inspect, get_layers
from .engine.naming import UnknownNameError
from .engine.nodes import get_nodes
from .engine.tracing import TracingError, reset_tracer, set_tracer
from .record import Recorder, read_run

__all__ = [
    "Explorer",
    "Extract",
    "Inspect",
    "Recorder",
    "TracingError",
    "UnknownNameError",
    "attention_layers",
    "capture_attention",
    "get_layers",
    "get_nodes",
    "read_run",
    "reduce_pattern",
    "reset_tracer",
    "set_tracer",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The widget pulls in anywidget and matplotlib: load it only when asked for.
    if name == "Explorer":
        from .widget import Explorer

        return Explorer
    raise AttributeError(f"module 'surgeon_widgets' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext surgeon_widgets``: the ``%surgeon`` magics."""
    from .ipython_ext import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .ipython_ext import unload_ipython_extension as unload

    unload(ipython)
