"""MCP client sessions, through the official SDK: on a real `haki serve` (tests/helpers/server.py)
over streamable HTTP (`/mcp` on the service) and over stdio (`haki mcp`, a bridge to `/mcp`), and
in process, on the app with its lifespan run in the test's loop on the test's connection."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import asyncpg
import httpx2
from litestar import Litestar
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from service.app import create_app
from service.embedding.embedder import Embedder
from service.settings import Settings
from tests.helpers import bearer
from tests.helpers.app import SingleConnectionPool
from tests.helpers.server import REPO, Server


@asynccontextmanager
async def over_http(server: Server, key: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60.0) as http,
        streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_stdio(server: Server, key: str, **env: str) -> AsyncIterator[ClientSession]:
    """`haki mcp` with the server's URL and `key`, and `env` on top (HAKI_PROJECT_ID, ...)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "service.cli", "mcp"],
        cwd=str(REPO),
        env={"HAKI_URL": server.url, "HAKI_API_KEY": key, **env},
    )
    async with (
        stdio_client(params, errlog=sys.stderr) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


TRANSPORTS = {"http": over_http, "stdio": over_stdio}


@asynccontextmanager
async def mcp_in_process(
    settings: Settings, conn: asyncpg.Connection, embedder: Embedder, key: str, query: str = ""
) -> AsyncIterator[tuple[Litestar, httpx2.AsyncClient, str]]:
    """The app with its lifespan run (the /mcp server is built by it) on the test's connection,
    and an HTTP client on it holding `key`; the /mcp URL, with `query`."""
    app = create_app(settings, pool=SingleConnectionPool(conn), embedder=embedder)
    transport = httpx2.ASGITransport(app=cast(Any, app))  # Litestar's ASGI types are its own
    async with (
        app.lifespan(),
        httpx2.AsyncClient(transport=transport, base_url="http://haki.test", headers=bearer(key)) as http,
    ):
        yield app, http, f"http://haki.test/mcp{query}"


@asynccontextmanager
async def session_on(http: httpx2.AsyncClient, url: str) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def tool_session(
    settings: Settings, conn: asyncpg.Connection, embedder: Embedder, key: str, query: str = ""
) -> AsyncIterator[tuple[Litestar, ClientSession]]:
    """`mcp_in_process` with a session open on its /mcp: the app and the session."""
    async with (
        mcp_in_process(settings, conn, embedder, key, query) as (app, http, url),
        session_on(http, url) as session,
    ):
        yield app, session
