"""``Explorer.from_run(path)``: a recorded run's tree, histograms and history, followed live.

The same front end as the live Explorer (same traits and ``stats`` / ``snapshot`` messages of
:mod:`.wire`), fed from a run folder instead of hooks: a background thread polls the
folder (``poll`` seconds), sends each newly recorded step, and keeps a status line saying
running / finished / failed and the last step. A finished run is replayed whole on display.

>>> import tempfile, torch
>>> from torch import nn
>>> from surgeon_widgets import Recorder
>>> model, folder = nn.Sequential(nn.Linear(4, 3)), tempfile.mkdtemp()
>>> with Recorder(model, folder, layers=["0"], every=1) as rec:
...     model(torch.ones(2, 4)).sum().backward(); rec.step()
>>> view = RunView(folder)
>>> view.wait(timeout=5)
True
>>> view.state, view.last_step, list(view.stats("0"))
('finished', 0, ['0/output', '0/grad_output'])
>>> view.close()
"""

from __future__ import annotations

import bisect
import html
import threading
import time
from pathlib import Path
from typing import Any

import ipywidgets
import traitlets as t
from matplotlib.figure import Figure

from ..engine.naming import UnknownNameError
from ..engine.series import Series
from ..record import Run, read_run
from .front_end import FrontEnd
from .history import Record
from .views.errors import ErrorList
from .views.figures import history_figure, static_png, with_png
from .wire import fit_budget, snapshot_message, stats_message

__all__ = ["RunView"]

HISTORY = 256  # records per key sent to the view (the live Explorer keeps as many)
WIRE_KIND = {"parameter": "weight", "parameter_gradient": "weight grad"}  # recorder -> wire kind
# why a layer's "parameters" box is off in a recorded run, by what wrote the run (its manifest's
# "source"): a run of an Explorer(run_dir=) was never a Recorder's
NO_PARAMS = "no parameters recorded for this layer in this run (Recorder(params=True) records them)"
NO_PARAMS_EXPLORER = (
    "no parameters recorded for this layer in this run (the Explorer that wrote it records them "
    "while that layer's 'parameters' box is ticked, or with Explorer(params=True))"
)
WRITERS = {"Explorer": "written by an Explorer (run_dir=)"}  # else: a Recorder's run


class RunExplorerView(FrontEnd):
    """The Explorer's front end with the traits it reads; fed by :class:`RunView`."""

    max_rate = t.Float(0.0).tag(sync=True)
    errors = t.List(t.Dict()).tag(sync=True)  # ErrorEntry dicts, as the live Explorer's
    run = t.Dict().tag(sync=True)  # {layers: recorded}: the front end shows a run (PROTOCOL.md)
    param_layers = t.List(t.Unicode()).tag(sync=True)  # shown parameters: the view's boxes
    param_notes = t.Dict().tag(sync=True)  # layer -> why its "parameters" box is off
    closed = t.Bool(False).tag(sync=True)


def records(series: Series, since: int = -1, limit: int = HISTORY) -> list[Record]:
    """The last ``limit`` :class:`Record`s of ``series`` after step ``since`` (the wire form).

    Only those are built: a recorded series of 10k steps reads 256 histograms, not 10k.

    Where a run does not record the model's train / eval mode, ``training`` is ``None`` (not sent).
    Recorded parameters (kind ``parameter``) and their gradients go out as the live Explorer's
    ``weight`` / ``weight grad`` items, so the front end orders and colours them the same.
    """
    kind = WIRE_KIND.get(series.kind, series.kind)
    start = max(bisect.bisect_right(series.steps, since), len(series.steps) - limit)
    known = len(series.training) == len(series.steps)
    modes = list(series.training[start:]) if known else [None] * (len(series.steps) - start)
    return [
        Record(series.key, series.layer, series.leaf, kind, step, stats, training=mode)
        for step, stats, mode in zip(series.steps[start:], series.values[start:], modes)
    ]


