"""Run every ``bench_*.py`` in this folder with ``--quick``, each in its own process.

Exits non-zero only when a benchmark crashes (non-zero exit or timeout); a missed target is
printed by the benchmark but does not fail the run.

    python benchmarks/run_all.py             # all benchmarks, quick mode
    python benchmarks/run_all.py engine      # only bench_*engine*.py
    python benchmarks/run_all.py --full      # without --quick (slow)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("match", nargs="*", help="run only benchmarks whose name contains these")
    parser.add_argument("--full", action="store_true", help="run without --quick")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per benchmark")
    args = parser.parse_args(argv)

    scripts = sorted(HERE.glob("bench_*.py"))
    if args.match:
        scripts = [s for s in scripts if any(m in s.stem for m in args.match)]
    if not scripts:
        print(f"no benchmark matches {args.match} in {HERE}", file=sys.stderr)
        return 2
    results: list[tuple[str, str, float]] = []
    for script in scripts:
        command = [sys.executable, str(script)] + ([] if args.full else ["--quick"])
        print(f"=== {script.name} ({' '.join(command[2:]) or 'full'})", flush=True)
        started = time.perf_counter()
        try:
            code = subprocess.run(command, cwd=HERE.parent, timeout=args.timeout).returncode
            status = "ok" if code == 0 else f"crashed (exit {code})"
        except subprocess.TimeoutExpired:
            status = f"crashed (timeout after {args.timeout:.0f} s)"
        results.append((script.name, status, time.perf_counter() - started))

    print("=== summary", flush=True)
    for name, status, seconds in results:
        print(f"{name:<28} {status:<32} {seconds:6.1f} s")
    return 1 if any(status != "ok" for _, status, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
