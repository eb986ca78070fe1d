#!/usr/bin/env bash
# Sets up Haki, then serves it on the embedded PostgreSQL (HAKI_DATABASE_URL unset) at :8000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/haki serve "$@"
