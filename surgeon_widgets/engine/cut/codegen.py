"""Python source for the ``Extract(...)`` / ``Inspect(...)`` call a user picked in the widget.

Names are written with ``repr``, so a module called ``'a"b'``, ``'écoute'`` or ``'层'`` yields
code that names exactly that module; every snippet is compiled before it is returned.
"""

from __future__ import annotations

import ast
import difflib
import keyword
from collections.abc import Mapping
from typing import Any

from ..naming import NameSpec, normalize_spec

__all__ = ["extract_code", "find_variable_name", "inspect_code"]

_EXTRACT_OPTIONS = ("concrete_args", "keep_output", "share_modules")
_INSPECT_OPTIONS = ("keep_output", "all_calls")
_WIDTH = 88


def extract_code(
    node_in: NameSpec | None = None,
    node_out: NameSpec | None = None,
    model_name: str = "model",
    example_inputs_name: str | None = None,
    **options: Any,
) -> str:
    """Source that builds ``cut_model = Extract(<model_name>, ...)``.

    ``options`` are Extract's literal keyword arguments (``keep_output``, ``share_modules``,
    ``concrete_args``); ``example_inputs_name`` names the variable holding example inputs.

    >>> print(extract_code(node_in={"layer1": "x"}, node_out=["relu", 'a"b']))
    from surgeon_widgets import Extract
    <BLANKLINE>
    cut_model = Extract(model, node_in={'layer1': 'x'}, node_out=['relu', 'a"b'])
    """
    arguments = [_variable(model_name, "model_name")]
    for what, spec in (("node_in", node_in), ("node_out", node_out)):
        if spec is not None:
            normalize_spec(spec, what)  # raises TypeError / ValueError on a bad spec
            arguments.append(f"{what}={_literal(spec, what)}")
    if example_inputs_name is not None:
        arguments.append(f"example_inputs={_variable(example_inputs_name, 'example_inputs_name')}")
    arguments += _options(options, _EXTRACT_OPTIONS, "extract_code")
    return _snippet("Extract", "cut_model", arguments)


def inspect_code(layers: NameSpec, model_name: str = "model", **options: Any) -> str:
    """Source that builds ``inspected = Inspect(<model_name>, layer=...)``.

    ``options``: Inspect's ``keep_output`` and ``all_calls``.

    >>> print(inspect_code(["écoute", "层"], keep_output=False))
    from surgeon_widgets import Inspect
    <BLANKLINE>
    inspected = Inspect(model, layer=['écoute', '层'], keep_output=False)
    """
    normalize_spec(layers, "layers")
    arguments = [_variable(model_name, "model_name"), f"layer={_literal(layers, 'layers')}"]
    arguments += _options(options, _INSPECT_OPTIONS, "inspect_code")
    return _snippet("Inspect", "inspected", arguments)


def find_variable_name(obj: Any, namespace: Mapping[str, Any]) -> str:
    """The name ``namespace`` (the user's variables, e.g. IPython's ``user_ns``) gives ``obj``,
    else ``"model"``.

    The caller passes the namespace to search: a global lookup here would make the answer
    depend on whichever shell happens to be running. Names starting with ``_`` (IPython's
    ``_``, ``_3``) are skipped; among the others the shortest wins, then the most recently
    defined.

    >>> net = nn.Linear(2, 2)
    >>> find_variable_name(net, {"encoder": net, "_": net, "net": net}), find_variable_name(net, {})
    ('net', 'model')
    """
    names = [
        (len(name), -position, name)
        for position, (name, value) in enumerate(namespace.items())
        if value is obj and _is_variable(name) and not name.startswith("_")
    ]
    return min(names)[2] if names else "model"


def _is_variable(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _variable(name: str, what: str) -> str:
    """A (dotted) variable name, checked so the snippet cannot run anything else."""
    if not isinstance(name, str) or not all(_is_variable(part) for part in name.split(".")):
        raise ValueError(f"{what} must be a Python variable name like 'model', not {name!r}")
    return name


def _literal(value: Any, what: str) -> str:
    """``repr(value)``, checked to read back as the same value."""
    text = repr(value)
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, SyntaxError):
        same = False
    if not same:
        raise ValueError(f"{what}={value!r} cannot be written as a Python literal")
    return text


def _options(options: Mapping[str, Any], allowed: tuple[str, ...], caller: str) -> list[str]:
    for name in options:
        if name not in allowed:
            hint = difflib.get_close_matches(name, allowed, n=1)
            also = f"; did you mean {hint[0]!r}?" if hint else f"; valid: {', '.join(allowed)}"
            raise TypeError(f"{caller}() got an unexpected option {name!r}{also}")
    return [f"{name}={_literal(value, name)}" for name, value in options.items()]


def _snippet(cls: str, target: str, arguments: list[str]) -> str:
    call = f"{target} = {cls}({', '.join(arguments)})"
    if len(call) > _WIDTH:
        call = f"{target} = {cls}(\n" + "".join(f"    {a},\n" for a in arguments) + ")"
    code = f"from surgeon_widgets import {cls}\n\n{call}"
    compile(code, f"<{cls} code>", "exec")  # a SyntaxError here is a bug in this module
    return code
