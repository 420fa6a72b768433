"""``surgeon-widgets demo``: the shipped notebook, its copy, the JupyterLab command, a live server.

The shipped demo notebook itself runs top to bottom under nbval (its cells assert).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from support.jupyter import jupyter_env
from support.servers import free_port, http_get, repo_env, started, wait_for

from surgeon_widgets import cli

REPO = Path(__file__).resolve().parents[1]
SHIPPED = resources.files("surgeon_widgets") / "notebooks" / cli.DEMO


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_demo_notebook_is_shipped_and_valid():
    import nbformat

    assert SHIPPED.is_file()
    nb = nbformat.reads(SHIPPED.read_text(encoding="utf-8"), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the demo has code cells"
    assert all(not c.outputs and c.execution_count is None for c in code), "shipped without outputs"
    source = "\n".join(c.source for c in code)
    for needed in (
        "Explorer(",
        "capture_attention(",
        "Extract(",
        "load_transformer()",
        "load_cnn()",
    ):
        assert needed in source


def test_copy_demo_copies_and_never_edits_the_shipped_file(tmp_path):
    before = _digest(SHIPPED)
    target = cli.copy_demo(tmp_path / "work")
    assert target == tmp_path / "work" / cli.DEMO
    assert target.read_bytes() == SHIPPED.read_bytes()

    target.write_text('{"edited": true}')  # the user's edits stay in the copy
    assert cli.copy_demo(tmp_path / "work") == target
    assert target.read_text() == '{"edited": true}'
    assert _digest(SHIPPED) == before


def test_lab_command_flags(tmp_path):
    command = cli.lab_command(tmp_path, 8765, browser=False)
    assert command[:3] == [sys.executable, "-m", "jupyterlab"]
    assert "--no-browser" in command
    assert "--port=8765" in command
    assert "--ip=127.0.0.1" in command
    assert f"--ServerApp.root_dir={tmp_path}" in command
    assert f"--LabApp.default_url=/lab/tree/{cli.DEMO}" in command
    assert "--no-browser" not in cli.lab_command(tmp_path, 8765, browser=True)
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    assert ("--allow-root" in command) == as_root


def test_lab_command_allow_root_only_as_root(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0, raising=False)
    assert "--allow-root" in cli.lab_command(tmp_path, 1, browser=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000, raising=False)
    assert "--allow-root" not in cli.lab_command(tmp_path, 1, browser=False)


def test_main_requires_a_command(capsys):
    with pytest.raises(SystemExit):
        cli.main([])


def test_main_passes_port_folder_and_prints_the_url_with_its_token(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli, "run_server", lambda command, env: calls.append((command, env)))
    monkeypatch.delenv("JUPYTER_TOKEN", raising=False)
    port = free_port()
    assert cli.main(["demo", "--no-browser", "--port", str(port), "--dir", str(tmp_path)]) is None
    assert (tmp_path / cli.DEMO).is_file()
    ((command, env),) = calls
    assert command == cli.lab_command(tmp_path, port, browser=False)
    token = env["JUPYTER_TOKEN"]
    assert len(token) == 48 and token not in " ".join(command)  # not visible to `ps`
    url = f"http://127.0.0.1:{port}/lab/tree/{cli.DEMO}?token={token}"
    assert url in capsys.readouterr().out


def test_demo_without_jupyterlab_says_what_to_install(tmp_path, monkeypatch, capsys):
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda m: None if m == "jupyterlab" else real(m)
    )
    assert cli.main(["demo", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert 'pip install "surgeon-widgets[demo]"' in err and "Traceback" not in err
    assert not (tmp_path / cli.DEMO).exists()


def test_demo_on_a_taken_port_fails_clearly(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert cli.main(["demo", "--port", str(port), "--dir", str(tmp_path)]) == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def test_help_is_plain_text_without_importing_torch():
    code = "import sys; from surgeon_widgets.cli import main\ntry: main(['demo', '--help'])\n"
    code += "except SystemExit: print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.rstrip().endswith("False"), out.stdout + out.stderr
    assert 'pip install "surgeon-widgets[demo]"' in out.stdout and "\x1b" not in out.stdout


@pytest.mark.timeout(180)
def test_demo_command_starts_a_server_on_127_0_0_1(tmp_path):
    port = free_port()
    token = secrets.token_hex(16)
    # JUPYTER_TOKEN: the server's token, so the test can authenticate
    env = jupyter_env(tmp_path / "home", JUPYTER_TOKEN=token)
    argv = ["demo", "--no-browser", "--port", str(port), "--dir", str(tmp_path / "work")]
    script = f"import sys; from surgeon_widgets.cli import main; sys.exit(main({argv!r}))"
    log = tmp_path / "server.log"
    # stopped as a group on leaving: the CLI and its JupyterLab
    with started([sys.executable, "-c", script], log, cwd=tmp_path, env=env) as proc:
        url = f"http://127.0.0.1:{port}/api/status"
        headers = {"Authorization": f"token {token}"}
        status, body = wait_for(
            lambda: http_get(url, headers), proc, log, timeout=120, what="surgeon-widgets demo"
        )
        assert status == 200
        assert "started" in json.loads(body)
        assert (tmp_path / "work" / cli.DEMO).is_file()


@pytest.mark.timeout(300)
def test_shipped_demo_notebook_runs_under_nbval(tmp_path):
    """Execute a copy of the demo (every cell asserts) in a fresh kernel with nbval."""
    notebook = cli.copy_demo(tmp_path / "work")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax", str(notebook),
         "-q", "--rootdir", str(notebook.parent), "-o", "addopts=", "-p", "no:randomly"],
        cwd=notebook.parent, capture_output=True, text=True, timeout=280,
        env=repo_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
