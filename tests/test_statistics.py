"""Planner statistics kept fresh after bulk writes (service/memory/statistics.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import httpx
import pytest

from service.app import create_app
from service.db import connect
from service.memory.statistics import STATS_REFRESH_MIN_ROWS, StatisticsKeeper
from service.settings import Settings
from tests.helpers import bearer, metric
from tests.helpers.app import asgi_transport, migrated_key
from tests.helpers.sql import load_test_queries

PROJECT = "stats-keeper"


def test_a_table_is_due_once_the_writes_reach_a_share_of_it() -> None:
    """At least min_rows new rows, and at least `fraction` of the rows the planner knows of."""
    keeper = StatisticsKeeper(None, min_rows=1000, fraction=0.1)
    keeper.note("facts", 999)
    keeper.note("events", 5000)
    assert keeper.due() == ["events"]
    keeper.note("facts", 1)
    assert keeper.due() == ["facts", "events"]
    keeper.estimates = {"facts": 50_000, "events": 10}
    assert keeper.due() == ["events"]  # 1,000 new rows are 2 % of 50,000 facts
    keeper.note("facts", 4000)
    assert keeper.due() == ["facts", "events"]
    keeper.note("facts", 0)
    keeper.note("events", -5)  # nothing written: never counted down
    assert keeper.pending == {"facts": 5000, "events": 5000}


async def analyzed_facts(settings: Settings) -> int:
    conn = await connect(settings)
    try:
        row = await load_test_queries().test_table_analyze_count(conn, table_name="facts")
        assert row is not None
        count: int = row["analyze_count"]
        return count
    finally:
        await conn.close()


@pytest.mark.integration
async def test_a_bulk_write_refreshes_the_planner_statistics_a_small_one_does_not(settings: Settings) -> None:
    """The app's keeper (its own pool, as `haki serve` runs it): a batch of 1,000 facts is followed
    by an ANALYZE of facts, counted in /metrics; a batch of 10 is left to autovacuum."""
    key = await migrated_key(settings, PROJECT)
    app = create_app(settings)
    transport = asgi_transport(app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://t") as client:

        async def write(n: int, subject: str) -> None:
            facts = [{"content": f"bulk fact {i} of {subject}"} for i in range(n)]
            body: dict[str, Any] = {"project_id": PROJECT, "subject_id": subject, "facts": facts}
            r = await client.post("/v1/facts", json=body, headers=bearer(key))
            assert r.status_code == 201, r.text

        before = await analyzed_facts(settings)
        keeper: StatisticsKeeper = app.state.statistics
        await write(10, "small")
        assert keeper.pending["facts"] == 10 and keeper.due() == []
        await write(STATS_REFRESH_MIN_ROWS, "big")
        deadline = time.monotonic() + 30
        while await metric(client, "haki_planner_statistics_refreshes_total", table="facts") < 1:
            assert time.monotonic() < deadline, "no ANALYZE after a 1,000-fact batch"
            await asyncio.sleep(0.1)
        assert await analyzed_facts(settings) >= before + 1
        assert keeper.pending["facts"] == 0
        assert keeper.estimates is not None and keeper.estimates["facts"] >= STATS_REFRESH_MIN_ROWS
        assert await metric(client, "haki_planner_statistics_refreshes_total", table="events") == 0


async def test_the_keepers_statements_run(conn: asyncpg.Connection) -> None:
    """Both statements of the keeper run: the estimates name both memory tables, and ANALYZE of
    each table goes through (inside this test's transaction, which PostgreSQL allows)."""
    from service.repository import maintenance

    estimates = await maintenance.row_estimates(conn)
    assert set(estimates) == {"facts", "events"}
    await maintenance.analyze(conn, "facts")  # ANALYZE may run inside a transaction
    await maintenance.analyze(conn, "events")
