"""The ``surgeon-widgets`` command.

``surgeon-widgets demo`` copies the shipped demo notebook to a working folder (never edited in
place) and starts JupyterLab there on 127.0.0.1, printing the full URL with its token. It needs
JupyterLab: ``pip install "surgeon-widgets[demo]"``. The server lives exactly as long as the
command (:func:`run_server`).

Each subcommand is one ``add_<name>(commands)`` function that registers its parser and sets
``handler``; heavy imports (torch, Jupyter) happen inside the handler only, so ``--help`` is
fast.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

__all__ = ["main"]

DEMO = "demo.ipynb"
DEMO_INSTALL = 'pip install "surgeon-widgets[demo]"'
DEFAULT_PORT = 8888
# the signals a terminal, `kill`, systemd or a container stop send to end a command
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name)
)
STOP_GRACE = 10.0  # s; the server gives its kernels, stopped together, 5 s (shutdown_wait_time)


def copy_demo(folder: Path) -> Path:
    """Copy the shipped demo notebook into ``folder`` (kept if already there); return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / DEMO
    if not target.exists():
        source = resources.files("surgeon_widgets") / "notebooks" / DEMO
        with resources.as_file(source) as path:
            shutil.copyfile(path, target)
    return target


def lab_command(folder: Path, port: int, browser: bool) -> list[str]:
    # `-m jupyterlab`, not `-m jupyter lab`: that looks up a `jupyter-lab` script on PATH,
    # which an unactivated venv does not have
    command = [
        sys.executable, "-m", "jupyterlab", f"--port={port}", "--ip=127.0.0.1",
        f"--ServerApp.root_dir={folder}", f"--LabApp.default_url=/lab/tree/{DEMO}",
        "--ServerApp.port_retries=0",  # the printed URL must be the one it serves
        # Ctrl-C on a terminal reaches the server too (same process group): stop at once
        # instead of asking "Shut down this Jupyter server?" for 5 s
        "--ServerApp.answer_yes=True",
    ]  # fmt: skip
    if not browser:
        command.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    return command


def missing_demo_requirements() -> list[str]:
    """Modules the demo needs that this Python cannot import (JupyterLab and a kernel)."""
    return [m for m in ("jupyterlab", "ipykernel") if importlib.util.find_spec(m) is None]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_server(command: list[str], env: dict[str, str], grace: float = STOP_GRACE) -> int:
    """Run ``command`` as a child process that lives exactly as long as this call.

    SIGTERM, SIGINT or SIGHUP sent to this process (to its pid alone, as `kill`, systemd or a
    container stop do) asks the child to stop with SIGTERM, the signal JupyterLab always stops
    cleanly on: off a terminal it meets SIGINT with "Interrupted..." and skips its cleanup
    (kernels, runtime files), and SIGHUP kills it. A signal that arrives while the child is
    starting is passed on once it exists. A second signal, or a child still running ``grace``
    s after the first, gets SIGKILL, so nothing waits forever. Returns once the child has
    exited: its exit code, or 128 + N when it died of signal N (the shell's convention: 143
    for SIGTERM, 137 for SIGKILL).

    >>> run_server([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ))
    3
    """
    # one consumer, this loop; the handlers and the waiter thread only post (SimpleQueue.put is
    # reentrant, safe in a signal handler)
    events: queue.SimpleQueue[str] = queue.SimpleQueue()
    previous = {s: signal.signal(s, lambda *_: events.put("signal")) for s in STOP_SIGNALS}
    try:
        child = subprocess.Popen(command, env=env)

        def post_exit() -> None:
            child.wait()
            events.put("exited")

        threading.Thread(target=post_exit, daemon=True, name="surgeon-widgets demo waiter").start()
        stopping, deadline = False, None  # deadline: the end of the grace period, while it runs
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = events.get(timeout=timeout)
            except queue.Empty:
                event = "grace over"
            if event == "exited":
                break
            if event == "signal" and not stopping:
                stopping, deadline = True, time.monotonic() + grace
                child.terminate()
            else:  # a second signal, or the grace period is over
                child.kill()
                deadline = None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    code = child.wait()
    return 128 - code if code < 0 else code


def run_demo(args: argparse.Namespace) -> int:
    missing = missing_demo_requirements()
    if missing:
        print(
            f"surgeon-widgets demo needs JupyterLab ({', '.join(missing)} not installed here).\n"
            f"Install it with:\n    {DEMO_INSTALL}",
            file=sys.stderr,
        )
        return 2
    port = args.port
    if port is None:
        port = DEFAULT_PORT if port_free(DEFAULT_PORT) else free_port()
    elif not port_free(port):
        print(f"port {port} on 127.0.0.1 is in use; pick another with --port", file=sys.stderr)
        return 2
    notebook = copy_demo(args.dir)
    # the token goes through the environment, not the command line (visible to `ps`)
    token = os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(24)
    print(f"demo notebook: {notebook}")
    print(f"open http://127.0.0.1:{port}/lab/tree/{DEMO}?token={token}", flush=True)
    env = {**os.environ, "JUPYTER_TOKEN": token}
    return run_server(lab_command(args.dir, port, not args.no_browser), env)


def add_demo(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help="open the demo notebook in JupyterLab",
        description="Copy the demo notebook and open it in JupyterLab on 127.0.0.1.\n"
        f"Needs JupyterLab:  {DEMO_INSTALL}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--port", type=int, default=None,
        help=f"port on 127.0.0.1 (default: {DEFAULT_PORT}, or a free one if it is taken)",
    )  # fmt: skip
    demo.add_argument("--no-browser", action="store_true", help="only print the URL")
    demo.add_argument(
        "--dir", type=Path, default=Path.cwd() / "surgeon-widgets-demo",
        help="working folder for the notebook copy (default: ./surgeon-widgets-demo)",
    )  # fmt: skip
    demo.set_defaults(handler=run_demo)


def run_export_tensorboard(args: argparse.Namespace) -> int:
    from .record.tensorboard import export_tensorboard

    print(f"wrote {export_tensorboard(args.run, args.out)}")
    return 0


def add_export_tensorboard(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export-tensorboard", help="write a recorded run as TensorBoard events"
    )
    export.add_argument("run", type=Path, help="the run folder (Recorder's path)")
    export.add_argument("out", type=Path, help="folder for the event file (--logdir)")
    export.set_defaults(handler=run_export_tensorboard)


# One entry per subcommand; add yours here.
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [add_demo, add_export_tensorboard]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="surgeon-widgets",
        description="Look inside PyTorch models. Subcommands:",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
