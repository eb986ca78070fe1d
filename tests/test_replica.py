"""Reads on a real PostgreSQL streaming standby (service/db/replica.py, docs/scaling.md).

A throw-away embedded primary, migrated, and a second embedded PostgreSQL made its streaming
standby with `pg_basebackup -R` from the same embedded binaries (service.db.embedded.
embedded_standby), each on its own unix socket. Haki runs with HAKI_DATABASE_URL on the primary
and HAKI_DATABASE_READ_URL on the standby, its lifespan in the test's event loop (its own pools
and replica monitor). Everything is written and read through Haki's HTTP API; the servers are
only looked at directly to prove where a read ran, to pause replay (`pg_wal_replay_pause()`: lag
on demand) and to stop the standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import asyncpg
import httpx
import httpx2
import msgspec
import pytest
from litestar import Litestar
from prometheus_client import CollectorRegistry

from service.api import auth
from service.app import create_app
from service.context.call import ContextCall
from service.db import connect, create_pool, init_connection, replica
from service.db.call_runner import run_context_call
from service.db.embedded import bin_dir, embedded_server, embedded_standby, embedded_url
from service.db.migrations import migrate
from service.embedding.embedder import HashEmbedder
from service.ids import uuid7
from service.settings import Settings
from service.structs import ContextRequest
from tests.helpers import METRICS_TOKEN, metric
from tests.helpers.app import asgi_transport
from tests.helpers.chromium import ui_login
from tests.helpers.mcp_sessions import session_on
from tests.helpers.sql import load_test_queries

# Positions and counters of the two servers, read directly (tests/sql/testing_replica.sql).
SQL = load_test_queries()


class Servers:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.primary_url = embedded_url(base / "primary")

    def start_standby(self) -> None:
        self.standby = embedded_standby(self.base / "primary", self.base / "standby")
        self.standby_url = embedded_url(self.base / "standby")

    def stop_standby(self) -> None:
        subprocess.run(
            [
                str(bin_dir() / "pg_ctl"),
                "-D",
                str(self.standby.pgdata),
                "-w",
                "-m",
                "immediate",
                "stop",
            ],
            user=self.standby.system_user,
            check=True,
            capture_output=True,
            timeout=60,
        )


@pytest.fixture(scope="module")
async def servers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Servers]:
    s = Servers(Path(tmp_path_factory.mktemp("replica")))
    conn = await asyncpg.connect(s.primary_url)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    s.start_standby()
    try:
        yield s
    finally:
        for server in (s.standby, embedded_server(s.base / "primary")):
            with contextlib.suppress(Exception):  # the standby may have been stopped by a test
                server.cleanup()
        shutil.rmtree(s.base, ignore_errors=True)


@asynccontextmanager
async def haki(servers: Servers, **overrides: Any) -> AsyncIterator[tuple[Litestar, httpx.AsyncClient]]:
    options: dict[str, Any] = {"rate_limit_per_minute": 0, **overrides}
    settings = Settings(
        data_dir=servers.base,
        embed_provider="hash",
        database_url=servers.primary_url,
        database_read_url=servers.standby_url,
        metrics_token=METRICS_TOKEN,
        **options,
    )
    app = create_app(settings)
    async with app.lifespan():
        transport = asgi_transport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield app, client


async def new_key(servers: Servers, project: str) -> dict[str, str]:
    conn = await asyncpg.connect(servers.primary_url)
    try:
        _, key = await auth.create_key(conn, project)
    finally:
        await conn.close()
    return {"Authorization": f"Bearer {key}"}


def raw_key(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


@asynccontextmanager
async def replay_paused(servers: Servers) -> AsyncIterator[None]:
    """The standby's replay paused for the block (lag on demand), resumed after it."""
    standby = await asyncpg.connect(servers.standby_url)
    try:
        await SQL.test_pause_replay(standby)
        await wait_for(lambda: _paused(standby), 10, "replay did not pause")
        yield
    finally:
        await SQL.test_resume_replay(standby)
        await standby.close()


@asynccontextmanager
async def mcp_on(app: Litestar, headers: dict[str, str]) -> AsyncIterator[Any]:
    """An MCP client session on the app's /mcp, holding the key of `headers`."""
    transport = httpx2.ASGITransport(app=cast(Any, app))
    async with (
        httpx2.AsyncClient(transport=transport, base_url="http://haki.test", headers=headers) as http,
        session_on(http, "http://haki.test/mcp") as session,
    ):
        yield session


