"""Writes test/render_golden.json: packets and what the Python SDK's `render()` makes of them.

The TypeScript SDK's test (test/render.test.mjs) renders the same packets and must produce the
same bytes. The packets aim at every place where Python and JavaScript differ: what counts as
whitespace, case-insensitive matching of the block's tag, sub-microsecond fractions and UTC
offsets of datetimes, Unicode digits in held-back counts.

    .venv/bin/python sdk/typescript/test/make_render_golden.py          # rewrite the file
    .venv/bin/python sdk/typescript/test/make_render_golden.py --check  # fail when it is stale

tests/test_sdk_typescript.py runs the check, so a change to the Python `render()` that is not
carried to the golden file (and then to the TypeScript one) fails the suite.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
from haki_client import ContextPacket, render

GOLDEN = Path(__file__).with_name("render_golden.json")
REGENERATE = ".venv/bin/python sdk/typescript/test/make_render_golden.py"

TRACE = "01a23046-5a3d-7012-91ae-e5a2d19f6346"
RECORDED = "2026-11-20T08:30:00.123456Z"
# Python's \s: the 29 code points of str.isspace(); U+FEFF is whitespace to JavaScript only.
PY_SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
PY_SPACES += "\u2028\u2029\u202f\u205f\u3000"


def fact(
    content: str, valid_from: str | None = None, valid_to: str | None = None, n: int = 1
) -> dict[str, Any]:
    return {
        "fact_id": f"01a23046-59f4-7389-b3b9-{n:012d}",
        "content": content,
        "score": 0.5,
        "tokens": 3,
        "reason_code": "packed",
        "recorded_from": RECORDED,
        "valid_from": valid_from,
        "valid_to": valid_to,
        "source_event_id": None,
    }


def episode(content: str, occurred_at: str, n: int = 1) -> dict[str, Any]:
    return {
        "event_id": f"01a23046-5a1b-7000-8000-{n:012d}",
        "content": content,
        "occurred_at": occurred_at,
        "score": 0.4,
        "tokens": 4,
    }


def packet(
    facts: list[dict[str, Any]] | None = None,
    episodes: list[dict[str, Any]] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "trace_id": TRACE,
        "profile": "unified",
        "status": "degraded" if warnings else "ok",
        "empty_reason": None,
        "budget_tokens": 900,
        "used_tokens": 10,
        "facts": facts or [],
        "episodes": episodes or [],
    }
    if warnings is not None:
        out["warnings"] = warnings
    return out


def cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name: str, p: dict[str, Any], state_warnings: bool = False) -> None:
        out.append({"name": name, "packet": p, "state_warnings": state_warnings})

    add(
        "readme packet",
        packet(
            [
                fact("Maya prefers to be contacted by email, never by phone.", n=1),
                fact("Maya works as a nurse at Lyon Sud hospital.", n=2),
            ],
            [episode("Maya asked to move her appointment to Friday morning.", "2026-11-20T08:30:00Z")],
        ),
    )
    add("empty packet", packet())
    add("empty packet, state_warnings, no warnings", packet(warnings=[]), True)
    add("warnings absent from the JSON", packet([fact("x")]))
    held = [
        "open_conflict: 2 fact(s) hidden pending conflict resolution",
        "volatility_expired: 1 fact(s) hidden because they are older than their stale_after_seconds",
    ]
    add("held back, default", packet(warnings=held))
    add("held back, state_warnings", packet(warnings=held), True)
    add("items and warnings, state_warnings", packet([fact("a")], warnings=held), True)
    add("items and warnings", packet([fact("a")], warnings=held))
    add(
        "warnings without counts",
        packet(warnings=["embedding_unavailable: the embedder did not answer"]),
        True,
    )
    add("zero hidden", packet(warnings=["open_conflict: 0 fact(s) hidden pending"]), True)
    add(
        "unicode digits and letters in counts",
        packet(
            warnings=[
                "open_conflict: \u0663 fact(s) hidden",  # Arabic-Indic 3
                "conflit_ouvert_\u00e9: \U0001d7cf\U0001d7d0 fact(s) hidden here",  # math bold 12
                "\u4e00_reason: \uff17 fact(s) hidden.",  # fullwidth 7
                "x: 5 fact(s) hiddenly",  # no word boundary: not a count
                "x-y: 5 fact(s) hidden",  # '-' is not a word character: not a count
                "x: \u00b2 fact(s) hidden",  # superscript two is not a decimal digit
                "x: 5 fact(s) hidden\u0301",  # a combining mark is not a word character
                "x: 5 fact(s) hidden_",  # '_' is
                "  x: 5 fact(s) hidden",  # not at the start
            ]
        ),
        True,
    )
    add(
        "huge count",
        packet(warnings=["open_conflict: 123456789012345678901234567890 fact(s) hidden"]),
        True,
    )
    add(
        "too many digits for int()",
        packet(warnings=["open_conflict: " + "9" * 4301 + " fact(s) hidden"]),
        True,
    )
    tags = [
        "before </haki_memory> after",
        "a <haki_memory> b",
        "< / HAKI_MEMORY > c",
        "<\tHaKi_MeMoRy\n>",
        "<ha\u212ai_memory>",  # Kelvin sign
        "<hak\u0131_memory>",  # dotless i
        "</hak\u0130_memory>",  # dotted capital I
        "<\u3000/\x1chaki_memory\x85>",  # Python-only whitespace inside the tag
        "<\ufeffhaki_memory>",  # U+FEFF is not whitespace to Python: kept
        "<haki_memory",  # unclosed: kept
        "<<haki_memory>>",
        "\uff1chaki_memory\uff1e",  # fullwidth brackets: kept
    ]
    add("tags in content", packet([fact(t, n=i) for i, t in enumerate(tags)]))
    add(
        "whitespace",
        packet(
            [
                fact(f"{PY_SPACES}lead and trail{PY_SPACES}", n=1),
                fact("in" + PY_SPACES + "side", n=2),
                fact("\ufeffBOM kept\ufeff", n=3),
                fact("line one\nline two\r\nline three", n=4),
                fact("zero\u200bwidth kept", n=5),
                fact("emoji \U0001f600  and  combining e\u0301", n=6),
                fact(PY_SPACES, n=7),
            ],
            [episode(f"{PY_SPACES}event{PY_SPACES}", "2026-11-20T09:30:00Z")],
            [f"{PY_SPACES}spaced\n warning </haki_memory>"],
        ),
    )
    dates = [
        ("2026-11-20T00:00:00Z", None),
        (None, "2026-12-31T00:00:00Z"),
        ("2026-11-20T00:00:00Z", "2026-12-31T15:45:10Z"),
        ("2026-01-01T00:30:00+01:00", None),  # 2025-12-31 23:30 UTC
        ("2026-01-01T01:00:00+01:00", None),  # midnight UTC: the date alone
        ("2025-12-31T19:00:00-05:00", None),  # midnight UTC
        ("2026-03-01T05:29:00+0530", None),  # no colon in the offset
        ("2026-11-20t09:30:00z", None),
        ("2026-11-20 09:30:00Z", None),
        ("2026-11-20T09:30:00", None),  # naive: shown as it is
        ("2026-11-20T00:00:00", None),
        ("2026-11-20T23:59:59.9999996Z", None),  # rounds to the next midnight
        ("2026-11-20T00:00:00.0000004Z", None),  # rounds down to midnight
        ("2026-11-20T00:00:00.0000005Z", None),  # rounds up: not midnight
        ("2026-11-20T00:00:00.000001Z", None),
        ("2026-11-20T00:00:59Z", None),  # seconds are not shown, but it is not midnight
        ("0999-05-01T00:00:00Z", "0999-05-01T10:00:00Z"),  # %Y does not pad
        ("2024-02-29T23:00:00-01:00", None),  # leap day into March
        ("2026-11-20T09:30:00.5+14:00", None),
        ("2026-11-20T09:30:00+23:59", None),
        ("9999-12-31T23:59:59Z", None),
    ]
    add("validity", packet([fact(f"fact {i}", a, b, n=i) for i, (a, b) in enumerate(dates)]))
    add(
        "episode dates",
        packet(episodes=[episode(f"event {i}", a or b or "", n=i) for i, (a, b) in enumerate(dates)]),
    )
    add("out of range after conversion", packet([fact("x", "0001-01-01T00:30:00+01:00")]))
    for bad in ("2026-02-30T00:00:00Z", "2026-11-20T24:00:00Z", "2026-11-20T09:30Z", "2026-11-20", "x"):
        add(f"invalid datetime {bad}", packet(episodes=[episode("x", bad)]))
    add("offset out of range", packet([fact("x", "2026-11-20T09:30:00+24:00")]))
    return out


def render_case(case: dict[str, Any]) -> dict[str, str]:
    try:
        decoded = msgspec.json.decode(json.dumps(case["packet"]).encode(), type=ContextPacket)
        return {"text": render(decoded, state_warnings=case["state_warnings"])}
    except Exception as exc:  # the TypeScript render must refuse the same packets
        return {"error": type(exc).__name__}


def golden() -> str:
    rendered = [{**case, "expected": render_case(case)} for case in cases()]
    return json.dumps(rendered, indent=1, ensure_ascii=True) + "\n"


def main() -> None:
    text = golden()
    if "--check" in sys.argv:
        if not GOLDEN.exists() or GOLDEN.read_text() != text:
            sys.exit(f"{GOLDEN} is stale: the Python render() changed. Regenerate it with: {REGENERATE}")
        print(f"{GOLDEN.name} is current")
        return
    GOLDEN.write_text(text)
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    main()
