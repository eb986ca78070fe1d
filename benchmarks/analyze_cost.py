"""What an ANALYZE of the memory tables costs, with the scoped full-text index expressions'
statistics (before migration 0033) and without them (since).

    .venv/bin/python -m benchmarks.analyze_cost [--facts 30000] [--rounds 5]

On one embedded PostgreSQL: one scope of --facts facts and a fifth as many events (benchmarks/seed.py,
the hash embedder's vectors), then --rounds rounds of `ANALYZE facts` and `ANALYZE events` in each
setting, alternating. ANALYZE samples at most 30,000 rows, so --facts 30000 is the cost of any
bigger table. The statistics keeper (service/memory/statistics.py) runs it after bulk writes, and
autovacuum after its own (docs/performance.md, "Statistics after bulk writes").
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.seed import ScopeSpec, load
from benchmarks.sql import load_bench_queries
from service.db import connect, init_connection
from service.db.embedded import embedded_url, release_embedded_server
from service.db.migrations import migrate
from service.settings import Settings

SETTINGS = ("with expression statistics", "without (0033)")


async def analyze(conn: Any) -> tuple[float, float]:
    """Seconds of `ANALYZE facts`, then of `ANALYZE events`."""
    bq = load_bench_queries()
    start = time.perf_counter()
    await bq.bench_analyze_facts(conn)
    facts_done = time.perf_counter()
    await bq.bench_analyze_events(conn)
    return facts_done - start, time.perf_counter() - facts_done


async def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    base = Path(tempfile.mkdtemp(prefix="haki-analyze-cost-"))
    bq = load_bench_queries()
    try:
        url = embedded_url(base)
        conn = await connect(
            Settings(data_dir=base, embed_provider="hash", database_url=url, statement_timeout_ms=600_000)
        )
        await migrate(conn)
        await init_connection(conn)
        scope = ScopeSpec("s", args.facts, events=args.facts // 5)
        await load(conn, "bench", [scope], maintenance_work_mem="256MB")
        times: dict[str, dict[str, list[float]]] = {s: {"facts": [], "events": []} for s in SETTINGS}
        for _ in range(args.rounds):
            for setting in SETTINGS:
                if setting == SETTINGS[0]:
                    await bq.bench_keyed_postings_statistics_on(conn)
                else:
                    await bq.bench_keyed_postings_statistics_off(conn)
                facts, events = await analyze(conn)
                times[setting]["facts"].append(facts)
                times[setting]["events"].append(events)
        await conn.close()
        return times
    finally:
        release_embedded_server(base)
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--facts", type=int, default=30_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    times = asyncio.run(measure(args))
    command = f"python -m benchmarks.analyze_cost --facts {args.facts} --rounds {args.rounds}"
    print(f"`{command}`: ANALYZE median (min) s")
    for setting, tables in times.items():
        cells = ", ".join(f"{t} {statistics.median(v):.3f} ({min(v):.3f})" for t, v in tables.items())
        print(f"- {setting}: {cells}")


if __name__ == "__main__":
    main()
