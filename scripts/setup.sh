#!/usr/bin/env bash
# Creates .venv (Python 3.11+) and installs Haki with its dev tools; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  py=""
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then py="$candidate"; break; fi
  done
  [ -n "$py" ] || { echo "setup: Python 3.11+ is required" >&2; exit 1; }
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch is pinned <2.14 in pyproject.toml: a looser pin pulls a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet -e '.[dev,onnx]'
.venv/bin/python -m pip install --quiet -e sdk/python