async def fetchval(url: str, statement: Any) -> Any:
    """`statement(conn)` (one of tests/sql/testing_replica.sql) on a fresh connection to `url`."""
    conn = await asyncpg.connect(url)
    try:
        return await statement(conn)
    finally:
        await conn.close()


async def wait_replayed(servers: Servers, app: Litestar, seconds: float = 20.0) -> None:
    """Until the standby replayed everything the primary has now, and Haki's monitor saw it."""
    lsn = await fetchval(servers.primary_url, lambda c: SQL.test_primary_wal_position(c))
    router: replica.ReadRouter = app.state.read_router
    deadline = time.monotonic() + seconds
    while not (
        await fetchval(servers.standby_url, lambda c: SQL.test_standby_replayed(c, lsn=lsn))
        and router.replayed >= lsn
    ):
        assert time.monotonic() < deadline, "the standby did not replay in time"
        await asyncio.sleep(0.05)


async def wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not await predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def fact(key: str, content: str) -> dict[str, Any]:
    return {"key": key, "content": content}


async def remember(
    client: httpx.AsyncClient, headers: dict[str, str], subject: str, *facts: dict[str, Any]
) -> list[dict[str, Any]]:
    """POST /v1/facts of `facts` about `subject`: the facts written."""
    r = await client.post("/v1/facts", json={"subject_id": subject, "facts": list(facts)}, headers=headers)
    assert r.status_code == 201, r.text
    written: list[dict[str, Any]] = r.json()["facts"]
    return written


# --- without a read URL nothing changes ----------------------------------------------------------


async def test_without_read_url_one_pool_and_no_replica_in_healthz(client: Any) -> None:
    """HAKI_DATABASE_READ_URL unset: no router, no middleware, /healthz as before."""
    assert client._transport.app.state.read_router is None
    r = await client.get("/healthz")
    assert r.status_code == 200
    assert "replica" not in r.json()


def test_read_settings_from_the_environment() -> None:
    s = Settings.from_env({"HAKI_DATABASE_READ_URL": "postgresql://r/db", "HAKI_READ_MAX_LAG_MS": "250"})
    assert (s.database_read_url, s.read_max_lag_ms) == ("postgresql://r/db", 250)
    assert Settings.from_env({}).database_read_url is None


def test_a_long_check_interval_keeps_the_standby_in_service(settings: Settings) -> None:
    """A standby counts as unchecked after a few check intervals, not after a fixed 5 s: with
    HAKI_READ_CHECK_INTERVAL_MS at 10 s, 8 s after a good check it still serves."""
    slow = msgspec.structs.replace(settings, read_check_interval_ms=10_000)
    router = replica.ReadRouter(slow, CollectorRegistry())
    router.state, router.last_ok = "ok", time.monotonic() - 8.0
    assert router.unusable() is None
    router.last_ok = time.monotonic() - 31.0
    assert router.unusable() == "unchecked"
    router.state = "down"  # a standby found down has no lag to report
    router.lag_ms = 12.0
    assert router.health().lag_ms is None


async def test_write_positions_per_scope_and_their_bound(
    settings: Settings, conn: asyncpg.Connection
) -> None:
    """The per-scope positions without a standby: a written scope is stale until the replay
    position passes its write; past MAX_WRITTEN_SCOPES one position holds for every scope."""
    router = replica.ReadRouter(settings, CollectorRegistry(), max_written_scopes=3)
    router.replayed = 0
    await router.note_write(conn, "p", "s1")
    assert router.stale("p", "s1") and router.stale("p", None)
    assert not router.stale("p", "s2") and not router.stale("q", None)
    for subject in ("s2", "s3"):
        await router.note_write(conn, "p", subject)
    assert router.stale("q", "never-written")  # the bound: every scope waits for the position
    router.replayed = await SQL.test_primary_wal_position(conn)
    assert not router.stale("q", "never-written") and not router.stale("p", "s1")


