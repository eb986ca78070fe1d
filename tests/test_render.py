"""The service's renderer (service/context/render.py, what the `recall` MCP tool serves) gives the
bytes the SDKs give: it is held to the golden file the Python and TypeScript SDKs are held to
(sdk/typescript/test/render_golden.json, written by make_render_golden.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from service.context.render import render
from service.structs import ContextPacket

GOLDEN = Path(__file__).resolve().parents[1] / "sdk" / "typescript" / "test" / "render_golden.json"
CASES: list[dict[str, Any]] = json.loads(GOLDEN.read_text())


def render_case(case: dict[str, Any]) -> dict[str, str]:
    """As make_render_golden.py renders a case: the text, or the exception's class name."""
    # `warnings` is required of the service's packet (it always sends one); the SDKs read an
    # absent list as empty, which is decoding, not rendering.
    packet = {"warnings": [], **case["packet"]}
    try:
        decoded = msgspec.json.decode(json.dumps(packet).encode(), type=ContextPacket)
        return {"text": render(decoded, state_warnings=case["state_warnings"])}
    except Exception as exc:
        return {"error": type(exc).__name__}


def test_the_golden_file_covers_the_tricky_cases() -> None:
    names = {case["name"] for case in CASES}
    assert {"tags in content", "whitespace", "validity", "too many digits for int()"} <= names
    assert any("error" in case["expected"] for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_render_matches_the_golden_file(case: dict[str, Any]) -> None:
    assert render_case(case) == case["expected"]
