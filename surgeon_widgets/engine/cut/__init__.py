"""Cutting a traced model: check a cut (``analyze``), build it (``extract``), write its code.

``surgery`` holds the graph passes (select outputs, replace inputs, prune), ``leaks`` and
``mincut`` what a ``node_in`` cut still recomputes and the smallest fix, ``fixed_shapes`` the
sizes a ``torch.export`` graph is fixed to, ``codegen`` the ``Extract(...)`` source.
"""

from .analyze import CutReport, analyze_cut, suggest_fix
from .codegen import extract_code, inspect_code
from .extract import Extract, FixedArgumentError, InputLeakWarning, Summary, UnusedInputWarning

__all__ = [
    "CutReport",
    "Extract",
    "FixedArgumentError",
    "InputLeakWarning",
    "Summary",
    "UnusedInputWarning",
    "analyze_cut",
    "extract_code",
    "inspect_code",
    "suggest_fix",
]
