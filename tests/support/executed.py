"""Notebooks run headless by nbclient (as ``jupyter nbconvert --execute`` does) in a kernel
that imports this checkout, saved with their outputs and widget state."""

from __future__ import annotations

import inspect

import nbformat
from nbclient import NotebookClient
from nbformat.sign import NotebookNotary

from .models import SomeModel
from .notebook_page import notebook
from .servers import repo_env

# SomeModel, an Explorer of it with `selected` shown, then `forwards` forwards in the next cell
EXPLORER_CELLS = [
    f"""import torch
from torch import nn
from surgeon_widgets.widget.explorer import Explorer

{inspect.getsource(SomeModel)}
torch.manual_seed(0)
model = SomeModel()
explorer = Explorer(model, selected={{selected!r}}, max_rate=0)
explorer""",
    """for _ in range({forwards}):
    model(torch.randn(64, 5))""",
]


def explorer_notebook(selected: list[str], forwards: int = 5) -> list[str]:
    """The cells of :data:`EXPLORER_CELLS` for this selection and number of forwards."""
    return [c.replace("{selected!r}", repr(selected)).replace("{forwards}", str(forwards))
            for c in EXPLORER_CELLS]  # fmt: skip


def executed(cells: list[str], timeout: float = 180, trust: bool = False) -> nbformat.NotebookNode:
    """The notebook of ``cells`` after nbclient ran it (widget state stored, as saved).

    ``trust``: signed as Jupyter signs a notebook its user saved (the user's notary, which a
    test server shares), so its widget outputs render; unsigned, Jupyter shows the image.
    """
    nb = nbformat.from_dict(notebook(cells))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True)
    client.execute(env=repo_env())
    if trust:
        NotebookNotary().sign(nb)
    return nb
