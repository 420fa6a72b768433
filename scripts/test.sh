#!/usr/bin/env bash
# Run every check: lint, unit + browser tests, notebooks, benchmarks in quick mode.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/python -m pytest -p no:cacheprovider tests --doctest-modules surgeon_widgets/engine
if compgen -G "notebooks/*.ipynb" > /dev/null; then
  .venv/bin/python -m pytest -p no:cacheprovider --nbval-lax notebooks
fi
if [ -f benchmarks/run_all.py ]; then
  .venv/bin/python benchmarks/run_all.py --quick
fi
