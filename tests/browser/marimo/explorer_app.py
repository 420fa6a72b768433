# A marimo notebook for tests/browser/test_marimo.py: the Explorer through mo.ui.anywidget.
import marimo

app = marimo.App()


@app.cell
def _():
    import marimo as mo
    import torch
    from torch import nn

    from surgeon_widgets import Explorer

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    ex = Explorer(model, selected=["0"], max_rate=0)
    ex.node_out = ["0"]  # a cut, so the code panel has code to insert
    view = mo.ui.anywidget(ex)
    view  # noqa: B018 (marimo shows the last expression)
    return mo, model, torch


@app.cell
def _(mo):
    run = mo.ui.run_button(label="train steps")
    run  # noqa: B018
    return (run,)


@app.cell
def _(model, run, torch):
    if run.value:
        for _ in range(3):
            model(torch.randn(4, 8))
    return


if __name__ == "__main__":
    app.run()
