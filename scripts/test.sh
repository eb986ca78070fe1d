#!/usr/bin/env bash
# Sets up Haki, then runs lint, strict type checks and the whole test suite on real PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check service tests benchmarks scripts sdk
.venv/bin/ruff format --check service
.venv/bin/mypy
.venv/bin/pytest "$@"
