"""Database faults, on a throw-away embedded PostgreSQL of this module's own.

PostgreSQL is stopped in the middle of a stream of writes and context calls served by the real
app (uvicorn, the lifespan's own asyncpg pool): during the outage every request fails fast with a
503 `unavailable`, afterwards the service recovers by itself, and every write that got a 201 is
in the database. A statement timeout on the read path and an exhausted pool are 503s too.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest

from service.app import create_app
from service.db import connect
from service.db.embedded import embedded_server, embedded_url, release_embedded_server
from service.embedding.embedder import Embedder
from service.repository import keys as keys_repo
from service.settings import Settings
from tests.helpers import bearer, list_all_facts
from tests.helpers.app import migrated_key, pooled_client
from tests.helpers.server import short_tmp_dir
from tests.helpers.serving import serve
from tests.helpers.sql import load_test_queries

# Stops and restarts the database under a served app: out of the fast lane.
pytestmark = pytest.mark.slow


PROJECT = "proj-faults"
# Each request during the outage must end within this: connect and acquire timeouts are 1 s.
FAIL_FAST_SECONDS = 4.0


class FaultServer:
    """The module's PostgreSQL, stopped and started as an operator would (pg_ctl, via pgserver)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.handle = embedded_server(data_dir)
        self.url = embedded_url(data_dir)

    def stop(self) -> None:
        # The last handle of this process stops the server with `pg_ctl -w stop` (fast shutdown:
        # open sessions are terminated, their transactions rolled back).
        release_embedded_server(self.data_dir)

    def start(self) -> None:
        self.handle = embedded_server(self.data_dir)
        assert self.handle.get_uri().split("?")[1] == self.url.split("?")[1]  # same socket: same URL


@pytest.fixture(scope="module")
def fault_server() -> Iterator[FaultServer]:
    path = short_tmp_dir("haki-flt-")
    server = FaultServer(path)
    try:
        yield server
    finally:
        server.handle.cleanup()
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
async def fault_settings(fault_server: FaultServer) -> AsyncIterator[tuple[Settings, str]]:
    settings = Settings(
        data_dir=fault_server.data_dir,
        database_url=fault_server.url,
        embed_provider="hash",
        rate_limit_per_minute=0,
        pool_min_size=2,
        pool_max_size=4,
        pool_acquire_timeout_seconds=1.0,
        connect_timeout_seconds=1.0,
    )
    yield settings, await migrated_key(settings, PROJECT)


@dataclass
class Outcome:
    kind: str  # "write" or "context"
    started: float
    elapsed: float
    status: int
    body: Any
    headers: dict[str, str]


@dataclass
class Stream:
    outcomes: list[Outcome] = field(default_factory=list)
    acked_fact_ids: list[str] = field(default_factory=list)
    stop: bool = False


async def writer(client: httpx.AsyncClient, key: str, stream: Stream, worker: int) -> None:
    n = 0
    while not stream.stop:
        n += 1
        body = {
            "project_id": PROJECT,
            "subject_id": f"s{worker % 2}",
            "facts": [{"content": f"worker {worker} fact {n} {uuid.uuid4().hex}"}],
        }
        await call(client, key, stream, "write", "/v1/facts", body)


async def reader(client: httpx.AsyncClient, key: str, stream: Stream) -> None:
    while not stream.stop:
        body = {"project_id": PROJECT, "subject_id": "s0", "query": "which facts did worker 0 write"}
        await call(client, key, stream, "context", "/v1/context", body)


async def call(client: httpx.AsyncClient, key: str, stream: Stream, kind: str, url: str, body: Any) -> None:
    started = time.monotonic()
    r = await client.post(url, json=body, headers=bearer(key))
    out = Outcome(kind, started, time.monotonic() - started, r.status_code, r.json(), dict(r.headers))
    stream.outcomes.append(out)
    if kind == "write" and r.status_code == 201:
        stream.acked_fact_ids.append(out.body["facts"][0]["fact_id"])
    if r.status_code != 201 and r.status_code != 200:
        await asyncio.sleep(0.05)  # as a client would, before retrying


async def listed_fact_ids(client: httpx.AsyncClient, key: str) -> set[str]:
    return {f["fact_id"] for f in await list_all_facts(client, key, PROJECT)}


@pytest.mark.integration
async def test_outage_fails_fast_recovers_and_loses_no_acknowledged_write(
    fault_server: FaultServer, fault_settings: tuple[Settings, str]
) -> None:
    settings, key = fault_settings
    stream = Stream()
    with serve(create_app(settings)) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            tasks = [asyncio.create_task(writer(client, key, stream, w)) for w in range(4)]
            tasks += [asyncio.create_task(reader(client, key, stream)) for _ in range(2)]
            try:
                await asyncio.sleep(2.0)
                down_at = time.monotonic()
                await asyncio.to_thread(fault_server.stop)
                stopped_at = time.monotonic()
                await asyncio.sleep(3.0)
                up_at = time.monotonic()
                await asyncio.to_thread(fault_server.start)
                started_at = time.monotonic()
                # Recovery without a restart of the service: successes resume by themselves.
                deadline = started_at + 15
                while time.monotonic() < deadline:
                    recent = [o for o in stream.outcomes if o.started > started_at + 0.5]
                    if len(recent) >= 20 and all(o.status in (200, 201) for o in recent[-20:]):
                        break
                    await asyncio.sleep(0.2)
                await asyncio.sleep(1.0)
            finally:
                stream.stop = True
                await asyncio.gather(*tasks)

            outcomes = stream.outcomes
            statuses = {o.status for o in outcomes}
            assert statuses <= {200, 201, 503}, sorted(statuses)

            before = [o for o in outcomes if o.started + o.elapsed < down_at]
            during = [o for o in outcomes if stopped_at <= o.started and o.started + o.elapsed <= up_at]
            after = [o for o in outcomes if o.started > started_at + 0.5]
            assert before and all(o.status in (200, 201) for o in before)

            # The outage: only 503 `unavailable`, each answered fast, with Retry-After.
            assert len(during) >= 10, len(during)
            assert all(o.status == 503 for o in during), [
                (o.status, o.body) for o in during if o.status != 503
            ]
            for o in during:
                assert o.body["code"] == "unavailable" and o.body["message"], o.body
                assert set(o.body) <= {"code", "message", "details"}
                assert o.headers.get("retry-after") == "1"
                assert o.elapsed < FAIL_FAST_SECONDS, o.elapsed
            assert {o.kind for o in during} == {"write", "context"}

            # Recovered: the last requests all succeeded, writes and reads.
            assert len(after) >= 20, len(after)
            assert all(o.status in (200, 201) for o in after[-20:]), [o.status for o in after[-20:]]
            assert {o.kind for o in after if o.status in (200, 201)} == {"write", "context"}

            # Every acknowledged write is in the database.
            acked = set(stream.acked_fact_ids)
            assert len(acked) == len(stream.acked_fact_ids) > 0
            missing = acked - await listed_fact_ids(client, key)
            assert not missing, f"{len(missing)} acknowledged write(s) lost"


