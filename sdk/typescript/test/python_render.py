"""Renders packets with the Python SDK, for the TypeScript SDK's byte-identity tests.

stdin: a JSON array of {"packet": <ContextPacket JSON>, "state_warnings": bool, "fact_ids": bool}.
stdout: a JSON array, per packet {"text": <render(...)>} or {"error": <exception class>} when
the Python SDK cannot decode or render it.
"""

from __future__ import annotations

import json
import sys

import msgspec
from haki_client import ContextPacket, render


def render_one(case: dict[str, object]) -> dict[str, str]:
    try:
        packet = msgspec.json.decode(json.dumps(case["packet"]).encode(), type=ContextPacket)
        state_warnings = bool(case.get("state_warnings", False))
        return {
            "text": render(packet, state_warnings=state_warnings, fact_ids=bool(case.get("fact_ids", False)))
        }
    except Exception as exc:  # the TypeScript side must fail on the same packets
        return {"error": type(exc).__name__}


def main() -> None:
    cases = json.load(sys.stdin)
    json.dump([render_one(case) for case in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
