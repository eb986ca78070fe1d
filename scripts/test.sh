#!/usr/bin/env bash
# Sets up Haki, then runs lint, strict type checks and the whole test suite on real PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check service tests benchmarks scripts sdk
.venv/bin/ruff format --check service
.venv/bin/mypy
# A base temp dir of this run's own: pytest keeps only the newest three under
# /tmp/pytest-of-$USER, so another pytest on the machine could delete this run's files.
.venv/bin/pytest --basetemp="$(mktemp -d /tmp/haki-tests.XXXXXX)" "$@"
