"""asyncpg pool: one per process, with the pgvector and jsonb codecs registered per connection."""

from __future__ import annotations

import asyncpg
import msgspec
from pgvector.asyncpg import register_vector

from service.embedded import embedded_url
from service.settings import Settings


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


async def create_pool(settings: Settings, url: str | None = None) -> asyncpg.Pool:
    pool: asyncpg.Pool = await asyncpg.create_pool(
        url or database_url(settings),
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        init=init_connection,
        server_settings=server_settings(settings),
        timeout=settings.connect_timeout_seconds,
        command_timeout=settings.statement_timeout_ms / 1000 + 5,
        statement_cache_size=settings.db_statement_cache_size,
    )
    return pool


async def connect(settings: Settings, url: str | None = None) -> asyncpg.Connection:
    conn: asyncpg.Connection = await asyncpg.connect(
        url or database_url(settings),
        server_settings=server_settings(settings),
        timeout=settings.connect_timeout_seconds,
        statement_cache_size=settings.db_statement_cache_size,
    )
    return conn