@pytest.fixture
async def fault_pool_client(
    fault_server: FaultServer, fault_settings: tuple[Settings, str], hash_embedder: Embedder
) -> AsyncIterator[tuple[httpx.AsyncClient, Any, str]]:
    base, key = fault_settings
    settings = msgspec.structs.replace(base, statement_timeout_ms=300, pool_min_size=1, pool_max_size=1)
    async with pooled_client(settings, hash_embedder) as (client, pool):
        yield client, pool, key


async def test_statement_timeout_on_the_read_path_is_a_503(
    fault_settings: tuple[Settings, str], fault_pool_client: tuple[httpx.AsyncClient, Any, str]
) -> None:
    settings, _ = fault_settings
    client, _, key = fault_pool_client
    context = {"project_id": PROJECT, "subject_id": "s0", "query": "what did worker 0 write"}
    assert (await client.post("/v1/context", json=context, headers=bearer(key))).status_code == 200

    # A migration-like lock on facts: the read waits on it until its 300 ms statement timeout.
    locker = await connect(settings)
    try:
        async with locker.transaction():
            await load_test_queries().test_lock_facts_table(locker)
            for method, url, body, params in (
                ("POST", "/v1/context", context, None),
                ("GET", "/v1/facts", None, {"project_id": PROJECT}),
            ):
                started = time.monotonic()
                r = await client.request(method, url, headers=bearer(key), json=body, params=params)
                elapsed = time.monotonic() - started
                assert r.status_code == 503, r.text
                assert r.json()["code"] == "unavailable"
                assert 0.3 <= elapsed < 3, elapsed
    finally:
        await locker.close()
    # The lock is gone and the same (single) pooled connection serves again.
    assert (await client.post("/v1/context", json=context, headers=bearer(key))).status_code == 200


async def test_exhausted_pool_is_a_503_after_the_acquire_timeout(
    fault_pool_client: tuple[httpx.AsyncClient, Any, str],
) -> None:
    client, pool, key = fault_pool_client
    async with pool.acquire():  # the pool's only connection
        started = time.monotonic()
        r = await client.get("/v1/facts", params={"project_id": PROJECT}, headers=bearer(key))
        assert r.status_code == 503 and r.json()["code"] == "unavailable", r.text
        assert 1.0 <= time.monotonic() - started < 3
    assert (
        await client.get("/v1/facts", params={"project_id": PROJECT}, headers=bearer(key))
    ).status_code == 200


async def test_a_lost_connection_expires_the_whole_pool(
    fault_pool_client: tuple[httpx.AsyncClient, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first query of a request (the key lookup) meeting a dead connection replaces every
    pooled connection, not just that one."""
    client, pool, key = fault_pool_client
    # asyncpg's Pool has slots (no spying on its methods): expire_connections() bumps this counter,
    # and every connection of an older generation is replaced at its next acquire.
    generation = pool._generation

    async def lost(*args: Any, **kwargs: Any) -> Any:
        raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")

    with monkeypatch.context() as m:
        m.setattr(keys_repo, "find_api_key", lost)
        r = await client.get("/v1/facts", params={"project_id": PROJECT}, headers=bearer(key))
        assert r.status_code == 503 and r.json()["code"] == "unavailable", r.text
    assert pool._generation == generation + 1
    r = await client.get("/v1/facts", params={"project_id": PROJECT}, headers=bearer(key))
    assert r.status_code == 200
    assert pool._generation == generation + 1  # a 200 expires nothing


async def test_a_refused_request_gives_its_connection_back_at_once(
    fault_pool_client: tuple[httpx.AsyncClient, Any, str],
) -> None:
    """Litestar does not close the connection dependency when a later dependency (the key lookup,
    the rate limit, the strict body check) fails; the after-exception hook does, before the answer
    leaves. Without it the one-connection pool stays empty until the garbage collector runs."""
    client, pool, key = fault_pool_client
    params = {"project_id": PROJECT}
    for headers in (bearer("hk_unknown"), {}, bearer(key)):
        r = await client.get("/v1/facts", params=params, headers=headers)
        assert r.status_code in (200, 401), r.text
        assert pool.get_idle_size() == 1, r.status_code
    r = await client.post("/v1/context", json={"project_id": PROJECT, "query": 1}, headers=bearer(key))
    assert r.status_code == 400
    assert pool.get_idle_size() == 1
