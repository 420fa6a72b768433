"""One naming scheme for modules and graph nodes, and name resolution with helpful errors.

A node is named after the module that owns it (its ``named_modules()`` dot path), then the
operation, e.g. ``layer1.0.add``; a leaf module call is named by the module path itself, e.g.
``layer1.0.conv1``. A module or function called again inside the same owner gets ``_1``,
``_2``, ... (``layer1.0.relu``, ``layer1.0.relu_1``). Only a trailing ``_<digits>`` that the
tracer added is ever removed, so ``scaled_dot_product_attention`` and ``layer_norm`` keep
their underscores.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "NameSpec",
    "Namer",
    "UnknownNameError",
    "base_name",
    "closest",
    "normalize_spec",
    "split_call_suffix",
]

NameSpec = str | Sequence[str] | Mapping[str, str]

_SUFFIX = re.compile(r"^(.*?)_(\d+)$")


class UnknownNameError(KeyError):
    """A layer or node name that the model does not have.

    The message names the bad entry and the closest valid names. It is a ``KeyError``, so
    ``except KeyError`` catches it too.
    """

    def __init__(self, name: object, valid: Iterable[str], what: str = "name", hint: str = ""):
        self.name = name
        self.suggestions = closest(str(name), valid)
        message = f"unknown {what} {name!r}"
        if self.suggestions:
            message += "; closest valid: " + ", ".join(repr(s) for s in self.suggestions)
        if hint:
            message += f". {hint}"
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


def closest(name: str, valid: Iterable[str], n: int = 5) -> list[str]:
    """The valid names most like ``name`` (difflib), best first; falls back to shared prefixes."""
    choices = list(dict.fromkeys(valid))
    found = difflib.get_close_matches(name, choices, n=n, cutoff=0.5)
    if not found:
        head = name.split(".")[0]
        found = [c for c in choices if c.startswith(head)][:n]
    return found


def base_name(node_name: str) -> str:
    """Drop the ``_<n>`` suffix torch.fx adds to repeated node names: ``add_2`` -> ``add``."""
    match = _SUFFIX.match(node_name)
    return match.group(1) if match and match.group(1) else node_name


def split_call_suffix(name: str) -> tuple[str, int]:
    """``'layer1.0.relu_2'`` -> ``('layer1.0.relu', 2)``; no suffix -> call 0."""
    match = _SUFFIX.match(name)
    if match and match.group(1):
        return match.group(1), int(match.group(2))
    return name, 0


class Namer:
    """Hands out unique public names, counting repeats per owner path.

    >>> namer = Namer()
    >>> [namer.name("", "relu"), namer.name("", "relu"), namer.name("block", "add")]
    ['relu', 'relu_1', 'block.add']
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._used = set(taken)
        self._counts: dict[str, int] = {}

    def name(self, owner: str, base: str) -> str:
        stem = f"{owner}.{base}" if owner and base else owner or base
        count = self._counts.get(stem, 0)
        candidate = stem if count == 0 else f"{stem}_{count}"
        while candidate in self._used:
            count += 1
            candidate = f"{stem}_{count}"
        self._counts[stem] = count + 1
        self._used.add(candidate)
        return candidate


def normalize_spec(spec: NameSpec, what: str) -> list[tuple[str, str]]:
    """Turn a str / list / tuple / dict of names into ``[(name, key), ...]`` in the order given.

    For a dict the key is the new name; otherwise the key is the name itself.
    """
    if isinstance(spec, str):
        return [(spec, spec)]
    if isinstance(spec, Mapping):
        pairs = list(spec.items())
    elif isinstance(spec, (list, tuple)):
        pairs = [(name, name) for name in spec]
    else:
        raise TypeError(
            f"{what} must be a str, list, tuple or dict of names, not {type(spec).__name__}"
        )
    if not pairs:
        raise ValueError(f"{what} is empty; give at least one name")
    for name, key in pairs:
        if not isinstance(name, str) or not isinstance(key, str):
            raise TypeError(f"{what} entries must be str, got {name!r}: {key!r}")
    return pairs
