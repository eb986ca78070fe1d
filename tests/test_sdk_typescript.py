"""The TypeScript SDK's generated parts stay current (its own tests run under node:
scripts/test_typescript.sh, from .ci/run).

- sdk/typescript/openapi.json is the OpenAPI document the service serves; the SDK's types
  (src/schema.ts) are generated from it, and `npm test` fails when they are not.
- sdk/typescript/test/render_golden.json holds what the Python SDK's render() makes of tricky
  packets; the TypeScript render() must give the same bytes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SDK = REPO / "sdk" / "typescript"
REGENERATE = "just ts-types"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.integration  # runs scripts/dump_openapi.py
def test_openapi_snapshot_is_the_document_the_app_builds() -> None:
    dumped = _run("scripts/dump_openapi.py")
    assert dumped.returncode == 0, dumped.stderr
    snapshot = (SDK / "openapi.json").read_text()
    assert dumped.stdout == snapshot, (
        "sdk/typescript/openapi.json is stale (a route or a Struct changed): regenerate it and the "
        f"TypeScript types with `{REGENERATE}`"
    )


async def test_openapi_snapshot_is_what_the_service_serves(client: Any) -> None:
    r = await client.get("/docs/openapi.json")
    assert r.status_code == 200
    assert r.json() == json.loads((SDK / "openapi.json").read_text()), (
        f"the served /docs/openapi.json differs from sdk/typescript/openapi.json: run `{REGENERATE}`"
    )


@pytest.mark.integration  # runs test/make_render_golden.py
def test_render_golden_file_is_what_python_renders() -> None:
    checked = _run("sdk/typescript/test/make_render_golden.py", "--check")
    assert checked.returncode == 0, checked.stderr + checked.stdout
    cases = json.loads((SDK / "test" / "render_golden.json").read_text())
    # Both outcomes are covered: blocks to compare byte for byte, and packets Python refuses.
    assert sum("text" in c["expected"] for c in cases) >= 15
    assert sum("error" in c["expected"] for c in cases) >= 3


def test_readme_quick_start_is_the_example_the_node_tests_run() -> None:
    """The README's TypeScript code is sdk/typescript/examples/quickstart.ts (its comment lines
    aside), which test/package.test.mjs compiles against the packed package and runs."""
    readme = (REPO / "README.md").read_text()
    start = readme.index("\n## TypeScript SDK\n")
    section = readme[start : readme.index("\n## ", start + 1)]
    (shown,) = re.findall(r"^```ts\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    example = (SDK / "examples" / "quickstart.ts").read_text()
    code = "\n".join(line for line in example.splitlines() if not line.startswith("//")).strip()
    assert shown.strip() == code, "README's TypeScript quick start differs from examples/quickstart.ts"
    (output,) = re.findall(r"^```text\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    lines = output.splitlines()
    assert lines[0] == "<haki_memory>" and "</haki_memory>" in lines
    assert lines[-1].startswith("budget_exceeded (HTTP 400): ")
