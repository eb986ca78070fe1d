"""The database's liveness."""

from __future__ import annotations

from service.repository.base import Conn, q


async def ping(conn: Conn) -> bool:
    return bool(await q().ping(conn) == 1)
