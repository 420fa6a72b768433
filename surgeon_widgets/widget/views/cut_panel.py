"""The Explorer's cut panel: mark a cut's input and output nodes, see its report and code.

A traitlets mixin over the engine (:func:`~..engine.cut.analyze_cut`, :mod:`~..engine.codegen`,
:class:`~..engine.extract.Extract`); it traces the model once (again only if its modules change)
and never raises into the widget: every failure becomes a line of ``cut_report["problems"]``.

Synced traits (``js/PROTOCOL.md`` "Cut"): ``node_in`` / ``node_out`` (wire form: dict
``{node: new_name}``; a str or list of names is accepted and normalised), ``cut_report``
(``CutReport.to_dict()``, ``{}`` while nothing is marked), ``code`` (the Extract/Inspect source).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import traitlets as t
from torch import nn

from ...engine.cut.analyze import CutReport, analyze_cut
from ...engine.cut.codegen import extract_code, find_variable_name, inspect_code
from ...engine.cut.extract import Extract
from ...engine.naming import split_call_suffix
from ...engine.tracing import Trace, trace

__all__ = ["CutPanel", "normalize_names"]

log = logging.getLogger("surgeon_widgets.cut")
NO_INSERT = "insertion is not available here (VS Code / Voila): use Copy"


def normalize_names(value: Any, what: str) -> dict[str, str]:
    """``None`` / str / list / dict -> the wire form ``{node: new_name}``.

    >>> normalize_names(["a", "b"], "node_in"), normalize_names({"a": "x"}, "node_in")
    ({'a': 'a', 'b': 'b'}, {'a': 'x'})
    """
    if value is None:
        return {}
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)):
        pairs = [(name, name) for name in value]
    else:
        raise t.TraitError(
            f"{what} takes a list of node names or a dict name -> new name, "
            f"not {type(value).__name__}"
        )
    out: dict[str, str] = {}
    for name, new in pairs:
        if not isinstance(name, str) or not isinstance(new, str):
            raise t.TraitError(f"{what} names must be strings, got {name!r}: {new!r}")
        out[name] = new.strip() or name  # an emptied rename field means "keep the name"
    return out


def _spec(names: dict[str, str]) -> str | list[str] | dict[str, str] | None:
    """The wire dict as the simplest Extract spec: one name as a str (a single output comes
    back as a tensor), a list when nothing is renamed, else the dict."""
    if not names:
        return None
    if all(k == v for k, v in names.items()):
        return next(iter(names)) if len(names) == 1 else list(names)
    return dict(names)


class NameMap(t.TraitType):
    """A trait holding ``{node: new_name}``; a str, list or tuple of names is normalised to it."""

    default_value: ClassVar[dict] = {}
    info_text = "a list of node names or a dict name -> new name"

    def validate(self, obj: Any, value: Any) -> dict[str, str]:
        return normalize_names(value, self.name or "names")


class CutPanel(t.HasTraits):
    """Mixin for the Explorer: ``node_in``/``node_out`` -> ``cut_report`` and ``code``."""

    node_in = NameMap().tag(sync=True)
    node_out = NameMap().tag(sync=True)
    cut_report = t.Dict().tag(sync=True)
    code = t.Unicode("").tag(sync=True)

    _model: nn.Module
    _example_inputs: Any

    # -- Python API -------------------------------------------------------------------------

    def submodel(self) -> Extract:
        """``Extract(model, node_in, node_out, example_inputs=...)`` for the current cut.

        Raises:
            ValueError: the cut has problems (they are listed); the engine's own errors otherwise.
        """
        self._cut_refresh()  # the model may have changed since the last edit of the cut
        problems = self.cut_report.get("problems") or []
        if problems:
            raise ValueError("the current cut is not valid:\n  " + "\n  ".join(problems))
        return Extract(
            self._model,
            node_in=_spec(self.node_in),
            node_out=_spec(self.node_out),
            example_inputs=self._example_inputs,
        )

    def apply_fix(self) -> None:
        """Add the report's suggested extra inputs to ``node_in`` (no-op without a fix)."""
        fix = self.cut_report.get("fix") or []
        if fix:
            self.node_in = {**self.node_in, **{name: name for name in fix}}

    def to_cell(self) -> None:
        """Put ``code`` in a new cell below the running one (IPython's ``set_next_input``).

        Raises:
            RuntimeError: not running in IPython.
        """
        shell = _shell()
        if shell is None:
            raise RuntimeError("to_cell() needs IPython; print(explorer.code) instead")
        self._cut_refresh()
        shell.set_next_input(self.code, replace=False)

    # -- internals ----------------------------------------------------------------------------

    def _cut_init(self) -> None:
        self._cut_trace_error = ""
        self._cut_fingerprint: tuple = ()
        self._cut_refresh()

    @t.observe("node_in", "node_out", "selected")
    def _cut_changed(self, change: Any) -> None:
        if hasattr(self, "_cut_trace_error"):
            self._cut_refresh()

    def _cut_on_msg(self, content: dict) -> bool:
        """Handle the cut panel's messages; ``False`` if ``content`` is not one."""
        kind = content.get("type")
        if kind == "cut_apply_fix":
            self.apply_fix()
        elif kind == "insert_cell":
            ok, message = _insert_with_ipylab(str(content.get("code", self.code)))
            self.send({"type": "insert_result", "ok": ok, "message": message})
        else:
            return False
        return True

    def _traced(self) -> Trace:
        """The engine's shared trace of the model (traced again when the model changes); a
        failure is remembered until the model's modules change, so clicks do not re-trace."""
        fingerprint = tuple((n, id(m)) for n, m in self._model.named_modules())
        if self._cut_trace_error and fingerprint == self._cut_fingerprint:
            raise _TraceFailed(self._cut_trace_error)
        try:
            traced = trace(self._model, example_inputs=self._example_inputs)
        except Exception as error:  # untraceable: the panel shows why
            self._cut_fingerprint = fingerprint
            self._cut_trace_error = str(error) or type(error).__name__
            raise _TraceFailed(self._cut_trace_error) from None
        self._cut_trace_error = ""
        return traced

    def _cut_refresh(self) -> None:
        try:
            report = self._cut_analyze()
        except Exception as error:  # never a traceback in the widget
            log.exception("cut analysis failed")
            report = CutReport(problems=(f"cut analysis failed: {type(error).__name__}: {error}",))
        self.cut_report = report.to_dict() if (self.node_in or self.node_out) else {}
        self.code = self._cut_code(report)

    def _cut_analyze(self) -> CutReport:
        if not (self.node_in or self.node_out):
            return CutReport()
        try:
            traced = self._traced()
        except _TraceFailed as error:
            return CutReport(
                node_in=tuple(self.node_in), node_out=tuple(self.node_out),
                problems=(f"the model cannot be traced, so no cut: {error}",),
            )  # fmt: skip
        return analyze_cut(traced, _spec(self.node_in), _spec(self.node_out))

    def _cut_code(self, report: CutReport) -> str:
        namespace = _namespace()
        model_name = find_variable_name(self._model, namespace)
        parts: list[str] = []
        imports: list[str] = []
        try:
            if self.node_in or self.node_out:
                inputs_name = None
                if self._example_inputs is not None:
                    found = find_variable_name(self._example_inputs, namespace)
                    known = namespace.get(found) is self._example_inputs
                    inputs_name = found if known else "example_inputs"
                snippet = extract_code(_spec(self.node_in), _spec(self.node_out), model_name,
                                       inputs_name)  # fmt: skip
                imports.append("Extract")
                parts.append(snippet.split("\n\n", 1)[1])
            selected = _layers_only(self._model, getattr(self, "selected", []) or [])
            if selected:
                imports.append("Inspect")
                parts.append(inspect_code(selected, model_name).split("\n\n", 1)[1])
        except (TypeError, ValueError) as error:
            return f"# no code: {error}"
        if not parts:
            return ""
        head = [f"# not a valid cut yet: {p.splitlines()[0]}" for p in report.problems]
        body = f"from surgeon_widgets import {', '.join(imports)}\n\n" + "\n".join(parts)
        return "\n".join([*head, body])


