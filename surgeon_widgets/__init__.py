"""surgeon_widgets: look inside PyTorch models, in code and live in Jupyter."""

from .engine.attention import attention_layers, capture_attention, reduce_pattern
from .engine.extract import Extract
from .engine.inspect import Inspect, get_layers
from .engine.naming import UnknownNameError
from .engine.nodes import get_nodes
from .engine.tracing import TracingError, reset_tracer, set_tracer

__all__ = [
    "Extract",
    "Inspect",
    "TracingError",
    "UnknownNameError",
    "attention_layers",
    "capture_attention",
    "get_layers",
    "get_nodes",
    "reduce_pattern",
    "reset_tracer",
    "set_tracer",
]
__version__ = "0.1.0"
