"""Conflict sets of a project with a long history: a GET /v1/conflicts page (list_conflicts) of
the project and of one subject, as the route reads it (custom plans) and under the plan cache,
and what a subject's erasure reads of the sets, without and with migration 0044's indexes, on
one scratch embedded server.

    .venv/bin/python -m benchmarks.conflict_sets [--sets 200000] [--subjects 20000]

Fills one project with resolved sets (they are kept for ever), then times each read 20 times after
a warm-up, without the indexes, then with them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosql

from service.db import connect
from service.db.embedded import embedded_server, embedded_url
from service.db.migrations import migrate
from service.db.sql import load_queries
from service.repository import conflicts
from service.settings import Settings

SQL = aiosql.from_path(Path(__file__).resolve().parent / "sql" / "conflict_sets.sql", "asyncpg")
ROUNDS = 20
PAGE_MEMBERS = 100


async def median_ms(read: Callable[[], Awaitable[Any]]) -> float:
    await read()
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        await read()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def run(sets: int, subjects: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-conflict-sets-"))
    settings = Settings(
        data_dir=data_dir,
        embed_provider="hash",
        database_url=embedded_url(data_dir),
        statement_timeout_ms=600_000,
    )
    conn = await connect(settings)
    try:
        await migrate(conn)
        await SQL.fill_conflict_sets(conn, n=sets, subjects=subjects)
        await SQL.analyze_conflict_sets(conn)
        shipped = load_queries()

        async def page(subject_id: str | None) -> Any:
            # As GET /v1/conflicts reads it: planned for its filters (repository.base.custom_plans).
            return await conflicts.conflict_page(conn, "p", subject_id, None, page_members=PAGE_MEMBERS)

        async def cached_page(subject_id: str | None) -> list[Any]:
            # The statement alone, under the connection's plan cache (a generic plan after five).
            rows = shipped.list_conflicts(
                conn, project_id="p", subject_id=subject_id, status=None, conflict_set_id=None,
                before_created_at=None, before_set_id=None, page_members=PAGE_MEMBERS,
            )  # fmt: skip
            return [r async for r in rows]

        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "page of the project": lambda: page(None),
            "page of one subject": lambda: page("s7"),
            "page, plan cache": lambda: cached_page(None),
            "page of one subject, cache": lambda: cached_page("s7"),
            "a subject's sets (erasure)": lambda: SQL.scope_conflict_sets(
                conn, project_id="p", subject_id="s7"
            ),
        }
        await SQL.drop_conflict_set_indexes(conn)
        before = {name: await median_ms(read) for name, read in reads.items()}
        await SQL.create_conflict_set_indexes(conn)
        await SQL.analyze_conflict_sets(conn)
        after = {name: await median_ms(read) for name, read in reads.items()}
        print(f"{sets} resolved sets over {subjects} subjects, p50 of {ROUNDS}:")
        for name in reads:
            print(f"  {name:<28} {before[name]:8.2f} ms without, {after[name]:6.2f} ms with the indexes")
    finally:
        await conn.close()
        embedded_server(data_dir).cleanup()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", type=int, default=200_000)
    p.add_argument("--subjects", type=int, default=20_000)
    args = p.parse_args()
    asyncio.run(run(args.sets, args.subjects))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