# --- on the standby ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
async def test_reads_run_on_the_standby_and_the_trace_on_the_primary(servers: Servers) -> None:
    headers = await new_key(servers, "rep-a")
    calls = 8
    async with haki(servers) as (app, client):
        r = await client.post(
            "/v1/facts",
            json={
                "subject_id": "u1",
                "facts": [fact("city", "Mira lives in Lisbon"), fact("pet", "Mira has a cat")],
            },
            headers=headers,
        )
        assert r.status_code == 201, r.text
        await wait_replayed(servers, app)
        health = (await client.get("/healthz")).json()
        assert health["replica"]["status"] == "ok" and health["replica"]["serving_reads"] is True
        assert health["replica"]["lag_ms"] is not None and health["replica"]["lag_ms"] < 1000
        scans_before = await fetchval(servers.standby_url, lambda c: SQL.test_fact_scans(c))

        trace_ids = []
        for _ in range(calls):
            r = await client.post(
                "/v1/context", json={"subject_id": "u1", "query": "Where does Mira live?"}, headers=headers
            )
            assert r.status_code == 200, r.text
            assert any("Lisbon" in f["content"] for f in r.json()["facts"])
            trace_ids.append(r.json()["trace_id"])
        # The traces were written on the primary (the standby cannot write).
        assert (
            await fetchval(servers.primary_url, lambda c: SQL.test_count_context_calls(c, project_id="rep-a"))
            == calls
        )
        await wait_replayed(servers, app)
        for path in (
            f"/v1/inspect/{trace_ids[0]}",
            "/v1/facts?subject_id=u1",
            "/v1/conflicts",
            "/v1/stats/overview",
            "/v1/stats/facts",
        ):
            r = await client.get(path, headers=headers)
            assert r.status_code == 200, (path, r.text)
        assert await metric(client, "haki_read_requests_total", pool="replica") == calls + 5
        assert await metric(client, "haki_read_requests_total", pool="primary") == 0
    # The standby's own statistics: its `facts` table was scanned by the context calls (each
    # call scans it at least once; the monitor reads no table). Flushed when the pool closed.
    await wait_for(
        lambda: _scanned(servers.standby_url, scans_before + calls), 20, "no fact scans on the standby"
    )


async def _scanned(url: str, at_least: int) -> bool:
    return bool(await fetchval(url, lambda c: SQL.test_fact_scans(c)) >= at_least)


@pytest.mark.slow
@pytest.mark.integration
async def test_a_conflict_opened_a_moment_ago_is_never_served_across_lag(servers: Servers) -> None:
    """Replay paused: the standby still has the lone fact, the primary has the ConflictSet that
    the second write opened. The context call must hide both facts (spec: an open conflict is
    never served), and the inspection of its trace must not 404."""
    headers = await new_key(servers, "rep-b")
    query: dict[str, Any] = {"subject_id": "alice", "query": "Where does Alice work?"}
    # The limit is far above the pause: only the per-scope write position can send the read to
    # the primary, not the lag bound.
    async with haki(servers, read_max_lag_ms=600_000) as (app, client):
        r = await client.post(
            "/v1/facts",
            json={"subject_id": "alice", "facts": [fact("employer", "Alice works at Acme")]},
            headers=headers,
        )
        assert r.status_code == 201, r.text
        await wait_replayed(servers, app)
        standby = await connect(Settings(database_url=servers.standby_url))
        await init_connection(standby)
        try:
            await SQL.test_pause_replay(standby)
            await wait_for(lambda: _paused(standby), 10, "replay did not pause")
            r = await client.post(
                "/v1/facts",
                json={"subject_id": "alice", "facts": [fact("employer", "Alice works at Globex")]},
                headers=headers,
            )
            assert r.status_code == 201, r.text
            assert r.json()["facts"][0]["conflict_set_id"], r.json()  # the second value opened a ConflictSet

            # What the lagging standby alone would serve: the first fact, no conflict.
            primary_pool = await create_pool(Settings(database_url=servers.primary_url))
            try:
                call = ContextCall.of(ContextRequest(project_id="rep-b", **query), app.state.settings)
                stale = await run_context_call(standby, HashEmbedder(), call, primary=primary_pool.acquire)
            finally:
                await primary_pool.close()
            assert [f.content for f in stale.facts] == ["Alice works at Acme"]

            unreplayed = await metric(client, "haki_read_replica_fallbacks_total", reason="unreplayed_write")
            r = await client.post("/v1/context", json=query, headers=headers)
            assert r.status_code == 200, r.text
            packet = r.json()
            assert not [f for f in packet["facts"] if "Alice works" in f["content"]], packet
            assert any(w.startswith("open_conflict") for w in packet["warnings"]), packet
            assert (
                await metric(client, "haki_read_replica_fallbacks_total", reason="unreplayed_write")
                == unreplayed + 1
            )

            # The trace is on the primary only: the standby's 404 is run again on the primary.
            not_found = await metric(client, "haki_read_replica_fallbacks_total", reason="not_found")
            r = await client.get(f"/v1/inspect/{packet['trace_id']}", headers=headers)
            assert r.status_code == 200, r.text
            assert (
                await metric(client, "haki_read_replica_fallbacks_total", reason="not_found") == not_found + 1
            )
            # A key created during the pause is unknown to the standby: asked of the primary.
            fresh_key = await new_key(servers, "rep-b2")
            r = await client.get("/v1/facts", headers=fresh_key)
            assert r.status_code == 200, r.text
            assert await metric(client, "haki_read_replica_fallbacks_total", reason="unknown_key") >= 1
            # A truly missing trace is still a 404 (asked of both).
            r = await client.get(f"/v1/inspect/{uuid7()}", headers=headers)
            assert r.status_code == 404 and r.json()["code"] == "not_found"
        finally:
            await SQL.test_resume_replay(standby)
            await standby.close()
        await wait_replayed(servers, app)
        # Replayed: the standby serves the scope again, and hides the conflict too.
        replica_reads = await metric(client, "haki_read_requests_total", pool="replica")
        r = await client.post("/v1/context", json=query, headers=headers)
        assert r.status_code == 200
        assert not [f for f in r.json()["facts"] if "Alice works" in f["content"]]
        assert await metric(client, "haki_read_requests_total", pool="replica") == replica_reads + 1


