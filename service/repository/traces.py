"""Repository of the metrics and the trace inspector: the only code that runs their queries."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from service.repository.base import Conn, collect, q


async def count_open_conflicts_all_projects(conn: Conn) -> int:
    return int(await q().count_open_conflicts_all_projects(conn))


async def recent_context_calls(
    conn: Conn, project_id: str, subject_id: str | None, page_size: int
) -> list[dict[str, Any]]:
    rows = await collect(
        q().list_recent_context_calls(conn, project_id=project_id, subject_id=subject_id, page_size=page_size)
    )
    return [dict(r) for r in rows]


async def trace_items(conn: Conn, project_id: str, trace_id: UUID) -> list[dict[str, Any]]:
    rows = await collect(q().list_trace_items(conn, project_id=project_id, trace_id=trace_id))
    return [dict(r) for r in rows]


async def get_context_call(conn: Conn, project_id: str, trace_id: UUID) -> dict[str, Any] | None:
    row = await q().get_context_call(conn, project_id=project_id, trace_id=trace_id)
    return None if row is None else {**dict(row), "warnings": list(row["warnings"])}
