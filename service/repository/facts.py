"""Facts: batch writes, conflict detection, reads and patches."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np
from pgvector import Vector

from service.errors import InvalidInput
from service.repository.base import Conn, as_struct, as_structs, collect, q
from service.structs import Fact


async def supersede_facts(
    conn: Conn,
    project_id: str,
    subject_id: str,
    old_ids: Sequence[UUID],
    new_valid_froms: Sequence[datetime | None],
) -> set[UUID]:
    rows = await collect(
        q().supersede_facts(
            conn,
            project_id=project_id,
            subject_id=subject_id,
            old_ids=list(old_ids),
            new_valid_froms=list(new_valid_froms),
        )
    )
    return {r["fact_id"] for r in rows}


async def missing_events(
    conn: Conn, project_id: str, subject_id: str, event_ids: Sequence[UUID]
) -> set[UUID]:
    rows = await collect(
        q().missing_events(conn, project_id=project_id, subject_id=subject_id, event_ids=list(event_ids))
    )
    return {r["event_id"] for r in rows}


def vectors(embeddings: Sequence[np.ndarray]) -> list[Vector]:
    """asyncpg would walk a bare ndarray inside an array parameter as a nested sequence."""
    return [Vector(e) for e in embeddings]


async def insert_facts(conn: Conn, project_id: str, subject_id: str, columns: dict[str, list[Any]]) -> None:
    columns = {**columns, "embeddings": vectors(columns["embeddings"])}
    await q().insert_facts(conn, project_id=project_id, subject_id=subject_id, **columns)


async def restore_facts(conn: Conn, project_id: str, subject_id: str, columns: dict[str, list[Any]]) -> None:
    """insert_facts' columns plus statuses and believed_valid_tos: facts written as exported."""
    columns = {**columns, "embeddings": vectors(columns["embeddings"])}
    await q().restore_facts(conn, project_id=project_id, subject_id=subject_id, **columns)


async def detect_conflicts(
    conn: Conn, project_id: str, subject_id: str, fact_ids: Sequence[UUID]
) -> dict[UUID, UUID]:
    rows = await collect(
        q().detect_conflicts(conn, project_id=project_id, subject_id=subject_id, fact_ids=list(fact_ids))
    )
    return {r["fact_id"]: r["conflict_set_id"] for r in rows}


async def lock_fact_keys(conn: Conn, project_id: str, subject_id: str, keys: Sequence[str | None]) -> None:
    """Takes the transaction's lock on each key of a batch (None skipped): see queries/facts.sql."""
    await q().lock_fact_keys(conn, project_id=project_id, subject_id=subject_id, keys=list(keys))


async def fact_keys(conn: Conn, project_id: str, subject_id: str, fact_ids: Sequence[UUID]) -> list[str]:
    """The keys of these facts of one scope (the facts without one add none)."""
    rows = await collect(
        q().fact_keys(conn, project_id=project_id, subject_id=subject_id, fact_ids=list(fact_ids))
    )
    return [r["key"] for r in rows]


async def get_fact(conn: Conn, project_id: str, fact_id: UUID) -> Fact | None:
    return as_struct(Fact, await q().get_fact(conn, project_id=project_id, fact_id=fact_id))


async def list_facts(
    conn: Conn,
    project_id: str,
    subject_id: str | None,
    status: str | None,
    after_id: UUID | None,
    page_size: int,
) -> list[Fact]:
    return await as_structs(
        Fact,
        q().list_facts(
            conn,
            project_id=project_id,
            subject_id=subject_id,
            status=status,
            after_id=after_id,
            page_size=page_size,
        ),
    )


async def list_successors(conn: Conn, project_id: str, subject_id: str, fact_id: UUID) -> list[Fact]:
    return await as_structs(
        Fact, q().list_successors(conn, project_id=project_id, subject_id=subject_id, fact_id=fact_id)
    )


async def patch_fact(
    conn: Conn, project_id: str, fact_id: UUID, retract: bool, valid_to: datetime | None
) -> bool:
    try:
        found = await q().patch_fact(
            conn, project_id=project_id, fact_id=fact_id, retract=retract, valid_to=valid_to
        )
    except asyncpg.CheckViolationError as exc:
        raise InvalidInput("valid_to", "must be later than the fact's valid_from") from exc
    return found is not None
