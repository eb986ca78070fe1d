"""The extraction's known-facts read on a large scope: one sort over the scope (the first form)
against two bounded reads merged (queries/extract.sql, shipped), on one scratch embedded server.

    .venv/bin/python -m benchmarks.extract_known_facts [--facts 100000]

Fills one scope with N active facts (1 % keyed), without the vector and text indexes (not read
here, slow to fill), then times each form 20 times after a warm-up, twice, alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import aiosql

from service.db import connect
from service.db.embedded import embedded_server, embedded_url
from service.db.migrations import migrate
from service.db.sql import load_queries
from service.settings import Settings

SQL = aiosql.from_path(Path(__file__).resolve().parent / "sql" / "extract_known_facts.sql", "asyncpg")
ROUNDS = 20


async def run(n: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-known-facts-"))
    url = embedded_url(data_dir)
    settings = Settings(
        data_dir=data_dir, embed_provider="hash", database_url=url, statement_timeout_ms=600_000
    )
    conn = await connect(settings)
    try:
        await migrate(conn)
        await SQL.drop_unused_facts_indexes(conn)
        await SQL.fill_scope(conn, n=n)
        await SQL.bench_analyze_facts(conn)  # benchmarks/sql/fresh_stats.sql
        shipped = load_queries()
        forms: dict[str, Any] = {
            "one sort": lambda **kw: SQL.known_facts_one_sort(conn, **kw),
            "two bounded reads": lambda **kw: shipped.list_extract_known_facts(conn, **kw),
        }
        for _ in range(2):
            for name, query in forms.items():
                rows = [r async for r in query(project_id="p", subject_id="s", max_facts=100)]
                start = time.perf_counter()
                for _ in range(ROUNDS):
                    rows = [r async for r in query(project_id="p", subject_id="s", max_facts=100)]
                ms = (time.perf_counter() - start) / ROUNDS * 1000
                print(f"{name:<18} {n} facts: {ms:7.2f} ms ({len(rows)} rows)")
    finally:
        await conn.close()
        embedded_server(data_dir).cleanup()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--facts", type=int, default=100_000)
    asyncio.run(run(p.parse_args().facts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
