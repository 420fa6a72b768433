"""IPython extension: ``%load_ext surgeon_widgets`` adds the ``%surgeon`` magics.

``%surgeon model [--example-inputs VAR] [--nodes]`` returns an Explorer of the notebook variable
``model`` (so it is displayed, and ``ex = %surgeon model`` keeps it). ``%surgeon_code ex``
prints an Explorer's code; ``%surgeon_cell ex`` puts it in the next cell.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit the kernel
        raise ValueError(f"{self.prog}: {message}\n{self.format_usage()}")


def _parser() -> _Parser:
    parser = _Parser(prog="%surgeon", add_help=False)
    parser.add_argument("model", help="name of the notebook variable holding the model")
    parser.add_argument("--example-inputs", "-e", default=None, help="variable with inputs")
    parser.add_argument("--nodes", action="store_true", help="show graph nodes (for cuts)")
    return parser


def _lookup(shell: Any, name: str, what: str) -> Any:
    try:
        return shell.ev(name)
    except Exception as error:
        raise ValueError(f"%surgeon: no {what} {name!r} in the notebook ({error})") from None


def surgeon(shell: Any, line: str) -> Any:
    """``%surgeon model [--example-inputs VAR] [--nodes]``: an Explorer of ``model``."""
    from .widget.explorer import Explorer  # Jupyter widget imports only when the magic runs

    args = _parser().parse_args(shlex.split(line))
    model = _lookup(shell, args.model, "model")
    inputs = None
    if args.example_inputs is not None:
        inputs = _lookup(shell, args.example_inputs, "example inputs")
    return Explorer(model, inputs, show_nodes=args.nodes)


def _explorer(shell: Any, line: str) -> Any:
    from .widget.explorer import Explorer

    name = line.strip()
    value = _lookup(shell, name, "Explorer") if name else None
    if not isinstance(value, Explorer):
        raise ValueError(f"give the variable holding an Explorer, e.g. `ex` (got {name!r})")
    return value


def load_ipython_extension(shell: Any) -> None:
    """Register ``%surgeon``, ``%surgeon_code`` and ``%surgeon_cell`` on ``shell``."""
    shell.register_magic_function(lambda line: surgeon(shell, line), "line", "surgeon")
    shell.register_magic_function(
        lambda line: print(_explorer(shell, line).code), "line", "surgeon_code"
    )
    shell.register_magic_function(
        lambda line: _explorer(shell, line).to_cell(), "line", "surgeon_cell"
    )


def unload_ipython_extension(shell: Any) -> None:
    """Remove the magics again."""
    magics = shell.magics_manager.magics["line"]
    for name in ("surgeon", "surgeon_code", "surgeon_cell"):
        magics.pop(name, None)
