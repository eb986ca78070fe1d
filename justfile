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
