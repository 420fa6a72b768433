#!/usr/bin/env bash
# Set up everything from scratch (idempotent): Chromium for browser tests, a venv with torch
# and the package with its test extras, and the front-end bundle built from js/.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && apt-get install -y -q chromium
  else
    sudo apt-get update -q && sudo apt-get install -y -q chromium
  fi
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# torch and torchvision come from this machine's disk (see README: Environment)
.venv/bin/pip install -q torch==2.14.1 torchvision==0.29.1
.venv/bin/pip install -q -e ".[test]"
# ipykernel 6 beside the venv's 7: tests/test_kernel_clicks.py runs the drain fallback on it
.venv/bin/pip install -q --no-deps --upgrade --target .venv/ipykernel6 "ipykernel==6.29.5"

if [ -f js/package.json ]; then
  (cd js && npm ci --no-audit --no-fund && npm run check)
fi
