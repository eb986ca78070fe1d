"""The database's liveness, and whether pgvector runs on it."""

from __future__ import annotations

import asyncpg
import msgspec

from service.repository.base import Conn, one_row, q


class VectorExtension(msgspec.Struct, frozen=True, kw_only=True):
    """pgvector in this database: the version installed (None: not created yet) and the version
    its files on the server offer (None: not available at all)."""

    installed_version: str | None
    available_version: str | None


class VectorProbe(msgspec.Struct, frozen=True, kw_only=True):
    """What the vector probe read back: the id its HNSW search found nearest to row 3 (3 when the
    index works), and the largest cosine distances as `vector` and `halfvec` (within [0, 2])."""

    nearest_id: int
    max_distance: float
    max_half_distance: float


async def ping(conn: Conn) -> bool:
    return bool(await q().ping(conn) == 1)


async def vector_extension(conn: Conn) -> VectorExtension:
    return VectorExtension(**dict(one_row(await q().vector_extension(conn), "vector_extension")))


async def update_vector_extension(conn: Conn) -> None:
    await q().update_vector_extension(conn)


async def probe_vectors(conn: Conn) -> VectorProbe:
    """Runs pgvector's distances, an HNSW build with inserts into a graph that has rows, and an
    HNSW search, in a transaction that is rolled back: nothing stays. A pgvector built for
    instructions this CPU lacks kills the backend here (the connection drops)."""
    try:
        return await _probe_once(conn)
    except (asyncpg.UniqueViolationError, asyncpg.DuplicateObjectError):
        # Its CREATE EXTENSION waited on another process's migration 0001 creating pgvector, which
        # then committed: the extension exists now, and the probe runs again on it.
        return await _probe_once(conn)


async def _probe_once(conn: Conn) -> VectorProbe:
    tx = conn.transaction()
    await tx.start()
    try:
        await q().probe_vector_setup(conn)
        row = one_row(await q().probe_vector_search(conn), "probe_vector_search")
        return VectorProbe(**dict(row))
    finally:
        if not conn.is_closed():
            await tx.rollback()
