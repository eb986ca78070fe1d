"""Repository of the memory lifecycle: the only code that runs queries/lifecycle.sql."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar
from uuid import UUID

from service.repository.base import Conn, as_struct, as_structs, collect, one_row, q
from service.structs import Event, EventErasure, FactErasure, SubjectErasure, SubjectSummary

E = TypeVar("E", FactErasure, EventErasure)

# The kind of memory each answer of erase_memory is about (erasures.kind, `<kind>_id` its id).
ERASED_KIND: dict[type[FactErasure | EventErasure], str] = {FactErasure: "fact", EventErasure: "event"}


async def lock_erasure_scope(
    conn: Conn, project_id: str, kind: str, *, subject_id: str | None = None, item_id: UUID | None = None
) -> None:
    """Holds the scope's erasure lock until the transaction ends: a `subject` erasure names its
    subject, a `fact` or `event` erasure its item (no lock when there is no such item)."""
    await q().lock_erasure_scope(
        conn, project_id=project_id, kind=kind, subject_id=subject_id, item_id=item_id
    )


async def share_erasure_scope(conn: Conn, project_id: str, subject_id: str) -> None:
    """Holds the scope's erasure lock, shared, until the transaction ends (a write of the scope)."""
    await q().share_erasure_scope(conn, project_id=project_id, subject_id=subject_id)


async def share_event_scopes(conn: Conn, project_id: str, event_ids: Sequence[UUID]) -> None:
    """Holds, shared, the erasure lock of every scope holding one of these events, in one order."""
    await q().share_event_scopes(conn, project_id=project_id, event_ids=list(event_ids))


async def erase_subject(
    conn: Conn, project_id: str, subject_id: str, erasure_id: UUID, key_id: UUID
) -> SubjectErasure:
    row = await q().erase_subject(
        conn, project_id=project_id, subject_id=subject_id, erasure_id=erasure_id, key_id=key_id
    )
    return SubjectErasure(project_id=project_id, subject_id=subject_id, **dict(one_row(row, "erase_subject")))


async def erase_memory(
    conn: Conn, answer: type[E], project_id: str, item_id: UUID, erasure_id: UUID, key_id: UUID
) -> E | None:
    """Erases one fact or one event, `answer` saying which; None when there is no such memory."""
    kind = ERASED_KIND[answer]
    row = await q().erase_memory(
        conn, project_id=project_id, kind=kind, item_id=item_id, erasure_id=erasure_id, key_id=key_id
    )
    # The statement counts what either kind takes with it; `answer` names the counts of its kind.
    named = None if row is None else {name: row[name] for name in answer.__struct_fields__ if name in row}
    return as_struct(answer, named, **{f"{kind}_id": item_id})


async def context_call_projects(conn: Conn) -> list[str]:
    return [r["project_id"] for r in await collect(q().list_context_call_projects(conn))]


async def purge_expired_context_calls(
    conn: Conn, project_id: str, retention_days: int, max_calls: int
) -> tuple[int, int]:
    row = await q().purge_expired_context_calls(
        conn, project_id=project_id, retention_days=retention_days, max_calls=max_calls
    )
    counts = one_row(row, "purge_expired_context_calls")
    return int(counts["context_calls"]), int(counts["decisions"])


async def get_event(conn: Conn, project_id: str, event_id: UUID) -> Event | None:
    return as_struct(Event, await q().get_event(conn, project_id=project_id, event_id=event_id))


async def list_events(
    conn: Conn, project_id: str, subject_id: str | None, after_id: UUID | None, page_size: int
) -> list[Event]:
    return await as_structs(
        Event,
        q().list_events(
            conn, project_id=project_id, subject_id=subject_id, after_id=after_id, page_size=page_size
        ),
    )


async def list_subjects(
    conn: Conn, project_id: str, after_subject: str | None, page_size: int
) -> list[SubjectSummary]:
    return await as_structs(
        SubjectSummary,
        q().list_subjects(conn, project_id=project_id, after_subject=after_subject, page_size=page_size),
    )


async def export_facts(
    conn: Conn, project_id: str, subject_id: str, after_id: UUID | None, page_size: int
) -> list[dict[str, Any]]:
    return await _as_dicts(
        q().export_facts(
            conn, project_id=project_id, subject_id=subject_id, after_id=after_id, page_size=page_size
        )
    )


async def export_conflict_sets(
    conn: Conn, project_id: str, subject_id: str, after_id: UUID | None, page_size: int
) -> list[dict[str, Any]]:
    """One page of a scope's conflict sets, each with `members`, its fact ids."""
    return await _as_dicts(
        q().export_conflict_sets(
            conn, project_id=project_id, subject_id=subject_id, after_id=after_id, page_size=page_size
        )
    )


async def _as_dicts(rows: Any) -> list[dict[str, Any]]:
    """An export statement's page as dicts, which msgspec converts to the document's lines."""
    return [dict(r) for r in await collect(rows)]
