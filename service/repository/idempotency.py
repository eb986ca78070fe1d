"""Idempotency keys: claimed, answered, replayed and purged."""

from __future__ import annotations

from typing import Any

from service.repository.base import Conn, q


async def find_idempotent_response(
    conn: Conn, project_id: str, idempotency_key: str
) -> tuple[bytes, int, Any] | None:
    row = await q().find_idempotent_response(conn, project_id=project_id, idempotency_key=idempotency_key)
    if row is None:
        return None
    return bytes(row["request_sha256"]), row["status_code"], row["response"]


async def claim_idempotency_key(
    conn: Conn,
    project_id: str,
    subject_id: str,
    idempotency_key: str,
    request_sha256: bytes,
    ttl_seconds: float,
) -> bool:
    claimed = await q().claim_idempotency_key(
        conn,
        project_id=project_id,
        subject_id=subject_id,
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
