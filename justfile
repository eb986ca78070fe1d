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

# Lint and format-check the code
lint:
    .venv/bin/ruff check service tests benchmarks scripts sdk
    .venv/bin/ruff format --check service

# Strict type check of the service package
typecheck:
    .venv/bin/mypy service

# Everything CI runs
ci:
    bash .ci/run

# LoCoMo retrieval-quality evaluation (docs/quality.md); e.g. just locomo --conversations 1 --questions 20
locomo *ARGS:
    .venv/bin/python benchmarks/locomo.py {{ARGS}}

# Calibrate HAKI_RECALL_MAX_DISTANCE for the current embedder (prints a table, writes nothing)
recall-floor *ARGS:
    .venv/bin/python scripts/check_recall_floor.py {{ARGS}}

# Import a JSONL file of facts or events (resumable, with progress)
import FILE PROJECT SUBJECT *ARGS:
    .venv/bin/haki import {{FILE}} --project {{PROJECT}} --subject {{SUBJECT}} {{ARGS}}
