"""surgeon_widgets: look inside PyTorch models, in code and live in Jupyter."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine.attention import attention_layers, capture_attention, reduce_pattern
    from .engine.cut import Extract
    from .engine.inspect import Inspect, get_layers
    from .engine.naming import UnknownNameError
    from .engine.nodes import get_nodes
    from .engine.tracing import TracingError, reset_tracer, set_tracer
    from .record import Recorder, read_run
    from .widget import Explorer

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


# Every public name is loaded on first use: the command line (`surgeon-widgets --help`) must not
# import torch, and the widget pulls in anywidget and matplotlib.
_WHERE = {
    "Explorer": ".widget",
    "Extract": ".engine.cut",
    "Inspect": ".engine.inspect",
    "get_layers": ".engine.inspect",
    "TracingError": ".engine.tracing",
    "reset_tracer": ".engine.tracing",
    "set_tracer": ".engine.tracing",
    "UnknownNameError": ".engine.naming",
    "get_nodes": ".engine.nodes",
    "attention_layers": ".engine.attention",
    "capture_attention": ".engine.attention",
    "reduce_pattern": ".engine.attention",
    "Recorder": ".record",
    "read_run": ".record",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'surgeon_widgets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext surgeon_widgets``: the ``%surgeon`` magics."""
    from .ipython_ext import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .ipython_ext import unload_ipython_extension as unload

    unload(ipython)