async def _paused(conn: asyncpg.Connection) -> bool:
    return bool(await SQL.test_replay_paused(conn))


@pytest.mark.slow
@pytest.mark.integration
async def test_lag_beyond_the_limit_sends_reads_to_the_primary(servers: Servers) -> None:
    headers = await new_key(servers, "rep-c")
    writer = await new_key(servers, "rep-c-writer")
    async with haki(servers, read_max_lag_ms=300) as (app, client):
        await remember(client, headers, "s", fact("k", "Ravi likes tea"))
        await wait_replayed(servers, app)
        standby = await asyncpg.connect(servers.standby_url)
        try:
            await SQL.test_pause_replay(standby)
            await wait_for(lambda: _paused(standby), 10, "replay did not pause")
            # Another project's write moves the primary on; the standby stays behind it.
            r = await client.post(
                "/v1/facts", json={"subject_id": "w", "facts": [fact("k", "Noise")]}, headers=writer
            )
            assert r.status_code == 201

            async def lagging() -> bool:
                replica_health = (await client.get("/healthz")).json()["replica"]
                return bool(replica_health["status"] == "lagging" and replica_health["lag_ms"] > 300)

            await wait_for(lagging, 10, "the lag was not reported")
            lagged = await metric(client, "haki_read_replica_fallbacks_total", reason="lagging")
            # rep-c was not written since its replay: only the lag bound sends it to the primary.
            r = await client.post(
                "/v1/context", json={"subject_id": "s", "query": "What does Ravi like?"}, headers=headers
            )
            assert r.status_code == 200 and any("tea" in f["content"] for f in r.json()["facts"])
            assert await metric(client, "haki_read_replica_fallbacks_total", reason="lagging") == lagged + 1
            assert await metric(client, "haki_read_replica_lag_seconds") > 0.3
        finally:
            await SQL.test_resume_replay(standby)
            await standby.close()
        await wait_replayed(servers, app)
        await wait_for(
            lambda: _healthz_status(client, "ok"),
            10,
            "the replica did not come back after the replay resumed",
        )


async def _healthz_status(client: httpx.AsyncClient, status: str) -> bool:
    r = await client.get("/healthz")
    return bool(r.status_code == 200 and r.json()["replica"]["status"] == status)


