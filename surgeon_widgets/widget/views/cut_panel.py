"""The Explorer's cut panel: mark a cut's input and output nodes, see its report and code.

A component the Explorer owns, over the engine (:func:`~..engine.cut.analyze_cut`,
:mod:`~..engine.cut.codegen`, :class:`~..engine.cut.Extract`). Its inputs are passed in: the
model and example inputs, ``marks()`` (the current ``node_in``, ``node_out`` and selection),
``show(cut_report, code)`` (the Explorer's traits) and ``answer(ok, message)`` (the result of
an ``insert_cell``, sent to the view). It traces the model once (again only if its modules
change) and never raises into the widget: every failure becomes a line of
``cut_report["problems"]``. The Explorer refreshes a marked cut only on the main thread
between forwards (:meth:`~..runtime.handover.Handover.later`); until then the view shows the
report as being recomputed (it names other marks).

Synced traits on the Explorer (``js/PROTOCOL.md`` "Cut"): ``node_in`` / ``node_out`` (wire form:
dict ``{node: new_name}``; a str or list of names is accepted and normalised by
:class:`NameMap`), ``cut_report`` (``CutReport.to_dict()`` plus ``code``: the source for these
marks, so "Insert as new cell" never inserts code of other marks; ``{}`` while nothing is
marked),
``code`` (the Extract and Inspect source: what the panel shows, Copy copies and Insert inserts).


>>> from torch import nn
>>> shown = {}
>>> marks = lambda: Marks({"0": "0"}, {"1": "1"}, [])
>>> panel = CutPanel(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), None, marks,
...                  lambda report, code: shown.update(report=report, code=code), print)
>>> _ = panel.refresh()
>>> shown["report"]["valid"], shown["code"].splitlines()[-1]
(True, "cut_model = Extract(model, node_in='0', node_out='1')")
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

import traitlets as t
from torch import nn

from ...engine.cut.analyze import CutReport, analyze_cut
from ...engine.cut.codegen import extract_code, find_variable_name, inspect_code
from ...engine.cut.extract import Extract
from ...engine.naming import split_call_suffix
from ...engine.tracing import Trace, trace
from ..runtime.notebook import in_marimo

__all__ = ["CutPanel", "Marks", "NameMap", "normalize_names"]

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


class Marks(NamedTuple):
    """What the panel shows a cut of: the marked nodes and the selected layers."""

    node_in: dict[str, str]
    node_out: dict[str, str]
    selected: list[str]


class CutPanel:
    """``marks()`` -> the cut's report and code, shown through ``show(report, code)``.

    Args:
        model: the model cut (its own modules: not a ``torch.compile`` wrapper).
        example_inputs: as the Explorer's; traces models torch.fx cannot, and the code uses them.
        marks: the current :class:`Marks`.
        show: called with the ``cut_report`` dict and the ``code`` after each refresh.
        answer: called with ``(ok, message)`` once an ``insert_cell`` is done (sent to the view).
        namespace: the user's namespace, to name the model in the code (default: none).
        shell: the IPython shell (``to_cell``), or ``None`` outside IPython.
    """

    def __init__(
        self,
        model: nn.Module,
        example_inputs: Any,
        marks: Callable[[], Marks],
        show: Callable[[dict, str], None],
        answer: Callable[[bool, str], None],
        namespace: Callable[[], Mapping[str, Any]] = dict,
        shell: Callable[[], Any] = lambda: None,
    ) -> None:
        self.model = model
        self.example_inputs = example_inputs
        self.marks = marks
        self.show = show
        self.answer = answer
        self.namespace = namespace
        self.shell = shell
        self._trace_error = ""
        self._fingerprint: tuple = ()
        self._model_name = "model"  # as the user's namespace named the model at the last refresh
        self._modules = frozenset(n for n, _ in model.named_modules())

    def refresh(self) -> tuple[CutReport, str]:
        """Analyse the current marks and show the report and code; return the report and the
        code: the cut's Extract call and the selected layers' Inspect call, as shown (what
        Copy copies and a new cell gets)."""
        marks = self.marks()
        try:
            report = self._analyze(marks)
        except Exception as error:  # never a traceback in the widget
            log.exception("cut analysis failed")
            report = CutReport(problems=(f"cut analysis failed: {type(error).__name__}: {error}",))
        code = self._code(marks, report)
        marked = marks.node_in or marks.node_out
        self.show({**report.to_dict(), "code": code} if marked else {}, code)
        return report, code

    def selection_code(self, selected: list[str]) -> str:
        """The code a selection alone gets (no cut marked), from names only: for the view on
        any thread while the model's thread is busy (e.g. compiling). Reads neither the model
        nor the user's namespace (the model's name is the last refresh's)."""
        layers = _layers_only(self._modules, selected)
        try:
            return inspect_code(layers, self._model_name) if layers else ""
        except (TypeError, ValueError) as error:
            return f"# no code: {error}"

    def submodel(self) -> Extract:
        """``Extract(model, node_in, node_out, example_inputs=...)`` for the current cut.

        Raises:
            ValueError: the cut has problems (they are listed); the engine's own errors otherwise.
        """
        report, _ = self.refresh()  # the model may have changed since the last edit of the cut
        marks = self.marks()
        if (marks.node_in or marks.node_out) and report.problems:
            problems = "\n  ".join(report.problems)
            raise ValueError("the current cut is not valid:\n  " + problems)
        return Extract(
            self.model,
            node_in=_spec(marks.node_in),
            node_out=_spec(marks.node_out),
            example_inputs=self.example_inputs,
        )

    def with_fix(self, report: Mapping[str, Any]) -> dict[str, str] | None:
        """``node_in`` with the report's suggested extra inputs; ``None`` without a fix."""
        fix = report.get("fix") or []
        return {**self.marks().node_in, **{name: name for name in fix}} if fix else None

    def to_cell(self) -> None:
        """Put the code the panel shows (the cut's Extract call, the layers' Inspect call) in a
        new cell below the running one (IPython's ``set_next_input``)."""
        shell = self.shell()
        if shell is None:
            raise RuntimeError("to_cell() needs IPython; print(explorer.code) instead")
        _, code = self.refresh()
        shell.set_next_input(code, replace=False)

    def insert_cell(self, code: str) -> None:
        """Ask the notebook for a cell below the active one holding ``code``; answer the view."""
        ok, message = _insert_with_ipylab(code)
        self.answer(ok, message)

    def _traced(self) -> Trace:
        """The engine's shared trace of the model (traced again when the model changes); a
        failure is remembered until the model's modules change, so clicks do not re-trace."""
        fingerprint = tuple((n, id(m)) for n, m in self.model.named_modules())
        if self._trace_error and fingerprint == self._fingerprint:
            raise _TraceFailed(self._trace_error)
        try:
            traced = trace(self.model, example_inputs=self.example_inputs)
        except Exception as error:  # untraceable: the panel shows why
            self._fingerprint = fingerprint
            self._trace_error = str(error) or type(error).__name__
            raise _TraceFailed(self._trace_error) from None
        self._trace_error = ""
        return traced

    def _analyze(self, marks: Marks) -> CutReport:
        if not (marks.node_in or marks.node_out):
            return CutReport()
        try:
            traced = self._traced()
        except _TraceFailed as error:
            return CutReport(
                node_in=tuple(marks.node_in), node_out=tuple(marks.node_out),
                problems=(f"the model cannot be traced, so no cut: {error}",),
            )  # fmt: skip
        return analyze_cut(traced, _spec(marks.node_in), _spec(marks.node_out))

    def _code(self, marks: Marks, report: CutReport) -> str:
        """The Extract and Inspect source (each when there is a cut / a selected layer)."""
        namespace = self.namespace()
        model_name = self._model_name = find_variable_name(self.model, namespace)
        cut, inspect = "", ""
        try:
            if marks.node_in or marks.node_out:
                inputs_name = None
                if self.example_inputs is not None:
                    found = find_variable_name(self.example_inputs, namespace)
                    known = namespace.get(found) is self.example_inputs
                    inputs_name = found if known else "example_inputs"
                cut = extract_code(_spec(marks.node_in), _spec(marks.node_out), model_name,
                                   inputs_name).split("\n\n", 1)[1]  # fmt: skip
            self._modules = frozenset(n for n, _ in self.model.named_modules())
            selected = _layers_only(self._modules, marks.selected)
            if selected:
                inspect = inspect_code(selected, model_name).split("\n\n", 1)[1]
        except (TypeError, ValueError) as error:
            return f"# no code: {error}"
        head = [f"# not a valid cut yet: {p.splitlines()[0]}" for p in report.problems]

        def source(**parts: str) -> str:
            found = {name: part for name, part in parts.items() if part}
            if not found:
                return ""
            body = f"from surgeon_widgets import {', '.join(found)}\n\n" + "\n".join(found.values())
            return "\n".join([*head, body])

        return source(Extract=cut, Inspect=inspect)


def _layers_only(modules: frozenset[str], names: list[str]) -> list[str]:
    """The selected names Inspect takes (modules, with a call suffix); graph nodes are left out:
    hooks see module calls only."""
    return [n for n in names if n in modules or split_call_suffix(n)[0] in modules]


class _TraceFailed(Exception):
    pass


NO_INSERT_MARIMO = "marimo cannot add cells from a widget: press Copy, then paste into a new cell"


def _insert_with_ipylab(code: str) -> tuple[bool, str]:
    """Insert a cell below the active one through ipylab's front-end commands, if installed.

    ipylab (optional) needs its JupyterLab extension, present in JupyterLab 4 and Notebook 7.
    A marimo notebook has no way for a widget to add cells: the answer says to copy.
    """
    if in_marimo():
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
