#!/usr/bin/env bash
# Creates .venv (Python 3.11+) and installs Haki with its dev tools; idempotent.
#
# torch is the big download, and which build pip picks depends on where it looks:
# - PyPI alone, Linux x86_64: PyPI has no CPU-only torch for this platform; `torch>=2.4,<2.14`
#   resolves to the CUDA build, torch 2.13.0 (527 MB) plus 15 nvidia-*, 3 cuda-* wheels and
#   triton: 2.74 GB of wheels in all (measured with `pip install --dry-run --report`,
#   2026-12-01). macOS and Linux aarch64 get a CPU build from PyPI.
# - TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh installs
#   PyTorch's own CPU build first (about 190 MB for 2.13.0+cpu); the rest then comes from PyPI.
# - A machine whose pip already finds a CPU wheel (a find-links folder, a mirror) uses it.
# The plan is printed before anything is downloaded.
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
TORCH_REQ='torch>=2.4,<2.14'
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  echo "setup: installing $TORCH_REQ from $TORCH_INDEX_URL" >&2
  .venv/bin/python -m pip install --quiet --index-url "$TORCH_INDEX_URL" "$TORCH_REQ"
fi
# Say what is about to be downloaded: a dry run resolves from package metadata only.
.venv/bin/python -m pip install --quiet --dry-run --report - -e '.[dev]' 2>/dev/null \
  | .venv/bin/python scripts/install_plan.py || echo "setup: (could not work out the download plan)" >&2
.venv/bin/python -m pip install --quiet -e '.[dev]'
# The local model's default backend (HAKI_EMBED_BACKEND=auto) runs on ONNX Runtime when this is there.
.venv/bin/python -m pip install --quiet -e '.[onnx]'
# The Python SDK, for its tests and the benchmarks; the service itself does not import it.
.venv/bin/python -m pip install --quiet -e sdk/python
