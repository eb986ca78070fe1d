"""Reads `pip install --dry-run --report -` on stdin and says, on stderr, what set-up is about to
install, above all which torch build: scripts/setup.sh runs it before the real install."""

from __future__ import annotations

import json
import sys

# PyPI's Linux x86_64 torch is the CUDA build: torch 2.13.0 and its nvidia-*/cuda-* wheels and
# triton weighed 2.74 GB (pip install --dry-run --report against PyPI alone, 2026-12-01).
CUDA_STACK_GB = 2.7
CUDA_PREFIXES = ("nvidia-", "cuda-", "triton")


def main() -> int:
    text = sys.stdin.read()
    if not text.strip():
        return 1
    install = json.loads(text).get("install", [])
    names = {i["metadata"]["name"].lower(): i for i in install}
    cuda = sorted(n for n in names if n.startswith(CUDA_PREFIXES))

    def say(line: str) -> None:
        print(f"setup: {line}", file=sys.stderr)

    say(f"{len(install)} package(s) to install or update")
    torch = names.get("torch")
    if torch is None:
        say("torch: already installed, nothing to download")
    else:
        url = torch["download_info"]["url"]
        where = "a local file" if url.startswith("file:") else url.split("/")[2]
        version = torch["metadata"]["version"]
        build = "CUDA" if cuda else "CPU"
        say(f"torch {version}: the {build} build, from {where}")
    if cuda:
        say(
            f"the CUDA stack comes with it ({len(cuda)} wheels: {', '.join(cuda)}), about "
            f"{CUDA_STACK_GB} GB in all. For the ~190 MB CPU build instead, stop now (Ctrl-C) and run "
            "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
