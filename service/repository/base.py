"""What every repository module shares: the connection type, the typed statements, row helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeAlias, TypeVar

import asyncpg
import msgspec

from service.db.connection import CLIENT_GRACE_SECONDS
from service.db.sql import load_queries
from service.queries_protocol import Queries

S = TypeVar("S", bound=msgspec.Struct)

# A connection of the pool (or the test's own); the handlers' injected one is api.deps.ConnDep.
Conn: TypeAlias = asyncpg.Connection


def q() -> Queries:
    return load_queries()


@asynccontextmanager
async def long_transaction(conn: Conn, timeout_ms: int) -> AsyncIterator[None]:
    """A transaction (a savepoint inside one) whose statements may each take `timeout_ms`: the
    server's statement_timeout until the transaction ends, and the client's wait
    (service/db/connection.py HakiConnection) until this block ends. For work that grows with
    its input: an erasure, a batch write, a re-embedding's switch. 0 lifts the server's limit
    only: the client waits as its connection does (`connect()`'s for ever, a pool's its
    command_timeout)."""
    async with conn.transaction():
        # Bound once BEGIN has run on the connection: a lost connection detaches a pool's proxy
        # from it, and the restore must not turn that connection error into another. (COMMIT has
        # no deferred work here: the usual wait is enough for it.)
        set_wait, outer = conn.set_client_timeout, conn.client_timeout
        set_wait(timeout_ms / 1000 + CLIENT_GRACE_SECONDS if timeout_ms else None)
        try:
            await q().extend_statement_timeout(conn, timeout_ms=timeout_ms)
            yield
        finally:
            set_wait(outer)


@asynccontextmanager
async def custom_plans(conn: Conn) -> AsyncIterator[None]:
    """A transaction (a savepoint inside one) whose statements are planned for their parameters,
    never from a cached generic plan (queries/lifecycle.sql, use_custom_plans)."""
    async with conn.transaction():
        await q().use_custom_plans(conn)
        yield


async def collect(rows: AsyncIterator[Any]) -> list[Any]:
    return [r async for r in rows]


def one_row(row: asyncpg.Record | None, statement: str) -> asyncpg.Record:
    """The row of a statement that always returns one (an aggregate); None would be a bug."""
    if row is None:
        raise RuntimeError(f"{statement} returned no row")
    return row


def as_struct(kind: type[S], row: Mapping[str, Any] | None, **fields: Any) -> S | None:
    """A statement's row as the Struct its columns name, with the `fields` it does not return;
    None when there is no row."""
    return None if row is None else kind(**fields, **dict(row))


async def as_structs(kind: type[S], rows: AsyncIterator[Any]) -> list[S]:
    """Every row of a statement as the Struct its columns name."""
    return [kind(**dict(r)) async for r in rows]
