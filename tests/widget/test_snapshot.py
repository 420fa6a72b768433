"""What a saved notebook keeps of an Explorer: the static picture of the selected layers and
the bounded ``snapshot`` in the widget state (``widget/snapshot.py``,
``widget/runtime/still_output.py``)."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import types
import weakref

import nbformat
import numpy as np
import pytest
import torch
from nbconvert import HTMLExporter
from PIL import Image
from support.executed import executed
from support.models import TinyAttention

from surgeon_widgets.engine.attention import attention_layers
from surgeon_widgets.engine.stats import tensor_stats
from surgeon_widgets.widget.history import History, Record
from surgeon_widgets.widget.runtime.still_output import StillOutput
from surgeon_widgets.widget.snapshot import HISTORY_STEPS, SNAPSHOT_BUDGET, state_size
from surgeon_widgets.widget.still_display import MARKER, STYLE
from surgeon_widgets.widget.views.figures import STILL_DPI, STILL_SIZE
from surgeon_widgets.widget.wire import AttentionMap

BAR = (0x4C, 0x72, 0xB0)  # the histogram bars' colour


def _picture(output: dict) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(output["data"]["image/png"]))))


def _bars(pixels: np.ndarray) -> float:
    """Share of the picture drawn in the bars' colour (text is black on white)."""
    return float((np.abs(pixels[..., :3].astype(int) - BAR).sum(-1) < 30).mean())


def test_an_executed_notebook_keeps_the_plot_of_the_selection_and_the_snapshot():
    nb = executed()  # support.executed.SAVED_CELLS
    for cell in (nb.cells[0], nb.cells[2]):  # the widget, the marker, the picture
        widget, marker, picture = cell.outputs
        assert "application/vnd.jupyter.widget-view+json" in widget["data"]
        assert "image/png" not in widget["data"] and "image/png" not in marker["data"]  # once
        assert MARKER in marker["data"]["text/html"] and "<style>" in marker["data"]["text/html"]
        assert picture["output_type"] == "display_data" and "display_id" not in picture
    out_a, out_b = nb.cells[0].outputs[2], nb.cells[2].outputs[2]
    for out, layer, step in ((out_a, "layer2", 4), (out_b, "layer1", 2)):
        assert out["data"]["text/plain"] == (
            f"Explorer(SomeModel, 3 layers, selected=[{layer!r}], last step {step})"
        )  # shown with nothing recorded; updated at each step and at the cell's end
        pixels = _picture(out)
        width, height = STILL_SIZE
        assert pixels.shape[:2] == (round((height + 0.4) * STILL_DPI), round(width * STILL_DPI))
        assert _bars(pixels) > 0.05, "a histogram, not a text list"
    assert not np.array_equal(_picture(out_a), _picture(out_b))  # each shows its own layer
    # nbconvert --to html (offline: nothing loaded) shows the last picture, with widget state
    # saved and without (JupyterLab's default), and the style that hides the widget's output
    bare = nbformat.from_dict({**nb, "metadata": {k: v for k, v in nb.metadata.items()
                                                  if k != "widgets"}})  # fmt: skip
    for saved in (nb, bare):
        html, _ = HTMLExporter().from_notebook_node(saved)
        flat = html.replace("\n", "")
        for out in (out_a, out_b):
            assert f'src="data:image/png;base64,{out["data"]["image/png"]}' in flat
        assert flat.count(STYLE) == 2
        assert ("application/vnd.jupyter.widget-state+json" in html) == (saved is nb)

    states = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    snaps = {s["state"]["selected"][0]: s["state"]["snapshot"]
             for s in states.values() if "snapshot" in s["state"]}  # fmt: skip
    snap = snaps["layer2"]
    assert snap["step"] == 4 and snap["training"] is True and snap["left_out"] == 0
    (latest,) = snap["stats"]["items"]
    assert latest["key"] == "layer2/output" and latest["shape"] == [64, 2]
    assert [r["step"] for r in snap["stats"]["history"]["layer2/output"]] == [0, 1, 2, 3]
    counts = np.frombuffer(base64.b64decode(snap["buffers"][latest["hist"]["buffer"]]), "<f4")
    assert counts.sum() == 128  # every value of the last forward's [64, 2] output
    assert state_size(snap) <= SNAPSHOT_BUDGET and snaps["layer1"]["step"] == 2


def _history(keys: int, steps: int) -> History:
    history = History()
    for step in range(steps):
        for k in range(keys):
            stats = tensor_stats(torch.randn(200) * (k + 1))
            history.add(Record(f"l{k}/output", f"l{k}", "output", "activation", step, stats))
    return history


