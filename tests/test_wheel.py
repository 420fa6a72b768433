"""The built wheel in a fresh venv: a plain install, ``--help``, the demo's missing-JupyterLab
message, then the ``demo`` extra and a live server with the printed token URL.

To stay cheap (no torch download, no network), the fresh venv (no system site-packages) sees
only the installed distributions each requirement set needs: their files are linked from this
environment into a folder the venv reads through a ``.pth``. pip then installs the wheel with
``--no-index``, so it must find every declared requirement satisfied and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from support.servers import free_port, http_get, started, wait_for

from surgeon_widgets import cli

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(420)


def closure(requirements: list[str]) -> set[str]:
    """Names of the installed distributions ``requirements`` need, transitively."""
    seen: set[str] = set()
    expanded: set[tuple[str, str]] = set()  # (name, extra); "" = the plain requirements
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        wanted = {(name, e) for e in ("", *req.extras)}
        if wanted <= expanded:
            continue
        expanded |= wanted
        dist = metadata.distribution(req.name)  # raises if this environment lacks it
        seen.add(name)
        for line in dist.requires or []:
            sub = Requirement(line)
            if (
                sub.marker is None
                or sub.marker.evaluate({"extra": ""})
                or any(sub.marker.evaluate({"extra": e}) for e in req.extras)
            ):
                todo.append(sub)
    return seen


def link(names: set[str], folder: Path, site: Path) -> None:
    """Link every top-level file and folder of those distributions into ``folder``, and their
    data files (``share/``: JupyterLab's assets, widget extensions) into the venv at ``site``."""
    folder.mkdir(exist_ok=True)
    for name in names:
        dist = metadata.distribution(name)
        for f in dist.files or ():
            parts = Path(str(f)).parts
            if parts[0] == ".." and "share" in parts:
                target = site / Path(str(f))
                target = target.parent.resolve() / target.name
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.symlink_to(Path(str(dist.locate_file(f))).resolve())
        for top in {Path(str(f)).parts[0] for f in dist.files or ()}:
            if top == ".." or top.endswith(".pth") or top == "__pycache__":
                continue
            target = folder / top
            if not target.exists():
                target.symlink_to(Path(str(dist.locate_file(top))))


def run(*command, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # build from a copy of the tracked files: no stale build/ folder, nothing written to the repo
    source = tmp_path_factory.mktemp("source")
    tracked = run("git", "ls-files", "-z", cwd=REPO).stdout.split("\0")
    for name in filter(None, tracked):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    build = run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "-w", str(out), str(source),
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (path,) = out.glob("surgeon_widgets-*.whl")
    return path


def test_wheel_in_a_fresh_venv_demo_needs_the_extra_then_serves(wheel, tmp_path):
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("surgeon_widgets/static/explorer.js", "surgeon_widgets/notebooks/demo.ipynb"):
        assert shipped in names
    # the recorder's C loop, compiled when the wheel was built (setup.py), beside its loader
    assert [n for n in names if n.startswith("surgeon_widgets/record/_accumulate.")], names

    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", "--without-pip", str(venv)).returncode == 0
    python = venv / "bin" / "python"
    site = Path(run(str(python), "-c", "import site; print(site.getsitepackages()[0])")
                .stdout.strip())  # fmt: skip
    shared = tmp_path / "shared"
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    lines = zipfile.ZipFile(wheel).read(meta).decode().splitlines()
    base = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    plain = [r for r in base if "extra ==" not in r]
    link(closure(["pip", *plain]), shared, site)
    (site / "shared.pth").write_text(str(shared) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "jupyter")
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "data")

    pip = [str(python), "-m", "pip", "install", "--no-index", "-q"]
    installed = run(*pip, str(wheel), env=env)  # --no-index: every dependency must be there
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    script = venv / "bin" / "surgeon-widgets"

    start = time.perf_counter()
    helped = run(str(script), "--help", env=env)
    elapsed = time.perf_counter() - start
    assert helped.returncode == 0 and "demo" in helped.stdout, helped.stderr
    print(f"surgeon-widgets --help answered in {elapsed:.2f} s")
    no_torch = run(str(python), "-c", "import sys; from surgeon_widgets.cli import parser; "
                   "parser(); print('torch' in sys.modules)", env=env)  # fmt: skip
    assert no_torch.stdout.strip() == "False", no_torch.stderr

    demo = run(str(script), "demo", "--no-browser", "--dir", str(tmp_path / "work"), env=env)
    assert demo.returncode == 2, demo.stdout + demo.stderr
    assert 'pip install "surgeon-widgets[demo]"' in demo.stderr
    assert "Traceback" not in demo.stderr + demo.stdout
    imported = run(str(python), "-c", "from surgeon_widgets import Explorer, Extract", env=env)
    assert imported.returncode == 0, imported.stderr[-2000:]
    check = "import surgeon_widgets.record.accumulate_native as c; print(c.LIBRARY is not None)"
    loaded = run(str(python), "-W", "error::RuntimeWarning", "-c", check, env=env)
    assert loaded.stdout.strip() == "True", loaded.stderr[-2000:]  # loaded, its sizes agree

    # the demo extra, as the README says (its requirements linked in the same way)
    extra = [r.split(";")[0] for r in base if 'extra == "demo"' in r]
    link(closure(extra), shared, site)
    with_extra = run(*pip, f"{wheel}[demo]", env=env)
    assert with_extra.returncode == 0, with_extra.stdout[-2000:] + with_extra.stderr[-2000:]

    port = free_port()
    work = tmp_path / "work"
    log = tmp_path / "server.log"
    command = [str(script), "demo", "--no-browser", "--port", str(port), "--dir", str(work)]
    with started(command, log, cwd=tmp_path, env=env) as proc:

        def printed_url():
            found = re.search(r"open (http://\S+)", log.read_text())
            return found.group(1) if found else None

        url = wait_for(printed_url, proc, log, timeout=120, what="surgeon-widgets demo")
        assert url.startswith(f"http://127.0.0.1:{port}/lab/tree/{cli.DEMO}?token=")
        token = url.rsplit("=", 1)[1]
        contents = f"http://127.0.0.1:{port}/api/contents/{cli.DEMO}?token={token}"
        _, body = wait_for(lambda: http_get(contents), proc, log, timeout=120, what="the lab")
        notebook = json.loads(body)
        shipped = json.loads((REPO / "surgeon_widgets/notebooks" / cli.DEMO).read_text())

        def sources(cells):  # the API joins each source into one string
            return [(c["cell_type"], "".join(c["source"])) for c in cells]

        assert notebook["type"] == "notebook"
        assert sources(notebook["content"]["cells"]) == sources(shipped["cells"])
        assert (work / cli.DEMO).read_bytes() == (
            REPO / "surgeon_widgets/notebooks" / cli.DEMO
        ).read_bytes()
        with urllib.request.urlopen(url, timeout=10) as r:  # the printed URL opens the lab
            assert r.status == 200 and "JupyterLab" in r.read().decode()
