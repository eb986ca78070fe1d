#!/usr/bin/env bash
# The TypeScript SDK's tests (sdk/typescript): installs its pinned dev tools (npm ci), checks the
# generated types are current, builds it, and runs node's test runner against a real `haki serve`
# started here on a free port (scripts/with_haki_server.py), which it stops afterwards.
# Needs Node 18+ and npm; .ci/run calls it after scripts/test.sh (which sets up .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
command -v node >/dev/null 2>&1 || { echo "test_typescript: Node.js 18+ is required" >&2; exit 1; }
(cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error)
exec .venv/bin/python scripts/with_haki_server.py --project demo -- bash -c 'cd sdk/typescript && npm test'
