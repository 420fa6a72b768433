"""``surgeon-widgets demo``: the shipped notebook, its copy, the JupyterLab command, a live server.

The shipped demo notebook itself runs top to bottom under nbval (its cells assert).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib import resources
from pathlib import Path

import pytest
from support.jupyter import jupyter_env
from support.servers import (
    alive,
    descendants,
    free_port,
    http_get,
    listening,
    log_tail,
    repo_env,
    started,
    wait_for,
    wait_until,
)

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
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_demo_command_starts_a_server_on_127_0_0_1_that_stops_with_it(tmp_path, stop):
    port = free_port()
    token = secrets.token_hex(16)
    # JUPYTER_TOKEN: the server's token, so the test can authenticate
    env = jupyter_env(tmp_path / "home", JUPYTER_TOKEN=token)
    argv = ["demo", "--no-browser", "--port", str(port), "--dir", str(tmp_path / "work")]
    script = f"import sys; from surgeon_widgets.cli import main; sys.exit(main({argv!r}))"
    log = tmp_path / "server.log"
    # stopped as a group on leaving, should the signal below not stop both
    with started([sys.executable, "-c", script], log, cwd=tmp_path, env=env) as proc:
        url = f"http://127.0.0.1:{port}/api/status"
        headers = {"Authorization": f"token {token}"}
        status, body = wait_for(
            lambda: http_get(url, headers), proc, log, timeout=120, what="surgeon-widgets demo"
        )
        assert status == 200
        assert "started" in json.loads(body)
        assert (tmp_path / "work" / cli.DEMO).is_file()

        # a kernel too: the server starts it in a session of its own, out of the command's group
        kernels = f"http://127.0.0.1:{port}/api/kernels"
        request = urllib.request.Request(kernels, b"{}", headers, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 201
        wait_until(
            lambda: len(descendants(proc.pid)) >= 2, timeout=60,
            what="the command's JupyterLab and its kernel",
        )  # fmt: skip
        server = descendants(proc.pid)
        # to the command's pid alone, as `kill`, systemd or a container stop send it
        os.kill(proc.pid, stop)
        assert proc.wait(timeout=10) == 0, log_tail(log)  # JupyterLab's own, a clean stop
        # a clean stop, not a kill: the server removed its own and its kernel's runtime files
        runtime = tmp_path / "home" / "runtime"
        assert not [*runtime.glob("jpserver-*.json"), *runtime.glob("kernel-*.json")]
        wait_until(
            lambda: not listening(port) and not any(alive(pid) for pid in server),
            timeout=5, what=f"port {port} closed and no process of the command left",
        )  # fmt: skip


# A stand-in server: writes its pid to the file argv[1] once its handlers are set, then runs
# until a signal ends it. Its SETUP line decides how it takes signals.
FAKE_SERVER = """import os, signal, sys, time
SETUP
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def _run_server_script(setup: str, ready: Path, grace: float, before: str = "") -> str:
    """Python code running cli.run_server on FAKE_SERVER; ``before`` runs first."""
    child = [sys.executable, "-c", FAKE_SERVER.replace("SETUP", setup), str(ready)]
    return (
        f"import os, sys\nfrom surgeon_widgets import cli\n{before}\n"
        f"sys.exit(cli.run_server({child!r}, dict(os.environ), grace={grace}))"
    )


@contextlib.contextmanager
def _supervised(tmp_path, setup: str, grace: float = 60, before: str = ""):
    """Yield ``(command process, fake server pid)`` once the fake server is up."""
    ready, log = tmp_path / "server.pid", tmp_path / "run_server.log"
    script = _run_server_script(setup, ready, grace, before)
    with started([sys.executable, "-c", script], log, cwd=tmp_path, env=repo_env()) as proc:
        pid = wait_for(
            lambda: int(ready.read_text()) if ready.exists() else None, proc, log,
            timeout=30, what="run_server's child", interval=0.05,
        )  # fmt: skip
        yield proc, pid
        assert not alive(pid), "the child outlived run_server"


@pytest.mark.timeout(60)
def test_run_server_returns_the_servers_exit_code(tmp_path):
    setup = "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))"
    with _supervised(tmp_path, setup) as (proc, _):
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name
)
def test_run_server_stops_the_server_with_sigterm_and_returns_128_plus_it(tmp_path, stop):
    # default handlers: the child dies of the SIGTERM it is sent, whatever the command got
    with _supervised(tmp_path, "") as (proc, _):
        os.kill(proc.pid, stop)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM


@pytest.mark.timeout(60)
def test_run_server_kills_a_server_that_outlives_the_grace_period(tmp_path):
    setup = "signal.signal(signal.SIGTERM, signal.SIG_IGN)"
    with _supervised(tmp_path, setup, grace=1) as (proc, _):
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGKILL
        assert time.monotonic() - start >= 1


@pytest.mark.timeout(60)
def test_run_server_kills_the_server_on_a_second_signal(tmp_path):
    got = tmp_path / "got"
    setup = f"signal.signal(signal.SIGTERM, lambda *_: open({str(got)!r}, 'w').close())"
    with _supervised(tmp_path, setup) as (proc, _):  # grace 60 s: the second signal decides
        os.kill(proc.pid, signal.SIGTERM)
        wait_until(got.exists, timeout=10, what="the first SIGTERM reached the server")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGKILL


@pytest.mark.timeout(60)
def test_run_server_passes_on_a_signal_that_came_before_the_server_started(tmp_path):
    started_pid, log = tmp_path / "started.pid", tmp_path / "run_server.log"
    before = (
        "import signal, subprocess\nreal = subprocess.Popen\n"
        "def early(*args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    child = real(*args, **kwargs)\n"
        f"    open({str(started_pid)!r}, 'w').write(str(child.pid))\n"
        "    return child\n"
        "subprocess.Popen = early"
    )
    script = _run_server_script("", tmp_path / "server.pid", grace=60, before=before)
    with started([sys.executable, "-c", script], log, cwd=tmp_path, env=repo_env()) as proc:
        # the fake server sleeps 60 s unless the early SIGTERM reaches it
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM, log_tail(log)
        assert not alive(int(started_pid.read_text()))


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