@pytest.mark.slow
@pytest.mark.integration
async def test_an_erasure_is_never_served_across_lag(servers: Servers) -> None:
    """Replay paused, then a fact and a subject erased: the lagging standby still holds both, and
    the traces that name them. Every route that reads a trace (found by id, its scope known once
    read) runs again on the primary: the erased subject's traces are 404, the erased fact is in
    no inspection. Before, each answered from the standby with the erased data."""
    headers = await new_key(servers, "rep-e")
    async with haki(servers, read_max_lag_ms=600_000) as (app, client):
        await remember(client, headers, "gone", fact("hide", "Zed hides in Oslo"))
        written = await remember(
            client, headers, "kept", fact("boat", "Kim owns a boat"), fact("m", "Kim likes jazz")
        )
        boat = written[0]["fact_id"]
        traces = {}
        for subject, query in (("gone", "Where does Zed hide?"), ("kept", "What does Kim own, a boat?")):
            r = await client.post(
                "/v1/context", json={"subject_id": subject, "query": query}, headers=headers
            )
            assert r.status_code == 200, r.text
            traces[subject] = r.json()["trace_id"]
        kept = (await client.get(f"/v1/inspect/{traces['kept']}", headers=headers)).json()
        assert boat in [d["item_id"] for d in kept["decisions"]]  # the trace names the fact
        ui = await ui_login(client, raw_key(headers))
        await wait_replayed(servers, app)
        async with replay_paused(servers), mcp_on(app, headers) as session:
            assert (await client.delete(f"/v1/facts/{boat}", headers=headers)).status_code == 200
            assert (await client.delete("/v1/subjects/gone", headers=headers)).status_code == 200
            replica_reads = await metric(client, "haki_read_requests_total", pool="replica")
            primary_reads = await metric(client, "haki_read_requests_total", pool="primary")
            unreplayed = await metric(client, "haki_read_replica_fallbacks_total", reason="unreplayed_write")

            r = await client.get(f"/v1/inspect/{traces['gone']}", headers=headers)
            assert r.status_code == 404, r.text
            r = await client.get(f"/v1/inspect/{traces['kept']}", headers=headers)
            assert r.status_code == 200, r.text
            assert boat not in [d["item_id"] for d in r.json()["decisions"]]
            page = await client.get(f"/ui/traces/{traces['gone']}", headers=ui.headers)
            assert page.status_code == 404 and "Zed" not in page.text
            page = await client.get(f"/ui/traces/{traces['kept']}", headers=ui.headers)
            assert page.status_code == 200 and "Kim owns a boat" not in page.text
            page = await client.get("/ui/traces", headers=ui.headers)
            assert page.status_code == 200 and "Zed" not in page.text and "Kim" in page.text
            gone = await session.call_tool("inspect", {"trace_id": traces["gone"]})
            assert gone.is_error
            explained = await session.call_tool("inspect", {"trace_id": traces["kept"]})
            assert isinstance(explained.structured_content, dict), explained
            assert boat not in [i["item_id"] for i in explained.structured_content["items"]]

            # Seven reads, each asked of the standby, then of the primary: counted once, by the
            # pool that answered.
            assert (
                await metric(client, "haki_read_replica_fallbacks_total", reason="unreplayed_write")
                == unreplayed + 7
            )
            assert await metric(client, "haki_read_requests_total", pool="replica") == replica_reads
            assert await metric(client, "haki_read_requests_total", pool="primary") == primary_reads + 7
        await wait_replayed(servers, app)


@pytest.mark.slow
@pytest.mark.integration
async def test_a_context_calls_trace_is_read_back_across_lag(servers: Servers) -> None:
    """Replay paused: the trace of a context call is on the primary only. The reads of traces
    that follow (the stats, /ui/traces) see it, while the next retrieval of the same scope still
    runs on the standby (a trace is no write of memories)."""
    headers = await new_key(servers, "rep-f")
    query = {"subject_id": "s", "query": "What does Lena fly?"}
    async with haki(servers, read_max_lag_ms=600_000) as (app, client):
        await remember(client, headers, "s", fact("k", "Lena flies gliders"))
        ui = await ui_login(client, raw_key(headers))
        await wait_replayed(servers, app)
        async with replay_paused(servers):
            r = await client.post("/v1/context", json=query, headers=headers)
            assert r.status_code == 200, r.text
            trace_id = r.json()["trace_id"]
            overview = await client.get("/v1/stats/overview", headers=headers)
            assert overview.status_code == 200 and overview.json()["context_calls"] == 1, overview.text
            worth = await client.get("/v1/stats/facts?subject_id=s", headers=headers)
            assert worth.status_code == 200 and worth.json()["facts"][0]["served_count"] == 1, worth.text
            page = await client.get("/ui/traces", headers=ui.headers)
            assert page.status_code == 200 and trace_id in page.text

            unreplayed = await metric(client, "haki_read_replica_fallbacks_total", reason="unreplayed_write")
            replica_reads = await metric(client, "haki_read_requests_total", pool="replica")
            r = await client.post("/v1/context", json=query, headers=headers)
            assert r.status_code == 200, r.text
            assert (
                await metric(client, "haki_read_replica_fallbacks_total", reason="unreplayed_write")
                == unreplayed
            )
            assert await metric(client, "haki_read_requests_total", pool="replica") == replica_reads + 1
        await wait_replayed(servers, app)


