"""``surgeon-widgets demo``: open the shipped demo notebook in JupyterLab.

The notebook is copied to a working folder (never edited in place) and JupyterLab is started
there on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

__all__ = ["main"]

DEMO = "demo.ipynb"


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
    command = [
        sys.executable, "-m", "jupyter", "lab", f"--port={port}", "--ip=127.0.0.1",
        f"--ServerApp.root_dir={folder}", f"--LabApp.default_url=/lab/tree/{DEMO}",
    ]  # fmt: skip
    if not browser:
        command.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="surgeon-widgets", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="open the demo notebook in JupyterLab")
    demo.add_argument("--port", type=int, default=8888)
    demo.add_argument("--no-browser", action="store_true", help="only print the URL")
    demo.add_argument(
        "--dir", type=Path, default=Path.cwd() / "surgeon-widgets-demo",
        help="working folder for the notebook copy (default: ./surgeon-widgets-demo)",
    )  # fmt: skip
    export = commands.add_parser(
        "export-tensorboard", help="write a recorded run as TensorBoard events"
    )
    export.add_argument("run", type=Path, help="the run folder (Recorder's path)")
    export.add_argument("out", type=Path, help="folder for the event file (--logdir)")
    args = parser.parse_args(argv)
    if args.command == "export-tensorboard":
        from .record.tensorboard import export_tensorboard

        print(f"wrote {export_tensorboard(args.run, args.out)}")
        return 0
    notebook = copy_demo(args.dir)
    print(f"demo notebook: {notebook}")
    print(f"open http://127.0.0.1:{args.port}/lab/tree/{DEMO} (JupyterLab prints the token URL)")
    return subprocess.call(lab_command(args.dir, args.port, not args.no_browser))


if __name__ == "__main__":
    raise SystemExit(main())
