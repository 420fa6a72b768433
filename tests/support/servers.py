"""Local servers for tests and scripts: start one in its own session, wait until it answers,
stop it and everything it started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from surgeon_widgets.cli import free_port  # the package's own (the demo uses it), shared

__all__ = [
    "ServerError", "alive", "descendants", "free_port", "http_get", "listening", "repo_env",
    "started", "stop", "wait_for", "wait_until",
]  # fmt: skip

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class ServerError(RuntimeError):
    """A server exited or did not answer in time; the message ends with its log's tail."""


def repo_env(**extra: str) -> dict[str, str]:
    """This process's environment with the checkout first on ``PYTHONPATH`` (so a child
    process, a Jupyter kernel included, imports this worktree's package), plus ``extra``."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def log_tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


@contextlib.contextmanager
def started(
    command: list[str], log: Path, *, cwd: Path, env: dict[str, str]
) -> Iterator[subprocess.Popen]:
    """Run ``command`` in a new session with its output in ``log``; on leaving, stop it and
    every process it started (:func:`stop`)."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield proc
        finally:
            stop(proc)


def stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM ``proc``'s process group (a Jupyter server shuts its kernels down on it), then
    SIGKILL the group after ``timeout`` s. ``proc`` must lead its own session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_for(
    ready: Callable[[], T | None],
    proc: subprocess.Popen,
    log: Path,
    *,
    timeout: float,
    what: str,
    interval: float = 0.3,
) -> T:
    """Call ``ready()`` until it returns something other than None, and return that.

    Raises ServerError, with ``log``'s tail, once ``proc`` has exited or ``timeout`` s passed.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise ServerError(f"{what} exited with {proc.returncode}:\n{log_tail(log)}")
        value = ready()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise ServerError(f"{what} did not answer within {timeout:.0f} s:\n{log_tail(log)}")
        time.sleep(interval)


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes] | None:
    """``(status, body)`` of a successful GET, or None while nothing (or an error) answers."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status, response.read()
    except OSError:  # refused, reset, timed out, or an HTTP error status
        return None


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _proc_state(pid: int) -> tuple[str, int] | None:
    """``(state, parent pid)`` of ``pid`` from /proc (Linux), or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name, in parentheses, may hold spaces: the fields follow the last ")"
    state, ppid = text.rpartition(")")[2].split()[:2]
    return state, int(ppid)


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, dead but not yet reaped, does not)."""
    state = _proc_state(pid)
    return state is not None and state[0] != "Z"


def descendants(pid: int) -> list[int]:
    """The pids of the living processes ``pid`` started, theirs, and so on (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        state = _proc_state(int(entry.name)) if entry.name.isdigit() else None
        if state is not None and state[0] != "Z":
            children.setdefault(state[1], []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def wait_until(done: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Call ``done()`` until it is true; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.1)
