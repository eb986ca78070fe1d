"""Erasure and listing: DELETE /v1/subjects/{id}, /v1/facts/{id}, /v1/events/{id};
GET /v1/events, /v1/events/{id}, /v1/subjects.

An erasure is one statement in one transaction: every row of its kind goes at commit, or none.
Erasures of one scope run one at a time (the transaction takes the scope's lock first,
lock_erasure_scope), so they never deadlock on the rows they share, and beside none of the scope's
context calls and writes, which hold that lock shared: the erasure's statement sees what they
committed (a trace, a conflict member), and later ones wait for it. It is audited in `erasures`
(counts, time, key id; no content). What it does not reach: the write-ahead log and backups keep
the rows until they rotate (docs/reliability.md, "Erasure").
"""

from __future__ import annotations

from uuid import UUID

from service.api.auth import Principal
from service.errors import NotFound
from service.ids import uuid7
from service.memory.cursors import (
    decode_id_cursor,
    decode_subject_cursor,
    encode_id_cursor,
    encode_subject_cursor,
)
from service.repository import Conn, embedding_model, long_transaction
from service.repository import lifecycle as repo
from service.settings import Settings
from service.structs import Event, EventErasure, EventPage, FactErasure, SubjectErasure, SubjectPage


async def erase_subject(
    conn: Conn, principal: Principal, settings: Settings, project_id: str, subject_id: str
) -> SubjectErasure:
    """A big subject's one statement may outlast the request statement timeout (5 s): it gets
    HAKI_ERASURE_TIMEOUT_MS, for its own transaction only."""
    principal.require(project_id)
    async with long_transaction(conn, settings.erasure_timeout_ms):
        await repo.lock_erasure_scope(conn, project_id, "subject", subject_id=subject_id)
        await embedding_model.share_model(conn, project_id)
        return await repo.erase_subject(conn, project_id, subject_id, uuid7(), principal.key_id)


async def erase_fact(conn: Conn, principal: Principal, fact_id: UUID) -> FactErasure:
    return await _erase_memory(conn, principal, FactErasure, fact_id)


async def erase_event(conn: Conn, principal: Principal, event_id: UUID) -> EventErasure:
    return await _erase_memory(conn, principal, EventErasure, event_id)


async def _erase_memory(conn: Conn, principal: Principal, answer: type[repo.E], item_id: UUID) -> repo.E:
    kind = repo.ERASED_KIND[answer]
    # The lock is its own statement: erase_memory's snapshot is taken once the lock is held, so it
    # sees what the scope's previous erasure committed (the event after an erased one, say).
    async with conn.transaction():
        await repo.lock_erasure_scope(conn, principal.project_id, kind, item_id=item_id)
        await embedding_model.share_model(conn, principal.project_id)
        erased = await repo.erase_memory(
            conn, answer, principal.project_id, item_id, uuid7(), principal.key_id
        )
    if erased is None:
        raise NotFound(f"No {kind} with this id in the key's project.", **{f"{kind}_id": str(item_id)})
    return erased


async def get_event(conn: Conn, principal: Principal, event_id: UUID) -> Event:
    event = await repo.get_event(conn, principal.project_id, event_id)
    if event is None:
        raise NotFound("No event with this id in the key's project.", event_id=str(event_id))
    return event


async def list_events(
    conn: Conn,
    principal: Principal,
    project_id: str,
    subject_id: str | None,
    limit: int,
    cursor: str | None,
) -> EventPage:
    principal.require(project_id)
    listing = (project_id, subject_id)
    after = decode_id_cursor("events", listing, cursor) if cursor else None
    rows = await repo.list_events(conn, project_id, subject_id, after, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return EventPage(
        events=rows,
        next_cursor=encode_id_cursor("events", listing, rows[-1].event_id) if more and rows else None,
    )


async def list_subjects(
    conn: Conn, principal: Principal, project_id: str, limit: int, cursor: str | None
) -> SubjectPage:
    principal.require(project_id)
    listing = (project_id,)
    after = decode_subject_cursor(listing, cursor) if cursor else None
    rows = await repo.list_subjects(conn, project_id, after, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return SubjectPage(
        subjects=rows,
        next_cursor=encode_subject_cursor(listing, rows[-1].subject_id) if more and rows else None,
    )
