"""The app in the test's event loop: an httpx client on the ASGI app, on the test's own connection
(make_client, SharedApp) or on a real pool of its own (pooled_client); and a database made ready
for one (migrated_key)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import asyncpg
import httpx
import msgspec
from litestar import Litestar

from service.api import auth
from service.api.ratelimit import RateLimiter, WorkRateLimiter
from service.app import create_app
from service.db import connect, create_pool, init_connection
from service.db.migrations import migrate
from service.embedding.embedder import Embedder
from service.settings import Settings


class SingleConnectionPool:
    """Lends the test's own connection, so app writes stay inside the test transaction. A shared
    app's pool lends each test's connection in turn (`conn` is set by the client fixture).

    Like a pool of one, it lends the connection to one task at a time: two requests in flight
    at once (an MCP client's background stream beside its next call) would otherwise run on it
    together, and asyncpg refuses the second ("another operation is in progress"). A task that
    holds it gets it again at once, as a nested acquire of the same request."""

    def __init__(self, conn: asyncpg.Connection | None) -> None:
        self.conn = conn
        self._lent = asyncio.Lock()
        self._holder: asyncio.Task[Any] | None = None

    @asynccontextmanager
    async def acquire(self, timeout: float | None = None) -> AsyncIterator[asyncpg.Connection]:  # noqa: ASYNC109
        assert self.conn is not None, "no test connection lent to the app"
        task = asyncio.current_task()
        if task is not None and task is self._holder:
            yield self.conn
            return
        async with self._lent:
            self._holder = task
            try:
                yield self.conn
            finally:
                self._holder = None

    async def close(self) -> None:
        return None


def asgi_transport(app: Litestar) -> httpx.ASGITransport:
    """httpx's transport on the app in this event loop. Litestar's ASGI callable is typed with
    its own scope and event types, httpx's with plain mappings: the same protocol."""
    return httpx.ASGITransport(app=cast(Any, app))


@asynccontextmanager
async def make_client(
    settings: Settings, conn: asyncpg.Connection, embedder: Embedder, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on an app of its own, for settings no shared app has (see SharedApp)."""
    app_settings = settings if not overrides else msgspec.structs.replace(settings, **overrides)
    async with SharedApp(app_settings, embedder).client(conn) as client:
        yield client


class SharedApp:
    """One app for every test of a session (building one takes about 44 ms, and most tests
    only need the default one). Its client is an httpx client on the ASGI app in *this* event
    loop (Litestar's AsyncTestClient runs the app on a portal thread, where the test's asyncpg
    connection cannot be used); the pool and embedder are handed in, so the app's lifespan has
    nothing to start. Each test lends it its own connection and gets fresh rate
    limiters, so nothing but the metrics registry carries over (tests read metric deltas)."""

    def __init__(self, settings: Settings, embedder: Embedder) -> None:
        self.settings = settings
        self.pool = SingleConnectionPool(None)
        self.app = create_app(settings, pool=self.pool, embedder=embedder)

    @asynccontextmanager
    async def client(self, conn: asyncpg.Connection) -> AsyncIterator[httpx.AsyncClient]:
        self.pool.conn = conn
        self.app.state.rate_limiter = RateLimiter(self.settings.rate_limit_per_minute)
        self.app.state.work_limiter = WorkRateLimiter(self.settings.embed_chars_per_minute)
        try:
            transport = asgi_transport(self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
                yield client
        finally:
            self.pool.conn = None


@asynccontextmanager
async def pooled_client(
    settings: Settings, embedder: Embedder
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """An httpx client on an app with a real pool of its own (committed data, concurrent
    requests, the pool's own faults), and that pool; the pool is closed on the way out."""
    pool = await create_pool(settings)
    app = create_app(settings, pool=pool, embedder=embedder)
    try:
        async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://t") as client:
            yield client, pool
    finally:
        await pool.close()


async def migrated_key(settings: Settings, project: str) -> str:
    """Migrates the database of `settings` and returns a new API key of `project` on it."""
    conn = await connect(settings)
    try:
        await migrate(conn)
        await init_connection(conn)
        _, key = await auth.create_key(conn, project)
    finally:
        await conn.close()
    return key
