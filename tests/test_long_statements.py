"""Work that grows with its input gets a longer deadline, on the server and the client alike
(service/repository/base.py `long_transaction`): a batch write and a subject erasure outlast the
request statement timeout, while a read still answers 503 at it. A lock held on facts (as a
migration rewriting the table would hold it) makes each statement wait a known time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import msgspec
import pytest

from service.db import connect, create_pool
from service.db.connection import CLIENT_GRACE_SECONDS
from service.embedding.embedder import Embedder
from service.errors import CONNECTION_LOST
from service.repository import long_transaction
from service.settings import Settings
from tests.helpers import assert_error, bearer, json_of, list_all_facts
from tests.helpers.app import migrated_key, pooled_client
from tests.helpers.sql import load_test_queries

# Each test waits on a lock for seconds.
pytestmark = pytest.mark.slow

PROJECT = "proj-long-statements"
# The request statement timeout of these tests: far below every lock they wait on.
STATEMENT_TIMEOUT_MS = 300


@pytest.fixture
async def short(settings: Settings, migrated: str) -> tuple[Settings, str]:
    short = msgspec.structs.replace(
        settings, statement_timeout_ms=STATEMENT_TIMEOUT_MS, rate_limit_per_minute=0
    )
    return short, await migrated_key(short, PROJECT)


@asynccontextmanager
async def facts_locked(settings: Settings, seconds: float) -> AsyncIterator[None]:
    """facts held in ACCESS EXCLUSIVE mode for `seconds` from the block's start, in the background."""
    locker = await connect(settings)
    locked = asyncio.Event()

    async def hold() -> None:
        async with locker.transaction():
            await load_test_queries().test_lock_facts_table(locker)
            locked.set()
            await asyncio.sleep(seconds)

    holder = asyncio.create_task(hold())
    try:
        await locked.wait()
        yield
        await holder
    finally:
        holder.cancel()
        await locker.close()


async def test_a_long_transaction_bounds_the_server_and_ends_with_its_block(
    short: tuple[Settings, str],
) -> None:
    settings, _ = short
    pool = await create_pool(settings)
    try:
        async with pool.acquire() as conn, facts_locked(settings, 2.0):
            started = time.monotonic()
            with pytest.raises(asyncpg.QueryCanceledError):
                async with long_transaction(conn, 1000):
                    await load_test_queries().test_count_facts(conn)
            # The server cancelled it at its longer timeout, not at the request's.
            assert 1.0 <= time.monotonic() - started < 1.9
            assert conn.client_timeout is None
            # Out of the block, the request's timeout again.
            started = time.monotonic()
            with pytest.raises(asyncpg.QueryCanceledError):
                await load_test_queries().test_count_facts(conn)
            assert time.monotonic() - started < 0.9
    finally:
        await pool.close()


async def test_a_nested_long_transaction_gives_the_outer_wait_back(short: tuple[Settings, str]) -> None:
    settings, _ = short
    pool = await create_pool(settings)
    try:
        async with pool.acquire() as conn:
            async with long_transaction(conn, 4000):
                async with long_transaction(conn, 2000):
                    assert conn.client_timeout == 2 + CLIENT_GRACE_SECONDS
                assert conn.client_timeout == 4 + CLIENT_GRACE_SECONDS
            assert conn.client_timeout is None
    finally:
        await pool.close()


async def test_a_connection_lost_inside_stays_a_connection_error(short: tuple[Settings, str]) -> None:
    """A lost connection detaches a pool's proxy from it: the wait's restore must not raise
    another error (an AttributeError was a 500 where a 503 was due)."""
    settings, _ = short
    pool = await create_pool(settings)
    killer = await connect(settings)
    try:
        async with pool.acquire() as conn:
            with pytest.raises(CONNECTION_LOST):
                async with long_transaction(conn, 1000):
                    await load_test_queries().test_terminate_backend(killer, pid=conn.get_server_pid())
                    await load_test_queries().test_count_facts(conn)
        # Lost while idle, before the transaction: the connection's own error too.
        async with pool.acquire() as conn:
            await load_test_queries().test_terminate_backend(killer, pid=conn.get_server_pid())
            await asyncio.sleep(0.5)  # the server's notice arrives and detaches the proxy
            with pytest.raises(CONNECTION_LOST):
                async with long_transaction(conn, 1000):
                    await load_test_queries().test_count_facts(conn)
    finally:
        await killer.close()
        await pool.close()


@pytest.mark.parametrize(("per_item_ms", "status"), [(50, 201), (0, 503)])
async def test_a_batch_write_gets_time_for_each_item(
    short: tuple[Settings, str], hash_embedder: Embedder, per_item_ms: int, status: int
) -> None:
    settings, key = short
    settings = msgspec.structs.replace(settings, write_timeout_per_item_ms=per_item_ms)
    body = {
        "project_id": PROJECT,
        "subject_id": f"batch-{per_item_ms}",
        "facts": [{"content": f"fact {i} of a batch that waits on a lock"} for i in range(100)],
    }
    async with pooled_client(settings, hash_embedder) as (client, _):
        # 1.2 s of lock: past the 300 ms statement timeout, within 300 + 100 x 50 ms.
        async with facts_locked(settings, 1.2):
            r = await client.post("/v1/facts", json=body, headers=bearer(key))
        if status == 201:
            assert len(json_of(r, 201)["facts"]) == 100
        else:
            assert_error(r, 503, "unavailable")
        listed = await list_all_facts(client, key, PROJECT, subject_id=body["subject_id"])
        assert len(listed) == (100 if status == 201 else 0)


async def test_an_erasure_outlasts_the_clients_usual_wait(
    short: tuple[Settings, str], hash_embedder: Embedder
) -> None:
    settings, key = short
    settings = msgspec.structs.replace(settings, erasure_timeout_ms=20_000)
    subject = "erased-after-a-wait"
    async with pooled_client(settings, hash_embedder) as (client, _):
        body = {"project_id": PROJECT, "subject_id": subject, "facts": [{"content": "soon erased"}]}
        json_of(await client.post("/v1/facts", json=body, headers=bearer(key)), 201)
        # Longer than the pool's own client wait (statement timeout + CLIENT_GRACE_SECONDS), which
        # cancelled an erasure the server still allowed.
        wait = STATEMENT_TIMEOUT_MS / 1000 + CLIENT_GRACE_SECONDS + 0.5
        async with facts_locked(settings, wait):
            started = time.monotonic()
            r = await client.delete(
                f"/v1/subjects/{subject}", params={"project_id": PROJECT}, headers=bearer(key)
            )
            assert time.monotonic() - started >= wait - 0.1
        assert json_of(r)["facts"] == 1
