"""API keys: stored as hashes, looked up, revoked."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from service.repository.base import Conn, collect, q


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


async def list_api_keys(conn: Conn, project_id: str | None) -> list[dict[str, Any]]:
    """The keys of `project_id`, or of every project when it is None (`haki keys` needs no project)."""
    return [dict(r) for r in await collect(q().list_api_keys(conn, project_id=project_id))]
