"""Time travel (docs/time-travel.md): replay a traced context call.

A replay rebuilds the packet of a stored call from its query, by default as of the call's own
instant, with optional overrides, and traces it (replay_of: the origin). The diff says what the
overrides, or what changed since, did to the packet.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from uuid import UUID

from service.api.auth import Principal
from service.context.call import PROFILE_WEIGHTS, ContextCall, check_as_of
from service.context.inspection import inspect
from service.db import Lent
from service.db.call_runner import NoteTrace, run_context_call
from service.embedding.embedder import Embedder
from service.errors import NotFound
from service.repository import context as repo
from service.settings import ContextProfile, Settings
from service.structs import (
    Decision,
    Inspection,
    ReplayChange,
    ReplayDiff,
    ReplayRequest,
    ReplayResponse,
)

Key = tuple[str, UUID]


def _first_decisions(decisions: Sequence[Decision]) -> dict[Key, Decision]:
    """Each item's decision, in trace order (an item is decided once per call)."""
    out: dict[Key, Decision] = {}
    for d in decisions:
        out.setdefault((d.item_type, d.item_id), d)
    return out


def _change(before: Decision | None, after: Decision | None) -> ReplayChange:
    item = after or before
    assert item is not None
    return ReplayChange(item_type=item.item_type, item_id=item.item_id, before=before, after=after)


def _served(d: Decision | None) -> bool:
    return d is not None and d.decision == "included"


def _place(d: Decision) -> tuple[int | None, str, str]:
    return d.rank, d.decision, d.reason_code


def diff(original: Sequence[Decision], replayed: Sequence[Decision]) -> ReplayDiff:
    """Added: served by the replay only; removed: served by the original only; moved: decided
    by both and served by both or neither, with another rank, decision or reason. An item decided
    by one call only and served by neither is no change of the packet and is not listed."""
    old, new = _first_decisions(original), _first_decisions(replayed)
    added = [_change(old.get(k), d) for k, d in new.items() if _served(d) and not _served(old.get(k))]
    removed = [_change(d, new.get(k)) for k, d in old.items() if _served(d) and not _served(new.get(k))]
    moved = [
        _change(d, now)
        for k, d in old.items()
        if (now := new.get(k)) is not None and _served(d) == _served(now) and _place(d) != _place(now)
    ]
    return ReplayDiff(added=added, removed=removed, moved=moved)


def replay_call(origin: Inspection, overrides: ReplayRequest, settings: Settings) -> ContextCall:
    """The call that rebuilds `origin`. By default: the original's budget, profile, recall floor
    and include_episodes, text search configuration and weights (those of its profile: a replay
    under another profile ranks with that profile's), as of the original's own instant (its
    as_of, else its created_at, stamped by the database and so never checked against this
    clock). A call traced without a floor or a text search configuration (before migrations 0012
    and 0019) is replayed with the deployment's."""
    check_as_of("as_of", overrides.as_of)
    profile: ContextProfile = overrides.profile or origin.profile
    stored = origin.weights if profile == origin.profile else None
    floor = next(
        f
        for f in (overrides.recall_max_distance, origin.recall_max_distance, settings.recall_max_distance)
        if f is not None
    )
    return ContextCall(
        project_id=origin.project_id,
        subject_id=origin.subject_id,
        query=origin.query,
        budget_tokens=overrides.budget_tokens or origin.budget_tokens,
        include_episodes=True if origin.include_episodes is None else origin.include_episodes,
        profile=profile,
        as_of=overrides.as_of or origin.as_of or origin.created_at,
        recall_max_distance=floor,
        text_search_config=origin.text_search_config or settings.text_search_config,
        weights=PROFILE_WEIGHTS[profile] if stored is None else (stored[0], stored[1], stored[2]),
        embed_timeout_seconds=settings.embed_timeout_seconds,
        replay_of=origin.trace_id,
    )


async def replay(
    lent: Lent,
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    trace_id: UUID,
    overrides: ReplayRequest,
    noted: NoteTrace | None = None,
) -> ReplayResponse:
    """POST /v1/inspect/{trace_id}/replay: the packet of replay_call, traced (its `replay_of` is
    the origin), and its diff against the origin's decisions. The same embedder and exact vector
    scans reproduce every decision; an approximate HNSW walk or a changed embedder may not
    (docs/time-travel.md).

    `lent` is the request's connection: like a context call, the replay gives it back while its
    query waits on a slow embedder (service/db/call_runner.py), so it reads `lent.conn` again
    after. `noted` is called once its trace committed, as a context call's (run_context_call)."""
    origin = await inspect(lent.conn, principal, trace_id)
    call = replay_call(origin, overrides, settings)
    assert call.as_of is not None  # a replay's instant is always set (replay_call)
    packet = await run_context_call(lent, embedder, call, noted=noted)
    replayed = await repo.get_inspection(lent.conn, principal.project_id, packet.trace_id)
    if replayed is None:  # an erasure of the subject committed right after the replay's trace
        raise NotFound("The subject of this trace was erased during its replay.", trace_id=str(trace_id))
    return ReplayResponse(
        origin_trace_id=trace_id,
        # In UTC, as every instant the API answers (an override keeps the caller's offset).
        as_of=call.as_of.astimezone(UTC),
        packet=packet,
        diff=diff(origin.decisions, replayed.decisions),
    )
