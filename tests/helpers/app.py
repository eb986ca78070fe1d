"""The app on the test's own connection: an httpx client on the ASGI app in the test's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import msgspec

from service.app import create_app
from service.embedder import Embedder
from service.settings import Settings


class SingleConnectionPool:
    """Lends the test's own connection, so app writes stay inside the test transaction."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    @asynccontextmanager
    async def acquire(self, timeout: float | None = None) -> AsyncIterator[asyncpg.Connection]:  # noqa: ASYNC109
        yield self.conn

    async def close(self) -> None:
        return None


@asynccontextmanager
async def make_client(
    settings: Settings, conn: asyncpg.Connection, embedder: Embedder, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the ASGI app in *this* event loop (Litestar's AsyncTestClient runs the
    app on a portal thread, where the test's asyncpg connection cannot be used). The pool and
    embedder are handed in, so the app's lifespan has nothing to start."""
    app_settings = settings if not overrides else msgspec.structs.replace(settings, **overrides)
    app = create_app(app_settings, pool=SingleConnectionPool(conn), embedder=embedder)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client
