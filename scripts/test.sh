#!/usr/bin/env bash
# Run every check: lint, unit + browser tests, notebooks, benchmarks in quick mode.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
if [ "${CI:-}" = true ] && ! git diff --quiet -- surgeon_widgets/static; then
  echo "surgeon_widgets/static is stale: run 'cd js && npm run build' and commit the bundle" >&2
  exit 1
fi
.venv/bin/python -m pytest -p no:cacheprovider --doctest-modules surgeon_widgets
.venv/bin/python -m pytest -p no:cacheprovider tests
if compgen -G "notebooks/*.ipynb" > /dev/null; then
  .venv/bin/python -m pytest -p no:cacheprovider --nbval-lax notebooks
fi
if [ -f benchmarks/run_all.py ]; then
  .venv/bin/python benchmarks/run_all.py  # every bench_*.py in --quick mode
fi
