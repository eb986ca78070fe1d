"""Repository of the memory browser (/ui): its server-side sessions, its subject list and the
conflict sets of a trace's facts; the only code that runs the browser's statements of ui.sql."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from service.repository.base import Conn, as_struct, as_structs, collect, q
from service.structs import UiSession, UiSubject


async def create_session(
    conn: Conn, project_id: str, session_hash: bytes, key_id: UUID, csrf_token: str, expires_at: datetime
) -> None:
    async with conn.transaction():
        await q().delete_expired_ui_sessions(conn, project_id=project_id)
        await q().create_ui_session(
            conn,
            project_id=project_id,
            session_hash=session_hash,
            key_id=key_id,
            csrf_token=csrf_token,
            expires_at=expires_at,
        )


async def get_session(conn: Conn, project_id: str, session_hash: bytes) -> UiSession | None:
    row = await q().get_ui_session(conn, project_id=project_id, session_hash=session_hash)
    return as_struct(UiSession, row, project_id=project_id)


async def delete_session(conn: Conn, project_id: str, session_hash: bytes) -> None:
    await q().delete_ui_session(conn, project_id=project_id, session_hash=session_hash)


async def list_subjects(
    conn: Conn, project_id: str, search: str | None, after_subject: str | None, page_size: int
) -> list[UiSubject]:
    rows = q().list_ui_subjects(
        conn, project_id=project_id, search=search, after_subject=after_subject, page_size=page_size
    )
    return await as_structs(UiSubject, rows)


async def conflict_sets_of_facts(conn: Conn, project_id: str, fact_ids: Sequence[UUID]) -> dict[UUID, UUID]:
    """fact_id -> the latest conflict set holding it (the open one, when there is one)."""
    if not fact_ids:
        return {}
    rows = await collect(
        q().list_conflict_sets_of_facts(conn, project_id=project_id, fact_ids=list(fact_ids))
    )
    return {r["fact_id"]: r["conflict_set_id"] for r in rows}


async def get_subject(conn: Conn, project_id: str, subject_id: str) -> UiSubject | None:
    """A subject's summary, None when it holds no fact, event or context call."""
    row = await q().get_ui_subject(conn, project_id=project_id, subject_id=subject_id)
    if row is None or not (row["facts"] or row["events"] or row["last_call_at"]):
        return None
    return as_struct(UiSubject, row)
