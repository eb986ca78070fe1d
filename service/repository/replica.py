"""WAL positions of the primary and the read replica (service/db/replica.py, queries/replica.sql)."""

from __future__ import annotations

from typing import Any

from service.repository.base import Conn, q


async def wal_insert_lsn(conn: Conn) -> int:
    """The primary's WAL insert position as a byte offset (asyncpg decodes pg_lsn to int)."""
    return int(await q().wal_insert_lsn(conn))


async def standby_position(conn: Conn) -> tuple[bool, int | None]:
    row: Any = await q().standby_position(conn)
    lsn = row["replay_lsn"]
    return bool(row["in_recovery"]), None if lsn is None else int(lsn)
