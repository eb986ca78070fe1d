# Haki task runner: `just --list` is the manual.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Create .venv and install Haki with its dev tools
setup:
    bash scripts/setup.sh

# Serve the API on the embedded PostgreSQL (pass --host/--port to override)
serve *ARGS:
    bash scripts/serve.sh {{ARGS}}

# Apply pending migrations and exit
migrate:
    .venv/bin/haki migrate

# Print a new API key for a project
key PROJECT:
    .venv/bin/haki keys create {{PROJECT}}

# Lint, type-check and run every test (the README's test command)
test *ARGS:
    bash scripts/test.sh {{ARGS}}

# The fast lane: no model, no subprocess, no slow test (a test that needs them and lacks its marker fails)
test-fast *ARGS:
    HAKI_TEST_FAST_LANE=1 .venv/bin/pytest -q -p no:cacheprovider -m "not model and not integration and not slow" {{ARGS}}

# Lint and format-check the code
lint:
    .venv/bin/ruff check service tests benchmarks scripts sdk
    .venv/bin/ruff format --check service

# Strict type check of the service, its tests, benchmarks and scripts (pyproject.toml's files)
typecheck:
    .venv/bin/mypy

# Everything CI runs
ci:
    bash .ci/run

# LoCoMo retrieval-quality evaluation (docs/quality.md); e.g. just locomo --conversations 1 --questions 20
locomo *ARGS:
    .venv/bin/python benchmarks/locomo.py {{ARGS}}

# LongMemEval retrieval-quality evaluation (docs/longmemeval.md); e.g. just longmemeval --dataset DIR --questions 12
longmemeval *ARGS:
    .venv/bin/python benchmarks/longmemeval.py {{ARGS}}

# Calibrate HAKI_RECALL_MAX_DISTANCE for the current embedder (prints a table, writes nothing)
recall-floor *ARGS:
    .venv/bin/python scripts/check_recall_floor.py {{ARGS}}

# Import a JSONL file of facts or events (resumable, with progress)
import FILE PROJECT SUBJECT *ARGS:
    .venv/bin/haki import {{FILE}} --project {{PROJECT}} --subject {{SUBJECT}} {{ARGS}}

# Latency benchmarks of the assembler SQL path, both profiles (pytest-benchmark tables; docs/performance.md)
bench *ARGS:
    .venv/bin/pytest benchmarks/test_context_latency.py --benchmark-only {{ARGS}}

# The CI latency guard alone (ratios to the score-every-fact baseline, and unified to facts_first, same run)
bench-guard:
    .venv/bin/pytest benchmarks/test_context_latency.py --benchmark-disable -q

# Scale study 10k -> 1M facts (slow; not in CI)
scale *ARGS:
    .venv/bin/python -m benchmarks.scale {{ARGS}}

# End-to-end HTTP latency of POST /v1/context on a real server with the local model
http-bench *ARGS:
    .venv/bin/python -m benchmarks.http_latency {{ARGS}}

# Mixed load (80% context, 20% writes) at 1, 4 and 16 clients, 30 s each, against a real server
load *ARGS:
    .venv/bin/python -m benchmarks.load {{ARGS}}

# Regenerate migrations/schema.sql (pg_dump --schema-only of a freshly migrated database)
schema:
    .venv/bin/python scripts/schema_dump.py

# Regenerate service/queries_protocol.py, the typed Protocol of every statement in queries/
queries-protocol:
    .venv/bin/python scripts/queries_protocol.py

# After an API change: regenerate the TypeScript SDK's OpenAPI snapshot and its types (sdk/typescript)
ts-types:
    .venv/bin/python scripts/dump_openapi.py > sdk/typescript/openapi.json.new
    mv sdk/typescript/openapi.json.new sdk/typescript/openapi.json
    cd sdk/typescript && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run generate

# The TypeScript SDK's tests (node's test runner) against a real haki serve started for them
test-ts:
    bash scripts/test_typescript.sh
