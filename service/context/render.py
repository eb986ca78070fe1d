"""`render(packet)`: a ContextPacket as one compact `<haki_memory>` block for a prompt.

The service's own copy of the SDKs' `render()` (the `recall` MCP tool serves it): the same bytes
for the same packet, held to the golden file the Python and TypeScript SDKs are held to
(sdk/typescript/test/render_golden.json, tests/test_render.py).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from service.structs import ContextPacket, PacketEpisode, PacketFact

OPEN_TAG = "<haki_memory>"
CLOSE_TAG = "</haki_memory>"
# The first line of a block that serves nothing but states its warnings (state_warnings=True).
HELD_BACK = "Nothing served: {n} fact(s) about this subject are known but held back (see the warnings)."
NOTHING_SERVED = "Nothing served (see the warnings)."

# Memory content is untrusted text: a copy of the block's own tags inside it could close the
# block early and make what follows read as instructions outside the memory.
_TAG = re.compile(r"<\s*/?\s*haki_memory\s*>", re.IGNORECASE)
_SPACE = re.compile(r"\s+")
# A warning that counts held-back facts: "open_conflict: 2 fact(s) hidden pending conflict
# resolution" (the assembler's warnings, service/context/model.py).
_HIDDEN = re.compile(r"^(?P<reason>\w+): (?P<n>\d+) fact\(s\) hidden\b")


def hidden(warnings: list[str]) -> dict[str, int]:
    """Facts held back, by reason, as the warnings count them; `{}` when none was."""
    counts: dict[str, int] = {}
    for warning in warnings:
        m = _HIDDEN.match(warning)
        if m is not None:
            counts[m.group("reason")] = counts.get(m.group("reason"), 0) + int(m.group("n"))
    return counts


def _clean(text: str) -> str:
    """One line per item: a newline inside content would read as the start of another item."""
    return _SPACE.sub(" ", _TAG.sub("[haki_memory tag removed]", text)).strip()


def _when(value: datetime) -> str:
    """A date alone when the time is midnight UTC (the usual case for business dates)."""
    utc = value.astimezone(UTC) if value.tzinfo is not None else value
    if (utc.hour, utc.minute, utc.second, utc.microsecond) == (0, 0, 0, 0):
        return utc.strftime("%Y-%m-%d")
    return utc.strftime("%Y-%m-%d %H:%M UTC")


def _fact_line(fact: PacketFact, fact_ids: bool) -> str:
    line = f"- {_clean(fact.content)}"
    if fact.valid_from is not None and fact.valid_to is not None:
        line += f" (valid {_when(fact.valid_from)} to {_when(fact.valid_to)})"
    elif fact.valid_from is not None:
        line += f" (since {_when(fact.valid_from)})"
    elif fact.valid_to is not None:
        line += f" (until {_when(fact.valid_to)})"
    if fact_ids:
        line += f" [fact_id: {fact.fact_id}]"
    return line


def _episode_line(episode: PacketEpisode) -> str:
    return f"- [{_when(episode.occurred_at)}] {_clean(episode.content)}"


def render(packet: ContextPacket, *, state_warnings: bool = False, fact_ids: bool = False) -> str:
    """The packet as a block to put in a prompt; the empty string when it serves nothing.

    Facts first, then the dated episodes, each in pack order, then the warnings. An empty packet
    renders as nothing: a "no memory" block would itself distract the model. `state_warnings`
    keeps the block of a packet that serves nothing but has warnings (every fact hidden by an
    open conflict), so that the model does not take held-back memory for "nothing known".
    `fact_ids` ends each fact's line with `[fact_id: <id>]`, the id an agent passes as
    `supersedes` to replace that fact.
    """
    if not packet.facts and not packet.episodes:
        if not (state_warnings and packet.warnings):
            return ""
        held = sum(hidden(packet.warnings).values())
        head = HELD_BACK.format(n=held) if held else NOTHING_SERVED
        return "\n".join(
            [OPEN_TAG, head, "Warnings:", *(f"- {_clean(w)}" for w in packet.warnings), CLOSE_TAG]
        )
    lines = [OPEN_TAG]
    if packet.facts:
        lines.append("Facts:")
        lines.extend(_fact_line(f, fact_ids) for f in packet.facts)
    if packet.episodes:
        lines.append("Episodes:")
        lines.extend(_episode_line(e) for e in packet.episodes)
    if packet.warnings:
        lines.append("Warnings:")
        lines.extend(f"- {_clean(w)}" for w in packet.warnings)
    lines.append(CLOSE_TAG)
    return "\n".join(lines)
