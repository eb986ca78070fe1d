"""Events: batch writes."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import msgspec
import numpy as np

from service.repository.base import Conn, q
from service.repository.facts import vectors
from service.structs import WriteEventsRequest


async def insert_events(
    conn: Conn, req: WriteEventsRequest, event_ids: list[UUID], embeddings: list[np.ndarray]
) -> None:
    """One write batch (one scope) in one statement, a list per column."""
    events = req.events
    await q().insert_events(
        conn,
        project_id=req.project_id,
        subject_id=req.subject_id,
        event_ids=event_ids,
        contents=[e.content for e in events],
        occurred_ats=[e.occurred_at for e in events],
        metadatas=[e.metadata for e in events],
        embeddings=vectors(embeddings),
    )


class PendingContext(msgspec.Struct, frozen=True):
    """An event whose vector in context is to be made, with the event before it in its scope."""

    event_id: UUID
    content: str
    before_id: UUID | None
    before_content: str | None


async def next_event_context_project(conn: Conn, after_project: str | None) -> str | None:
    """The first project after `after_project` with an event whose vector in context is pending."""
    project: str | None = await q().next_event_context_project(conn, after_project=after_project)
    return project


async def claim_event_contexts(
    conn: Conn,
    project_id: str,
    batch_size: int,
    lease_seconds: float,
    event_ids: Sequence[UUID] | None = None,
) -> list[PendingContext]:
    """The project's next pending events no other process claimed, claimed for `lease_seconds`."""
    rows = q().claim_event_contexts(
        conn, project_id=project_id, event_ids=event_ids, batch_size=batch_size, lease_seconds=lease_seconds
    )
    return [
        PendingContext(r["event_id"], r["content"], r["before_id"], r["before_content"]) async for r in rows
    ]


async def release_event_context_claims(conn: Conn, project_id: str, event_ids: Sequence[UUID]) -> None:
    """Ends the claims on a batch, and the project's claims whose lease ran out."""
    await q().release_event_context_claims(conn, project_id=project_id, event_ids=list(event_ids))


async def lock_event_order(conn: Conn, project_id: str, subject_id: str) -> None:
    """An event write's lock of its scope's order, until its transaction ends."""
    await q().lock_event_order(conn, project_id=project_id, subject_id=subject_id)


async def share_event_orders(conn: Conn, project_id: str, event_ids: Sequence[UUID]) -> None:
    """The worker's store: the order locks of the batch's scopes, shared."""
    await q().share_event_orders(conn, project_id=project_id, event_ids=list(event_ids))


async def set_event_contexts(
    conn: Conn,
    project_id: str,
    pending: list[PendingContext],
    embeddings: list[np.ndarray | None],
) -> int:
    """Stores the batch's vectors (None: the event's own); returns how many were stored."""
    stored: int = await q().set_event_contexts(
        conn,
        project_id=project_id,
        event_ids=[p.event_id for p in pending],
        before_ids=[p.before_id for p in pending],
        embeddings=[None if e is None else vectors([e])[0] for e in embeddings],
    )
    return stored


async def count_pending_contexts_all_projects(conn: Conn) -> int:
    """The haki_event_context_pending gauge: events without a vector in context, up to 100,001."""
    return int(await q().count_event_contexts_pending_all_projects(conn))