class RunView(ipywidgets.VBox):
    """A run folder shown as an Explorer: status line, tree, histograms, history; follows it live.

    Args:
        path: the folder a :class:`~surgeon_widgets.Recorder` writes.
        selected: layers shown at first (default: every recorded layer); each must be recorded.
        poll: seconds between reads of the folder while the run is running.
    """

    def __init__(
        self, path: str | Path, selected: list[str] | None = None, poll: float = 1.0
    ) -> None:
        self.run: Run = read_run(path)
        self.poll = poll
        layers = self.run.layers
        for name in selected or []:
            if name not in layers:  # the view can only show what was recorded
                shown = ", ".join(map(repr, layers[:12])) + (", ..." if len(layers) > 12 else "")
                raise UnknownNameError(name, layers, "recorded layer", f"recorded: {shown}")
        shapes = {}
        for layer in layers:
            for s in self.run.stats(layer).values():
                if s.kind == "activation":
                    shapes[layer] = {"shape": list(s.latest.shape), "dtype": s.latest.dtype}
        weighed = sorted({k["layer"] for k in self.run.keys if k["kind"] == "parameter"})
        self.view = RunExplorerView(
            rows=self.run.rows, selected=selected or layers, shapes=shapes,
            gradients=bool(self.run.manifest.get("gradients")), run={"layers": layers},
            param_layers=weighed,
            param_notes={n: self._no_params for n in layers if n not in weighed},
        )  # fmt: skip
        self.status_line = ipywidgets.HTML()
        self._errors = ErrorList(lambda entries: setattr(self.view, "errors", entries))
        self._sent: dict[str, int] = {}  # key -> last step sent to the view
        self._stop = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self.view.on_msg(self._on_msg)
        self._show_status()
        super().__init__([self.status_line, self.view])
        self._thread = threading.Thread(target=self._follow, name="surgeon-run-view", daemon=True)
        self._thread.start()

    # -- Python API (as the live Explorer's) ------------------------------------------------

    @property
    def state(self) -> str:
        """``running``, ``finished``, ``failed``, ``stopped`` or ``lost`` (as ``Run.state``)."""
        return self.run.state

    @property
    def last_step(self) -> int | None:
        """The last recorded step read so far."""
        steps = self.run.steps
        return steps[-1] if steps else None

    @property
    def layers(self) -> list[str]:
        return self.run.layers

    def stats(self, name: str) -> dict[str, Series]:
        """``{key: Series}`` of a recorded layer, as ``Explorer.stats`` (all records read yet)."""
        with self._lock:
            return self.run.stats(name)

    def figure(self, name: str) -> Figure:
        """A matplotlib Figure of ``name``'s histogram history and latest histogram."""
        return history_figure(self.stats(name), name)

    def refresh(self) -> int:
        """Read the folder now and send what is new; return how many records were new."""
        with self._lock:
            new = self.run.refresh()
        self._send_new()
        self._show_status()
        return new

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run is no longer running and everything is read (or ``timeout``)."""
        return self._done.wait(timeout)

    def close(self) -> None:
        """Stop following; the view stays as "Run view closed". A second ``close()`` closes
        the widgets (as ``Explorer.close``)."""
        if hasattr(self, "_stop") and not self.view.closed:
            self._stop.set()
            self.view.closed = True
            self._show_status()
            return
        if hasattr(self, "_stop"):  # ipywidgets also closes a RunView whose __init__ raised
            self.view.close()
            self.status_line.close()
        super().close()

    def __repr__(self) -> str:
        return f"RunView({str(self.run.path)!r}, {self.state}, last step {self.last_step})"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict | tuple | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        layers = {n: {k: s.tail(HISTORY) for k, s in self.stats(n).items()}
                  for n in self.view.selected if n in self.run.layers}  # as much as the view shows
        return with_png(bundle, static_png(layers, title=f"recorded run {self.run.path.name}"))

    # -- following --------------------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.is_set():
            state = self.state  # read before the records: all records of a finished run are in
            try:
                self.refresh()
            except Exception as error:  # shown in the view (repeats counted); keep following
                self._errors.add(f"reading the run: {error}", error=error)
            if state != "running":
                self._done.set()
                return
            self._stop.wait(self.poll)

    def _series(self) -> list[Series]:
        with self._lock:
            return [s for layer in self.run.layers for s in self.run.stats(layer).values()]

    def _send_new(self) -> None:
        by_step: dict[int, list[Record]] = {}
        for series in self._series():
            new = records(series, self._sent.get(series.key, -1))
            for r in new:
                by_step.setdefault(r.step, []).append(r)
            if new:
                self._sent[series.key] = new[-1].step
        for step in sorted(by_step)[-HISTORY:]:
            self.view.send(*stats_message(fit_budget(by_step[step])))

    def _on_msg(self, widget: Any, content: Any, buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "clear_errors":
            self._errors.clear()  # the error list's Clear button (PROTOCOL.md)
        if isinstance(content, dict) and content.get("type") == "hello":
            history = {s.key: records(s) for s in self._series()}
            latest = fit_budget([recs[-1] for recs in history.values() if recs])
            self.view.send(*snapshot_message(latest, history))

    @property
    def _no_params(self) -> str:
        explorer = self.run.manifest.get("source") == "Explorer"
        return NO_PARAMS_EXPLORER if explorer else NO_PARAMS

    def _show_status(self) -> None:
        status = self.run.status
        state = self.run.state
        # finished reads in the theme's own text colour (light and dark)
        colour = {"running": "#1a7f37", "failed": "#cf222e", "lost": "#cf222e"}.get(
            state, "var(--jp-ui-font-color1, inherit)" if state == "finished" else "#9a6700"
        )
        # the steps as read_run reads them, not status.json's counter (which runs one ahead)
        last, count = self.last_step, len(self.run.steps)
        text = (f"<b style='color:{colour}'>{html.escape(state)}</b> · last recorded step "
                f"{last if last is not None else '-'} · {count} recorded step{'s' * (count != 1)}"
                f" · {len(self.run.layers)} layers · {self.run.world_size} rank(s) · "
                f"{WRITERS.get(str(self.run.manifest.get('source')), 'written by a Recorder')} · "
                f"<code>{html.escape(str(self.run.path))}</code>"
        )  # fmt: skip
        if state == "stopped" and status.get("signal"):
            text += f" · stopped by {html.escape(str(status['signal']))}"
        if self.view.closed:
            text = f"closed, no longer followed · {text}"
        if status.get("error"):
            text += f"<br><span style='color:#cf222e'>{html.escape(str(status['error']))}</span>"
        age = time.time() - float(status.get("updated") or time.time())
        if state == "running" and age > 60:
            text += f" · no heartbeat for {age:.0f} s"
        self.status_line.value = f"<div class='sw-run-status'>{text}</div>"
        failed = str(status.get("error") or "")
        if failed and all(e.key != failed for e in self._errors.entries):  # once, not per poll
            self._errors.add(failed)