def test_the_snapshot_stays_within_its_bound():
    from surgeon_widgets.widget.snapshot import snapshot_state

    model = TinyAttention()
    (layer,) = attention_layers(model)[:1]
    pattern = torch.softmax(torch.randn(2, 4, 300, 300), -1)
    maps = [AttentionMap(layer, pattern, batch=1, step=7, training=False)]

    one = snapshot_state(_history(1, 256), ["l0"], maps)
    assert state_size(one) <= SNAPSHOT_BUDGET
    steps = [r["step"] for r in one["stats"]["history"]["l0/output"]]
    assert len(steps) == HISTORY_STEPS and steps[0] == 0 and one["stats"]["items"][0]["step"] == 255
    thumb, *heads = one["attention"]["items"]
    assert thumb["shape"] == [32, 32] and thumb["full_shape"] == [300, 300] and thumb["batch"] == 1
    assert [h["head"] for h in heads] == [0, 1, 2, 3] and heads[0]["shape"] == [16, 16]
    lo, hi = pattern[1].min().item(), pattern[1].max().item()  # the layer's colour range
    assert all(i["range"] == pytest.approx([lo, hi]) for i in [thumb, *heads])

    many = snapshot_state(_history(100, 3), [f"l{k}" for k in range(100)], maps)
    assert state_size(many) <= SNAPSHOT_BUDGET
    kept = [i["key"] for i in many["stats"]["items"]]
    assert many["left_out"] == 100 - len(kept) > 0
    assert kept == [f"l{k}/output" for k in range(len(kept))]  # the first ones, in order
    assert many["attention"]["items"] == []  # the thumbnails go before any key

    tight = snapshot_state(_history(2, 50), ["l0", "l1"], [], budget=100)
    assert state_size(tight) <= 100 and tight["left_out"] == 2
    assert snapshot_state(_history(1, 3), ["other"], maps) == {}  # nothing of those layers


def test_renders_run_off_the_model_thread_at_most_every_interval():
    now = [0.0]
    threads: list[str] = []
    release = threading.Event()

    def render() -> float:
        threads.append(threading.current_thread().name)
        release.wait(10)
        return now[0]

    published: list[float] = []
    out = StillOutput(render, lambda r: published.append(r), interval=5.0, clock=lambda: now[0])
    out.changed()  # starts a render on a worker
    out.changed()  # within the interval, one is running: nothing more
    release.set()
    out._worker and out._worker.join(10)
    assert threads == ["surgeon-widgets still"] and published == []  # not published off-thread
    now[0] = 1.0
    out.changed()  # the finished render is published here, on the model's thread
    assert published == [0.0] and len(threads) == 1
    out.flush()  # what changed since: rendered and published now (a cell's end)
    assert published == [0.0, 1.0] and threads[-1] == threading.current_thread().name
    out.flush()
    assert published == [0.0, 1.0]  # nothing changed
    now[0] = 6.0
    out.changed()
    out._worker and out._worker.join(10)
    assert len(threads) == 3


def test_the_render_thread_is_a_daemon_joined_with_a_bound_at_exit():
    from surgeon_widgets.widget.runtime import still_output

    release, finished = threading.Event(), []

    def render() -> None:
        release.wait(10)
        finished.append(True)

    out = StillOutput(render, lambda r: None, interval=0.0)
    out.changed()
    worker = out._worker
    assert worker.daemon and worker in still_output._workers  # exit never waits unbounded
    start = time.monotonic()
    still_output._join_at_exit(bound=0.2)  # a render that hangs costs exit the bound only
    assert 0.15 < time.monotonic() - start < 5 and worker.is_alive()
    release.set()
    still_output._join_at_exit()  # a render that ends is waited for
    assert finished == [True] and not worker.is_alive() and worker not in still_output._workers
    out.close()


def test_the_static_picture_follows_the_selection_in_process(make):
    from support.models import SomeModel

    model = SomeModel()
    ex = make(model, max_rate=0)
    empty = ex._repr_mimebundle_()[0]  # (data, metadata)
    assert empty["text/plain"].endswith("selected=[], nothing recorded yet)")
    assert ex.snapshot == {}
    ex.select(["layer1", "layer2"])
    for _ in range(3):
        model(torch.randn(8, 5))
    data = ex._repr_mimebundle_()[0]
    selection = "selected=['layer1', 'layer2']"
    assert data["text/plain"] == f"Explorer(SomeModel, 3 layers, {selection}, last step 2)"
    assert "application/vnd.jupyter.widget-view+json" in data
    assert [i["key"] for i in ex.snapshot["stats"]["items"]] == ["layer1/output", "layer2/output"]
    assert _bars(np.asarray(Image.open(io.BytesIO(base64.b64decode(data["image/png"]))))) > 0.02
    json.dumps(ex.snapshot)  # JSON as it is: the widget state holds it


@pytest.mark.parametrize("modules", [{}, {"IPython": None}])
def test_no_ipython_shows_nothing_and_never_ends_a_cell(modules):
    from surgeon_widgets.widget.runtime import notebook

    assert notebook.publish({"text/plain": "x"}, "id", modules=modules) is False
    notebook.on_cell_end(lambda: None, modules=modules)()  # an undo that does nothing


