"""The notebook around the widget: IPython's shell and the user's namespace, marimo.

Each is read from ``sys.modules`` only: a front end that runs the widget has imported its
package already, and importing IPython or marimo here would cost a script their start-up.
Without one (a script, a test, another front end) the fallbacks are ``None``, an empty
namespace and ``False``; ``modules`` forces them (it stands for ``sys.modules``).

>>> shell(modules={}), dict(user_namespace(modules={})), in_marimo(modules={})
(None, {}, False)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["in_marimo", "shell", "user_namespace"]


def shell(modules: Mapping[str, Any] | None = None) -> Any:
    """The running IPython shell (``IPython.get_ipython()``), or ``None`` outside IPython."""
    ipython = (sys.modules if modules is None else modules).get("IPython")
    get = getattr(ipython, "get_ipython", None)
    return get() if callable(get) else None


def user_namespace(modules: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """The notebook user's variables (the shell's ``user_ns``); empty outside IPython."""
    found = shell(modules)
    namespace = getattr(found, "user_ns", None)
    return namespace if isinstance(namespace, Mapping) else {}


def in_marimo(modules: Mapping[str, Any] | None = None) -> bool:
    """Does a marimo notebook run this code (``marimo.running_in_notebook()``)?"""
    marimo = (sys.modules if modules is None else modules).get("marimo")
    try:
        return bool(marimo is not None and marimo.running_in_notebook())
    except Exception:  # an older or partial marimo: treated as not marimo
        return False