@pytest.mark.slow
@pytest.mark.integration
async def test_a_replays_trace_is_read_back_across_lag(servers: Servers) -> None:
    """Replay paused: a replay's trace (POST /v1/inspect/{id}/replay, the UI's form) is on the
    primary only; the trace list that follows shows it, as a context call's."""
    headers = await new_key(servers, "rep-r")
    async with haki(servers, read_max_lag_ms=600_000) as (app, client):
        await remember(client, headers, "s", fact("k", "Ines sails"))
        r = await client.post("/v1/context", json={"subject_id": "s", "query": "Ines?"}, headers=headers)
        assert r.status_code == 200, r.text
        trace_id = r.json()["trace_id"]
        ui = await ui_login(client, raw_key(headers))
        await wait_replayed(servers, app)
        async with replay_paused(servers):
            replayed = await client.post(f"/v1/inspect/{trace_id}/replay", headers=headers)
            assert replayed.status_code == 200, replayed.text
            page = await client.get("/ui/traces", headers=ui.headers)
            assert page.status_code == 200 and replayed.json()["packet"]["trace_id"] in page.text
        await wait_replayed(servers, app)


@pytest.mark.slow
@pytest.mark.integration
async def test_a_logout_holds_on_the_pages_read_on_the_standby(servers: Servers) -> None:
    """Replay paused: the session a logout deleted on the primary is still on the standby, where
    the trace pages read; the ended session is noted, so they send the old cookie to log in."""
    headers = await new_key(servers, "rep-l")
    async with haki(servers, read_max_lag_ms=600_000) as (app, client):
        await remember(client, headers, "s", fact("k", "Ada codes"))
        r = await client.post("/v1/context", json={"subject_id": "s", "query": "Ada?"}, headers=headers)
        assert r.status_code == 200, r.text
        ui = await ui_login(client, raw_key(headers))
        await wait_replayed(servers, app)
        async with replay_paused(servers):
            out = await client.post("/ui/logout", data=ui.form(), headers=ui.headers)
            assert out.status_code == 303, out.text
            for page in ("/ui/traces", f"/ui/traces/{r.json()['trace_id']}"):
                got = await client.get(page, headers=ui.headers)
                assert got.status_code == 303 and got.headers["location"] == "/ui/login", (page, got.text)
        await wait_replayed(servers, app)


@pytest.mark.slow
@pytest.mark.integration
async def test_a_read_run_again_on_the_primary_is_charged_once(servers: Servers) -> None:
    """HAKI_RATE_LIMIT_PER_MINUTE 2: a read whose standby answer was dropped (its trace is on the
    primary only) and a second read both pass. Before, the second run was charged again and the
    second read was refused (429)."""
    writer = await new_key(servers, "rep-h")
    reader = await new_key(servers, "rep-h")
    async with haki(servers, read_max_lag_ms=600_000, rate_limit_per_minute=2) as (app, client):
        await remember(client, writer, "s", fact("k", "Omar rows"))
        await wait_replayed(servers, app)
        async with replay_paused(servers):
            r = await client.post("/v1/context", json={"subject_id": "s", "query": "Omar?"}, headers=writer)
            assert r.status_code == 200, r.text
            not_found = await metric(client, "haki_read_replica_fallbacks_total", reason="not_found")
            r = await client.get(f"/v1/inspect/{r.json()['trace_id']}", headers=reader)
            assert r.status_code == 200, r.text
            assert (
                await metric(client, "haki_read_replica_fallbacks_total", reason="not_found") == not_found + 1
            )
            r = await client.get("/v1/facts?subject_id=s", headers=reader)
            assert r.status_code == 200, r.text
            r = await client.get("/v1/facts?subject_id=s", headers=reader)
            assert r.status_code == 429, r.text  # the limit holds: two requests, two tokens
        await wait_replayed(servers, app)