def test_a_bound_method_at_the_cells_end_is_held_weakly():
    """IPython's events must not keep a closed widget alive: a method's object can be collected,
    and the cell's end then calls nothing."""
    import gc

    from IPython.core.events import EventManager, available_events

    from surgeon_widgets.widget.runtime import notebook

    class Shell:
        events = EventManager(None, available_events)

    class Owner:
        ended = 0

        def cell_ended(self) -> None:
            Owner.ended += 1

    owner = Owner()
    ipython = types.SimpleNamespace(get_ipython=Shell)
    undo = notebook.on_cell_end(owner.cell_ended, modules={"IPython": ipython})
    Shell.events.trigger("post_execute")
    assert Owner.ended == 1
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is None
    Shell.events.trigger("post_execute")
    assert Owner.ended == 1
    undo()
    assert Shell.events.callbacks["post_execute"] == []


def test_a_slow_render_is_spaced_out_to_its_share_of_the_wall_time():
    from surgeon_widgets.widget.runtime.still_output import COST_SHARE

    now = [0.0]
    renders: list[float] = []

    def render() -> None:
        renders.append(now[0])
        time.sleep(0.05)  # 50 ms: at most one every 0.05 / COST_SHARE seconds

    out = StillOutput(render, lambda r: None, interval=1.0, clock=lambda: now[0])
    out.changed()
    out._worker and out._worker.join(10)
    assert out.cost >= 0.05
    now[0] = 0.9 * out.cost / COST_SHARE  # past the interval, not past the cost's share
    out.changed()
    assert len(renders) == 1
    now[0] = 1.1 * out.cost / COST_SHARE
    out.changed()
    out._worker and out._worker.join(10)
    assert len(renders) == 2


def test_a_shown_attention_layer_is_in_the_picture_and_the_snapshot(make):
    model = TinyAttention(causal=True).eval()
    ex = make(model, max_rate=0)
    ex.select(["attn"])
    model(torch.randn(2, 6, 4))
    data = ex._repr_mimebundle_()[0]
    thumb, *heads = ex.snapshot["attention"]["items"]
    assert thumb["layer"] == "attn" and thumb["full_shape"] == [6, 6] and thumb["shape"] == [6, 6]
    assert len(heads) == thumb["heads"] == ex._live.attention.latest("attn").shape[1]
    assert all(h["shape"] == [6, 6] for h in heads)  # every head, unpooled: the lines view
    causal = np.frombuffer(base64.b64decode(ex.snapshot["buffers"][thumb["buffer"]]), np.uint8)
    assert causal.reshape(6, 6)[0, 1:].tolist() == [0] * 5  # the first query sees itself only
    pixels = _picture({"data": data})
    width, height = STILL_SIZE  # the histogram, then the map: two plots a row
    assert pixels.shape[:2] == (round((height + 0.4) * STILL_DPI), round(2 * width * STILL_DPI))
    right = pixels[:, pixels.shape[1] // 2 :, :3].astype(int)
    yellow = (right[..., 0] > 200) & (right[..., 1] > 200) & (right[..., 2] < 100)  # viridis' top
    assert yellow.mean() > 0.005, "the attention map is drawn on the right"


def test_the_picture_follows_the_data_also_while_a_live_view_draws(make):
    import IPython.display  # noqa: F401 (the door reads it from sys.modules)
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from support.models import SomeModel

    shell = InteractiveShell.instance()
    try:
        model = SomeModel()
        ex = make(model, selected=["layer2"], max_rate=0)
        ex._still.threads = False  # render at each change: the order of events is the test
        with capture_output() as shown:
            ex._ipython_display_()
            model(torch.randn(4, 5))
            model(torch.randn(4, 5))
        widget, marker, picture, *updates = shown.outputs
        assert "application/vnd.jupyter.widget-view+json" in widget.data
        assert widget.data["text/plain"] == "Explorer(SomeModel, 3 layers)"
        assert MARKER in marker.data["text/html"] and not widget.update and not marker.update
        ids = {o.transient["display_id"] for o in (widget, marker, picture)}
        assert picture.transient == {"display_id": ex._still.display_id} and len(ids) == 3
        assert picture.data["text/plain"].endswith("selected=['layer2'], nothing recorded yet)")
        assert [(o.update, o.transient) for o in updates] == [(True, picture.transient)] * 2
        assert updates[-1].data["text/plain"].endswith("selected=['layer2'], last step 1)")
        assert not np.array_equal(
            _picture({"data": picture.data}), _picture({"data": updates[-1].data})
        )
        ex._on_msg(ex, {"type": "hello"}, [])  # a live view drew it: the widget's output stays
        ex._still.threads = True  # as in a kernel: renders off the model's thread
        with capture_output() as later:
            model(torch.randn(4, 5))
            shell.events.trigger("post_execute")  # the cell's end: the picture is current
        assert [(o.update, o.transient) for o in later.outputs][-1:] == [(True, picture.transient)]
        assert later.outputs[-1].data["text/plain"].endswith("last step 2)")
        assert ex.snapshot["step"] == 2  # its state follows too
    finally:
        InteractiveShell.clear_instance()
