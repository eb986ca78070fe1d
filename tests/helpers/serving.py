"""The real app served by uvicorn on a loopback port, in a thread with its own event loop.

The app's lifespan runs there (its own asyncpg pool and embedder, as under `haki serve`), so
tests reach it over real HTTP and the test's event loop stays free to stop the database.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import asyncpg
import msgspec
import uvicorn

from service.api import auth
from service.app import create_app
from service.db import connect, init_connection
from service.settings import Settings
from tests.helpers.sql import load_test_queries


@contextmanager
def serve(app: Any, *, startup_timeout: float = 60.0) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="uvicorn")
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the app failed to start (see the log above)")
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not start in time")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextmanager
def serve_for_races(settings: Settings) -> Iterator[str]:
    """The app for concurrency tests: the hash embedder, no rate limit, a pool of 8 (so requests
    fired at once hold their own connections)."""
    app_settings = msgspec.structs.replace(
        settings, embed_provider="hash", rate_limit_per_minute=0, pool_min_size=8, pool_max_size=8
    )
    with serve(create_app(app_settings)) as url:
        yield url


async def new_project(settings: Settings, prefix: str) -> tuple[str, str]:
    """A fresh project id starting with `prefix`, and a key of it, committed."""
    project_id = f"{prefix}-{uuid.uuid4().hex[:12]}"
    conn = await connect(settings)
    try:
        _, key = await auth.create_key(conn, project_id)
    finally:
        await conn.close()
    return project_id, key


@asynccontextmanager
async def sessions(settings: Settings, n: int) -> AsyncIterator[list[asyncpg.Connection]]:
    """`n` sessions of their own, as the service opens them, to force an interleaving: one holds
    a lock or a row, the others run into it, one watches pg_stat_activity."""
    opened: list[asyncpg.Connection] = []
    try:
        for _ in range(n):
            opened.append(await connect(settings))
            await init_connection(opened[-1])
        yield opened
    finally:
        for conn in opened:
            await conn.close()


@asynccontextmanager
async def two_sessions(settings: Settings) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Connection]]:
    """Two sessions of their own, as the service opens them: one holds a lock, the other tries it."""
    async with sessions(settings, 2) as (holder, other):
        yield holder, other


async def waits_or_ends(
    observer: asyncpg.Connection, task: asyncio.Task[Any], conn: asyncpg.Connection
) -> bool:
    """Whether `conn`'s statement waits on a lock (False: `task` ended first), as `observer` sees
    it in pg_stat_activity: a race test's step runs until it ends or waits, then the next starts."""
    pid = conn.get_server_pid()
    deadline = asyncio.get_running_loop().time() + 10
    while not task.done():
        if await load_test_queries().test_waits_on_a_lock(observer, pid=pid):
            return True
        assert asyncio.get_running_loop().time() < deadline, "neither ended nor waited on a lock"
        await asyncio.sleep(0.01)
    return False
