"""Notebooks run headless by nbclient (as ``jupyter nbconvert --execute`` does) in a kernel
that imports this checkout, saved with their outputs and widget state."""

from __future__ import annotations

import copy
import functools
import inspect

import nbformat
from nbclient import NotebookClient
from nbformat.sign import NotebookNotary

from .models import SomeModel
from .notebook_page import notebook
from .servers import repo_env

# two Explorers of SomeModel: `explorer` (layer2, 5 forwards in the next cell), then
# `explorer_b` (layer1, 3 forwards): cells 0 and 2 hold their outputs
SAVED_CELLS = (
    f"""import torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer

{inspect.getsource(SomeModel)}
torch.manual_seed(0)
model = SomeModel()
explorer = Explorer(model, selected=["layer2"], max_rate=0)
explorer""",
    "for _ in range(5):\n    model(torch.randn(64, 5))",
    'model_b = SomeModel()\nexplorer_b = Explorer(model_b, selected=["layer1"], max_rate=0)\n'
    "explorer_b",
    "for _ in range(3):\n    model_b(torch.randn(64, 5))",
)


@functools.cache
def _run(cells: tuple[str, ...], timeout: float) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(notebook(list(cells)))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True)
    client.execute(env=repo_env())
    return nb


def executed(
    cells: tuple[str, ...] = SAVED_CELLS, timeout: float = 180, trust: bool = False
) -> nbformat.NotebookNode:
    """The notebook of ``cells`` after nbclient ran it (widget state stored, as saved); run once
    a session per ``cells`` (a copy each call).

    ``trust``: signed as Jupyter signs a notebook its user saved (the user's notary, which a
    test server shares), so its widget outputs render; unsigned, Jupyter shows the image.
    """
    nb = copy.deepcopy(_run(tuple(cells), timeout))
    if trust:
        NotebookNotary().sign(nb)
    return nb