def _layers_only(model: Any, names: list[str]) -> list[str]:
    """The selected names Inspect takes (modules, with a call suffix); graph nodes are left out:
    hooks see module calls only."""
    modules = dict(model.named_modules())
    return [n for n in names if n in modules or split_call_suffix(n)[0] in modules]


class _TraceFailed(Exception):
    pass


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _namespace() -> Mapping[str, Any]:
    shell = _shell()
    return shell.user_ns if shell is not None else {}


NO_INSERT_MARIMO = "marimo cannot add cells from a widget: press Copy, then paste into a new cell"


def _in_marimo() -> bool:
    marimo = sys.modules.get("marimo")  # only loaded when marimo runs this notebook
    try:
        return bool(marimo is not None and marimo.running_in_notebook())
    except Exception:
        return False


def _insert_with_ipylab(code: str) -> tuple[bool, str]:
    """Insert a cell below the active one through ipylab's front-end commands, if installed.

    ipylab (optional) needs its JupyterLab extension, present in JupyterLab 4 and Notebook 7.
    A marimo notebook has no way for a widget to add cells: the answer says to copy.
    """
    if _in_marimo():
        return False, NO_INSERT_MARIMO
    try:
        from ipylab import JupyterFrontEnd  # type: ignore[import-not-found]
    except ImportError:
        return False, NO_INSERT
    try:
        app = JupyterFrontEnd()

        def insert() -> None:
            app.commands.execute("notebook:insert-cell-below")
            app.commands.execute("notebook:replace-selection", {"text": code})

        if getattr(app, "on_ready", None) is not None:
            app.on_ready(insert)
        else:
            insert()
    except Exception as error:
        return False, f"{NO_INSERT} ({type(error).__name__}: {error})"
    # ipylab cannot tell whether its front end is there (it needs its JupyterLab extension)
    return True, "asked JupyterLab (ipylab) for a cell below the active one; none? use Copy"
