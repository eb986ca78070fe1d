"""asyncpg pool: one per process, with the pgvector and jsonb codecs registered per connection."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Protocol, TypeAlias

import asyncpg
import msgspec
from pgvector.asyncpg import register_vector

from service.db.connection import CLIENT_GRACE_SECONDS, STANDBY_CLIENT_GRACE_SECONDS, HakiConnection
from service.db.embedded import embedded_url
from service.redaction import redacted_database_url
from service.settings import Settings


class Lent(Protocol):
    """A pooled connection lent to one request (api/deps.py `Lease`), which the request may
    give back to the pool while it waits on something that needs no database: `conn` is another
    connection after `set_aside`, so it is read again after a wait, never kept across one."""

    @property
    def conn(self) -> asyncpg.Connection: ...

    def set_aside(self) -> AbstractAsyncContextManager[None]: ...


# One connection of a pool, borrowed for a block (`pool.acquire` with its time-out bound): where
# a context call whose retrieval ran on the standby writes its trace (service/db/replica.py).
Acquire: TypeAlias = Callable[[], AbstractAsyncContextManager[asyncpg.Connection]]


# How a failure to open a connection is named, by its class (the first that matches).
CONNECT_PROBLEMS: Final[tuple[tuple[type[Exception] | tuple[type[Exception], ...], str], ...]] = (
    (asyncpg.InvalidPasswordError, "authentication failed"),
    (asyncpg.InvalidAuthorizationSpecificationError, "access refused"),  # no such role, pg_hba.conf
    (asyncpg.InvalidCatalogNameError, "database missing"),
    (asyncpg.PostgresError, "the server refused the connection"),  # starting up, too many clients
    ((ValueError, OverflowError), "malformed URL"),  # asyncpg's ClientConfigurationError included
)


def unreachable_reason(exc: Exception, timeout: float) -> str:
    """Why asyncpg could not open a connection, in one line that names the problem."""
    said = " ".join(str(exc).split())
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s (HAKI_CONNECT_TIMEOUT_SECONDS)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused: is PostgreSQL running and listening on that host and port?"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})"
    if isinstance(exc, OSError):
        # asyncpg's own strerror repeats the address ("Connect call failed ('10.0.0.1', 5432)").
        return f"unreachable ({os.strerror(exc.errno) if exc.errno else said})"
    for kinds, problem in CONNECT_PROBLEMS:
        if isinstance(exc, kinds):
            return f"{problem}: {said}"
    return f"{type(exc).__name__}: {said}"


class DatabaseUnreachable(ConnectionError):
    """A connection to the database could not be opened. A ConnectionError: the service's
    handlers (service/errors.py) take it for a database that is down, as they took asyncpg's."""

    def __init__(self, url: str, reason: str) -> None:
        self.where = redacted_database_url(url)
        self.reason = reason
        super().__init__(f"cannot connect to the database at {self.where}: {reason}")


def database_url(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    return embedded_url(settings.data_dir)


async def init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        encoder=lambda value: msgspec.json.encode(value).decode(),
        decoder=msgspec.json.decode,
        format="text",
    )


def server_settings(settings: Settings) -> dict[str, str]:
    return {
        "application_name": "haki",
        "statement_timeout": str(settings.statement_timeout_ms),
        # A client that died mid-transaction must not hold locks for ever.
        "idle_in_transaction_session_timeout": "60000",
    }


async def keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset on release: nothing to undo. asyncpg's default runs a reset query
    (`RESET ALL; UNLISTEN *; CLOSE ALL; pg_advisory_unlock_all()`): one more round trip at the
    end of every request, 0.14 ms idle and about 1 ms on 2 busy cores (docs/performance.md).
    Haki's statements leave no session state behind (tests/test_queries.py checks the files:
    only SET LOCAL or set_config(..., true), only transaction-level advisory locks, no LISTEN,
    no cursor WITH HOLD), and asyncpg still rolls back a transaction left open before calling
    this."""


def _connect_options(settings: Settings) -> dict[str, Any]:
    """What every connection Haki opens is opened with, pooled or not."""
    return {
        "server_settings": server_settings(settings),
        "timeout": settings.connect_timeout_seconds,
        "statement_cache_size": settings.db_statement_cache_size,
        "connection_class": HakiConnection,
    }


def _pool_options(settings: Settings, grace_seconds: float = CLIENT_GRACE_SECONDS) -> dict[str, Any]:
    """What the primary's pool and the standby's share: everything but the address, min_size
    and the client's grace past the statement timeout."""
    return {
        **_connect_options(settings),
        "max_size": settings.pool_max_size,
        "init": init_connection,
        # 0, no statement timeout: the client waits as long (asyncpg's None).
        "command_timeout": (
            settings.statement_timeout_ms / 1000 + grace_seconds if settings.statement_timeout_ms else None
        ),
        "reset": keep_session,
    }


async def create_pool(settings: Settings, url: str | None = None) -> asyncpg.Pool:
    pool: asyncpg.Pool = await asyncpg.create_pool(
        url or database_url(settings), min_size=settings.pool_min_size, **_pool_options(settings)
    )
    return pool


async def connect(settings: Settings, url: str | None = None) -> asyncpg.Connection:
    """One connection of its own; DatabaseUnreachable, with the reason in words, when it cannot
    be opened (every command's first connection: `haki` prints the reason, no traceback)."""
    target = url or database_url(settings)
    try:
        conn: asyncpg.Connection = await asyncpg.connect(target, **_connect_options(settings))
    except Exception as exc:  # opening is all asyncpg.connect does: any failure is the finding
        raise DatabaseUnreachable(target, unreachable_reason(exc, settings.connect_timeout_seconds)) from exc
    return conn


async def create_read_pool(settings: Settings, url: str) -> asyncpg.Pool:
    """The standby's pool (HAKI_DATABASE_READ_URL, service/db/replica.py): the same sizes and
    settings, and no connection at start (min_size 0): a standby that is down when Haki starts
    must not keep it from starting, the primary serves until the monitor finds the standby. Its
    client waits less past the statement timeout: a hung standby's read runs again on the primary."""
    options = _pool_options(settings, STANDBY_CLIENT_GRACE_SECONDS)
    pool: asyncpg.Pool = await asyncpg.create_pool(url, min_size=0, **options)
    return pool