def _standby_processes(servers: Servers) -> list[int]:
    """The standby's postmaster and every process it started (backends, the WAL receiver)."""
    postmaster = int((Path(servers.standby.pgdata) / "postmaster.pid").read_text().split()[0])
    children = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                # The parent pid is the 4th field of /proc/PID/stat, after "(command name)".
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                    children.append(int(proc.name))
    return [postmaster, *children]


@pytest.mark.slow
@pytest.mark.integration
async def test_a_hung_standby_fails_no_read(servers: Servers) -> None:
    """Every process of the standby stopped (SIGSTOP): it accepts and answers nothing. The
    monitor is kept asleep, so a read meets the hung standby on its pooled connection: its
    client's wait (statement timeout + 1 s) runs out and the read runs again on the primary.
    Before, it answered 503 after the wait."""
    headers = await new_key(servers, "rep-g")
    async with haki(servers, read_check_interval_ms=3_600_000, statement_timeout_ms=500) as (app, client):
        await remember(client, headers, "s", fact("k", "Ugo sails"))
        lsn = await fetchval(servers.primary_url, lambda c: SQL.test_primary_wal_position(c))
        await wait_for(lambda: _replayed(servers, lsn), 20, "no replay")
        await app.state.read_router.check()  # the monitor's view, once, by hand
        r = await client.get("/v1/facts?subject_id=s", headers=headers)
        assert r.status_code == 200
        assert await metric(client, "haki_read_requests_total", pool="replica") == 1

        stopped = _standby_processes(servers)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            r = await client.get("/v1/facts?subject_id=s", headers=headers)
            assert r.status_code == 200, r.text
            assert [f["content"] for f in r.json()["facts"]] == ["Ugo sails"]
            assert time.monotonic() - started < 5.0  # 0.5 s + 1 s, then the primary
            assert await metric(client, "haki_read_replica_fallbacks_total", reason="timeout") == 1
            assert await metric(client, "haki_read_requests_total", pool="primary") == 1
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


@pytest.mark.slow
@pytest.mark.integration
async def test_a_stopped_standby_fails_no_read(servers: Servers) -> None:
    """Last of the module: stops the standby. The monitor is kept asleep after its first check,
    so the first reads meet the standby's dead pooled connection (not a monitor's verdict) and
    are run again on the primary; after that the standby counts as down."""
    headers = await new_key(servers, "rep-d")
    async with haki(servers, read_check_interval_ms=3_600_000) as (app, client):
        await remember(client, headers, "s", fact("k", "Ines plays chess"))
        lsn = await fetchval(servers.primary_url, lambda c: SQL.test_primary_wal_position(c))
        await wait_for(lambda: _replayed(servers, lsn), 20, "no replay")
        await app.state.read_router.check()  # the monitor's view, once, by hand
        query = {"subject_id": "s", "query": "What does Ines play?"}
        r = await client.post("/v1/context", json=query, headers=headers)
        assert r.status_code == 200
        assert await metric(client, "haki_read_requests_total", pool="replica") == 1

        servers.stop_standby()
        r = await client.post("/v1/context", json=query, headers=headers)
        assert r.status_code == 200, r.text
        assert any("chess" in f["content"] for f in r.json()["facts"])
        assert await metric(client, "haki_read_replica_fallbacks_total", reason="connection_lost") == 1
        health = await client.get("/healthz")
        assert health.status_code == 200 and health.json()["replica"]["status"] == "down"
        assert health.json()["replica"]["lag_ms"] is None  # measured before it went down: not kept
        for path in (
            "/v1/facts",
            "/v1/conflicts",
            "/v1/stats/overview",
            f"/v1/inspect/{r.json()['trace_id']}",
        ):
            got = await client.get(path, headers=headers)
            assert got.status_code == 200, (path, got.text)
        assert await metric(client, "haki_read_replica_fallbacks_total", reason="down") == 4
        await app.state.read_router.check()  # the monitor finds it still down, and says so
        assert await metric(client, "haki_read_replica_up") == 0
        r = await client.post("/v1/context", json=query, headers=headers)
        assert r.status_code == 200


async def _replayed(servers: Servers, lsn: Any) -> bool:
    return bool(await fetchval(servers.standby_url, lambda c: SQL.test_standby_replayed(c, lsn=lsn)))
