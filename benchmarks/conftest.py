"""Fixtures of the latency benchmarks: one throw-away embedded PostgreSQL, seeded once per session.

See benchmarks/world.py for what the world holds. This folder is outside `testpaths`, so a plain
`pytest` run of tests/ never collects it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.seed import load, queries
from benchmarks.world import PROJECT, QUERY_POOL, WORLD, World
from service.db import connect, init_connection
from service.db.embedded import embedded_server, embedded_url
from service.db.migrations import migrate
from service.settings import Settings

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


@pytest.fixture(scope="session")
def world() -> Iterator[World]:
    base = Path(os.environ.get("HAKI_BENCH_TMP", os.environ.get("HAKI_TEST_TMP", tempfile.gettempdir())))
    data_dir = Path(tempfile.mkdtemp(prefix="haki-bench-", dir=base))
    runner = asyncio.Runner()
    settings = Settings(data_dir=data_dir, embed_provider="hash", database_url=embedded_url(data_dir))

    async def setup() -> World:
        conn = await connect(settings)
        await migrate(conn)
        await init_connection(conn)
        start = time.perf_counter()
        scopes, report = await load(conn, PROJECT, WORLD)
        seconds = time.perf_counter() - start
        # The session settings of the load (no statement timeout...) must not leak into the
        # measured calls: a fresh connection, as the service's pool would lend.
        await conn.close()
        conn = await connect(settings)
        await init_connection(conn)
        return World(
            runner=runner,
            settings=settings,
            conn=conn,
            scopes=scopes,
            load_seconds=seconds,
            index_seconds=report.index_seconds,
            queries=queries(QUERY_POOL),
        )

    w = runner.run(setup())
    try:
        yield w
    finally:
        runner.run(w.conn.close())
        runner.close()
        embedded_server(data_dir).cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)
