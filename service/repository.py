"""The only layer that calls `queries/`: turns rows into Structs and SQL failures into domain errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any, TypeAlias
from uuid import UUID

import asyncpg
import numpy as np
from pgvector import Vector

from service.errors import InvalidInput
from service.queries_protocol import Queries
from service.sql import load_queries
from service.structs import ConflictMember, ConflictSet, Fact

Conn: TypeAlias = asyncpg.Connection


def q() -> Queries:
    return load_queries()


async def collect(rows: AsyncIterator[Any]) -> list[Any]:
    return [r async for r in rows]


def one_row(row: asyncpg.Record | None, statement: str) -> asyncpg.Record:
    """The row of a statement that always returns one (an aggregate); None would be a bug."""
    if row is None:
        raise RuntimeError(f"{statement} returned no row")
    return row


# --- api keys --------------------------------------------------------------------------------


async def insert_api_key(
    conn: Conn, project_id: str, key_id: UUID, key_hash: bytes, label: str | None
) -> None:
    await q().insert_api_key(conn, project_id=project_id, key_id=key_id, key_hash=key_hash, label=label)


async def find_api_key(conn: Conn, key_hash: bytes) -> tuple[str, UUID, bytes] | None:
    row = await q().find_api_key(conn, key_hash=key_hash)
    if row is None:
        return None
    return row["project_id"], row["key_id"], bytes(row["key_hash"])


async def revoke_api_key(conn: Conn, project_id: str, key_id: UUID) -> bool:
    return await q().revoke_api_key(conn, project_id=project_id, key_id=key_id) is not None


async def list_api_keys(conn: Conn, project_id: str) -> list[dict[str, Any]]:
    return [dict(r) for r in await collect(q().list_api_keys(conn, project_id=project_id))]


# --- facts -----------------------------------------------------------------------------------


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


def _fact(row: Any) -> Fact:
    return Fact(**dict(row))


async def get_fact(conn: Conn, project_id: str, fact_id: UUID) -> Fact | None:
    row = await q().get_fact(conn, project_id=project_id, fact_id=fact_id)
    return None if row is None else _fact(row)


async def list_facts(
    conn: Conn,
    project_id: str,
    subject_id: str | None,
    status: str | None,
    after_id: UUID | None,
    page_size: int,
) -> list[Fact]:
    rows = await collect(
        q().list_facts(
            conn,
            project_id=project_id,
            subject_id=subject_id,
            status=status,
            after_id=after_id,
            page_size=page_size,
        )
    )
    return [_fact(r) for r in rows]


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


# --- events ----------------------------------------------------------------------------------


async def insert_events(
    conn: Conn,
    project_id: str,
    subject_id: str,
    event_ids: list[UUID],
    contents: list[str],
    occurred_ats: list[datetime],
    metadatas: list[dict[str, Any] | None],
    embeddings: list[np.ndarray],
) -> None:
    await q().insert_events(
        conn,
        project_id=project_id,
        subject_id=subject_id,
        event_ids=event_ids,
        contents=contents,
        occurred_ats=occurred_ats,
        metadatas=metadatas,
        embeddings=vectors(embeddings),
    )


# --- conflicts -------------------------------------------------------------------------------


async def list_conflicts(
    conn: Conn,
    project_id: str,
    subject_id: str | None,
    status: str | None,
    conflict_set_id: UUID | None = None,
) -> list[ConflictSet]:
    rows = await collect(
        q().list_conflicts(
            conn,
            project_id=project_id,
            subject_id=subject_id,
            status=status,
            conflict_set_id=conflict_set_id,
        )
    )
    sets: dict[UUID, tuple[dict[str, Any], list[ConflictMember]]] = {}
    for r in rows:
        entry = sets.get(r["conflict_set_id"])
        if entry is None:
            head = {
                k: r[k]
                for k in (
                    "conflict_set_id",
                    "project_id",
                    "subject_id",
                    "key",
                    "status",
                    "created_at",
                    "resolved_at",
                )
            }
            entry = sets[r["conflict_set_id"]] = (head, [])
        entry[1].append(
            ConflictMember(
                fact_id=r["fact_id"],
                content=r["content"],
                status=r["fact_status"],
                valid_from=r["valid_from"],
                recorded_from=r["recorded_from"],
            )
        )
    return [ConflictSet(**head, members=members) for head, members in sets.values()]


async def lock_conflict_set(
    conn: Conn, project_id: str, conflict_set_id: UUID
) -> tuple[str, set[UUID]] | None:
    row = await q().lock_conflict_set(conn, project_id=project_id, conflict_set_id=conflict_set_id)
    if row is None:
        return None
    return row["status"], set(row["member_ids"])


async def resolve_conflict_set(
    conn: Conn, project_id: str, conflict_set_id: UUID, keep: Sequence[UUID]
) -> None:
    await q().resolve_conflict_set(
        conn, project_id=project_id, conflict_set_id=conflict_set_id, keep_ids=list(keep)
    )


# --- health ----------------------------------------------------------------------------------


async def ping(conn: Conn) -> bool:
    return bool(await q().ping(conn) == 1)


# --- idempotency keys ------------------------------------------------------------------------


async def find_idempotent_response(
    conn: Conn, project_id: str, idempotency_key: str
) -> tuple[bytes, int, Any] | None:
    row = await q().find_idempotent_response(conn, project_id=project_id, idempotency_key=idempotency_key)
    if row is None:
        return None
    return bytes(row["request_sha256"]), row["status_code"], row["response"]


async def claim_idempotency_key(
    conn: Conn, project_id: str, idempotency_key: str, request_sha256: bytes, ttl_seconds: float
) -> bool:
    claimed = await q().claim_idempotency_key(
        conn,
        project_id=project_id,
        idempotency_key=idempotency_key,
        request_sha256=request_sha256,
        ttl_seconds=ttl_seconds,
    )
    return claimed is not None


async def store_idempotent_response(
    conn: Conn, project_id: str, idempotency_key: str, status_code: int, response: Any
) -> None:
    await q().store_idempotent_response(
        conn,
        project_id=project_id,
        idempotency_key=idempotency_key,
        status_code=status_code,
        response=response,
    )


async def purge_idempotency_keys(conn: Conn, project_id: str, max_rows: int) -> None:
    await q().purge_idempotency_keys(conn, project_id=project_id, max_rows=max_rows)
