"""ConflictSets: listed with their members, locked and resolved."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from service.constants import CONFLICT_PAGE_MEMBERS
from service.repository.base import Conn, collect, custom_plans, q
from service.structs import ConflictMember, ConflictSet

# A set's own columns of list_conflicts' rows (the others are its member's).
_SET_COLUMNS = ("conflict_set_id", "project_id", "subject_id", "key", "status", "created_at", "resolved_at")


async def conflict_page(
    conn: Conn,
    project_id: str,
    subject_id: str | None,
    status: str | None,
    conflict_set_id: UUID | None = None,
    *,
    after: tuple[datetime, UUID] | None = None,
    page_members: int = CONFLICT_PAGE_MEMBERS,
) -> tuple[list[ConflictSet], bool]:
    """One page of conflict sets, newest first after `after` (the last set of the page before:
    its created_at and id), whole sets of page_members members at most (a larger set alone);
    and whether another set follows."""
    before_created_at, before_set_id = after if after is not None else (None, None)
    # Its right index depends on which filters are given: planned for them on every call.
    async with custom_plans(conn):
        rows = await collect(
            q().list_conflicts(
                conn,
                project_id=project_id,
                subject_id=subject_id,
                status=status,
                conflict_set_id=conflict_set_id,
                before_created_at=before_created_at,
                before_set_id=before_set_id,
                page_members=page_members,
            )
        )
    sets: dict[UUID, tuple[dict[str, Any], list[ConflictMember]]] = {}
    for r in rows:
        entry = sets.get(r["conflict_set_id"])
        if entry is None:
            head = {k: r[k] for k in _SET_COLUMNS}
            entry = sets[r["conflict_set_id"]] = (head, [])
        if r["fact_id"] is not None:  # a set without members is listed, empty
            entry[1].append(
                ConflictMember(
                    fact_id=r["fact_id"],
                    content=r["content"],
                    status=r["fact_status"],
                    valid_from=r["valid_from"],
                    recorded_from=r["recorded_from"],
                )
            )
    listed = [ConflictSet(**head, members=members) for head, members in sets.values()]
    return listed, bool(rows and rows[0]["more"])


async def list_conflicts(
    conn: Conn,
    project_id: str,
    subject_id: str | None,
    status: str | None,
    conflict_set_id: UUID | None = None,
) -> list[ConflictSet]:
    """The first page of conflict_page; one set (conflict_set_id) is always listed whole."""
    return (await conflict_page(conn, project_id, subject_id, status, conflict_set_id))[0]


async def conflict_set_scope(
    conn: Conn, project_id: str, conflict_set_id: UUID
) -> tuple[str, str, int] | None:
    """The (subject_id, key, member count) of a conflict set, None when the project has no such
    set."""
    row = await q().get_conflict_set_scope(conn, project_id=project_id, conflict_set_id=conflict_set_id)
    if row is None:
        return None
    return row["subject_id"], row["key"], row["members"]


async def lock_conflict_set(
    conn: Conn, project_id: str, conflict_set_id: UUID
) -> tuple[str, set[UUID], set[UUID]] | None:
    """The set's status, its members and its active members, the set locked."""
    row = await q().lock_conflict_set(conn, project_id=project_id, conflict_set_id=conflict_set_id)
    if row is None:
        return None
    return row["status"], set(row["member_ids"]), set(row["active_ids"])


async def resolve_conflict_set(
    conn: Conn, project_id: str, conflict_set_id: UUID, keep: Sequence[UUID]
) -> None:
    await q().resolve_conflict_set(
        conn, project_id=project_id, conflict_set_id=conflict_set_id, keep_ids=list(keep)
    )


async def resolve_left_conflict_sets(conn: Conn, project_id: str, fact_ids: Sequence[UUID]) -> list[UUID]:
    """Resolves the open sets of these facts left with fewer than two active members."""
    rows = await collect(q().resolve_left_conflict_sets(conn, project_id=project_id, fact_ids=list(fact_ids)))
    return [r["conflict_set_id"] for r in rows]


async def restore_conflict_sets(
    conn: Conn, project_id: str, subject_id: str, columns: dict[str, list[Any]]
) -> None:
    """Inserts conflict sets as exported: columns conflict_set_ids, keys, statuses, created_ats,
    resolved_ats."""
    await q().restore_conflict_sets(conn, project_id=project_id, subject_id=subject_id, **columns)


async def restore_conflict_members(
    conn: Conn, project_id: str, conflict_set_ids: Sequence[UUID], fact_ids: Sequence[UUID]
) -> None:
    """Inserts the (set, fact) member pairs of restored sets."""
    await q().restore_conflict_members(
        conn, project_id=project_id, conflict_set_ids=list(conflict_set_ids), fact_ids=list(fact_ids)
    )
