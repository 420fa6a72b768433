"""The notebook around the widget: IPython's shell and the user's namespace, marimo, displays.

Each is read from ``sys.modules`` only: a front end that runs the widget has imported its
package already, and importing IPython or marimo here would cost a script their start-up.
Without one (a script, a test, another front end) the fallbacks are ``None``, an empty
namespace and ``False``, a display that publishes nothing (``False``) and a cell end that never
comes; ``modules`` forces them (it stands for ``sys.modules``). Displays use IPython's public
``display(..., display_id=...)`` / ``update_display`` and the shell's ``post_execute`` event.

>>> shell(modules={}), dict(user_namespace(modules={})), in_marimo(modules={})
(None, {}, False)
>>> publish({"text/plain": "x"}, "id", modules={}), on_cell_end(print, modules={})()
(False, None)
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["in_marimo", "on_cell_end", "publish", "shell", "user_namespace"]


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


def publish(
    bundle: Mapping[str, Any] | tuple, display_id: str, update: bool = False,
    modules: Mapping[str, Any] | None = None,
) -> bool:  # fmt: skip
    """Show the mime ``bundle`` (``data`` or ``(data, metadata)``) as display ``display_id``
    (``update``: replace what that display shows, wherever it is); ``False`` where no IPython
    shows it."""
    module = (sys.modules if modules is None else modules).get("IPython.display")
    if shell(modules) is None or module is None:
        return False
    data, metadata = bundle if isinstance(bundle, tuple) else (bundle, None)
    show = module.update_display if update else module.display
    show(dict(data), metadata=metadata, raw=True, display_id=display_id)
    return True


def on_cell_end(
    callback: Callable[[], None], modules: Mapping[str, Any] | None = None
) -> Callable[[], None]:
    """Call ``callback`` after every cell (IPython's ``post_execute``); returns the undo. A
    bound method is held weakly: IPython's events must not keep a closed widget alive."""
    events = getattr(shell(modules), "events", None)
    if events is None:
        return lambda: None
    call = _weakly(callback) if inspect.ismethod(callback) else callback
    events.register("post_execute", call)

    def undo() -> None:
        with contextlib.suppress(ValueError):  # gone already (IPython drops one that raised)
            events.unregister("post_execute", call)

    return undo


def _weakly(method: Any) -> Callable[[], None]:
    """``method()`` while its object lives."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()

    return call
