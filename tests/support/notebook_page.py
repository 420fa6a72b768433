"""A notebook in a Jupyter page, driven from Python Playwright: write it through the server's
contents API, open it, run its cells, read its outputs."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator

from .browser import page_errors
from .jupyter import notebook_url

# run exactly cell i (whatever a click in an output selected) and wait until it has run
RUN_CELL = """async (i) => {
    const app = window.jupyterapp;
    const notebook = app.shell.currentWidget.content;
    notebook.activeCellIndex = i;
    notebook.deselectAll();
    await app.commands.execute('notebook:run-cell');
}"""
# start cell i and return at once (the test watches the page while the cell runs)
START_CELL = RUN_CELL.replace("async (i)", "(i)").replace("await app", "void app")

# every cell's output text, numbered: says where a test stopped (e.g. a kernel-side error)
OUTPUTS = """() => [...document.querySelectorAll('.jp-Cell')].map((c, i) =>
    `[${i}] ${c.querySelector('.jp-OutputArea')?.innerText.slice(0, 400) ?? ''}`).join('\\n')"""

# [view, layer]: true once view number `view` of the Explorer painted `layer`'s histogram
HISTOGRAM_PAINTED = """([view, layer]) => {
    const root = document.querySelectorAll('.sw-explorer')[view];
    const c = root?.querySelector(
        `[data-layer="${layer}"] canvas[aria-label^="Histogram of ${layer}"]`);
    if (!c || !c.width) return false;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) return true;
    return false;
}"""

# (text): true once the Explorer's hooks list names `text` (Python attached the hook)
HOOKS_LISTED = "(text) => document.querySelector('.sw-hooks')?.textContent.includes(text)"

KERNEL_OF = """(name) => {
    const w = window.jupyterapp?.shell.currentWidget;
    return w?.context?.path === name && !!w.sessionContext?.session?.kernel;
}"""


def known_app_error(app: str, error) -> bool:
    """Notebook 7.6's own page error, thrown on opening any notebook (no widget involved)."""
    stack = (error.stack or "").splitlines()
    return (
        app == "notebook"
        and str(error) == "Cannot read properties of undefined (reading 'schema')"
        and len(stack) > 1
        and "/static/notebook/notebook_core." in stack[1]
    )


def notebook(cells: list[str]) -> dict:
    """An nbformat 4 notebook of code cells with these sources, never run."""
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell{i}",
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def put_notebook(base: str, name: str, cells: list[str] | dict) -> None:
    """Write a notebook (code cell sources, or a whole notebook) through the contents API."""
    content = cells if isinstance(cells, dict) else notebook(cells)
    body = json.dumps({"type": "notebook", "content": content}).encode()
    request = urllib.request.Request(f"{base}/api/contents/{name}", body, method="PUT")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        if response.status not in (200, 201):
            raise RuntimeError(f"PUT {name}: HTTP {response.status}")


def open_notebook(page, base: str, app: str, name: str, timeout_ms: float = 60_000) -> None:
    """Open notebook `name` and wait until it is the current widget and has a kernel.

    The servers live for the whole session: JupyterLab's workspace would restore the notebooks
    of earlier tests (``?reset`` drops it), and the path check makes sure cells run in `name`.
    """
    url = notebook_url(base, app, name) + ("?reset" if app == "lab" else "")
    page.goto(url, timeout=timeout_ms)
    page.wait_for_function(KERNEL_OF, arg=name, timeout=timeout_ms)
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.ready")


@contextlib.contextmanager
def notebook_page(
    browser,
    base: str,
    app: str,
    name: str,
    cells: list[str] | dict | None,
    *,
    viewport: tuple[int, int] = (1400, 1000),
) -> Iterator[tuple[object, list[str]]]:
    """Write notebook ``name`` with ``cells`` (or a whole notebook; ``None``: the saved file as
    it is) to the server at ``base``, open it in ``app`` ("lab" or "notebook") in a new context
    of ``browser`` and yield ``(page, errors)``:
    ``errors`` collects the page's uncaught errors but :func:`known_app_error`.

    Every wait has a 60 s default (CI machines can be busy). An exception raised inside gets
    the notebook's outputs added (where it stopped: a kernel error, an import failure).
    """
    if cells is not None:
        put_notebook(base, name, cells)
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    page = context.new_page()
    errors = page_errors(page, ignore=lambda error: known_app_error(app, error))
    page.set_default_timeout(60_000)
    try:
        open_notebook(page, base, app, name)
        yield page, errors
    except Exception as e:
        raise AssertionError(f"{e}\n--- notebook outputs ---\n{page.evaluate(OUTPUTS)}") from e
    finally:
        context.close()
