"""Context latency right after a bulk write, then after ANALYZE and VACUUM of facts.

    .venv/bin/python -m benchmarks.fresh_stats              # 10k facts in one scope, 100 in another

One `haki serve` (hash embedder) gets --facts facts for one subject through bulk POST /v1/facts
(1,000 per request) and 100 facts for another, then answers --queries fresh questions of each
subject in four phases: right after the writes, again, after `ANALYZE facts`, after
`VACUUM facts`. Each phase prints the p50 at 100 facts, at --facts facts and their ratio (issue
13's target for the OpenAI-compatible path: <= 1.5), and the table's `n_mod_since_analyze` says
whether the service's statistics keeper (service/memory/statistics.py) refreshed the planner
statistics before the first phase.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

import asyncpg
import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.ingest_openai import NAMES, PROJECT, TOPICS, context_ms, fact_text, post_facts  # noqa: E402
from benchmarks.load import Server  # noqa: E402
from benchmarks.sql import load_bench_queries  # noqa: E402
from service.db.embedded import embedded_url  # noqa: E402


async def phase(
    client: httpx.AsyncClient, headers: dict[str, str], rng: random.Random, n: int, tag: str
) -> None:
    lat: dict[str, list[float]] = {"small": [], "big": []}
    for i in range(n):
        query = f"What did {rng.choice(NAMES)} say about {rng.choice(TOPICS)}? ({tag} {i})"
        for subject in ("small", "big"):
            lat[subject].append(await context_ms(client, headers, subject, f"{query} {subject}"))
    small, big = statistics.median(lat["small"]), statistics.median(lat["big"])
    print(f"| {tag} | {small:.2f} | {big:.2f} | {big / small:.2f} |", flush=True)


async def run(args: argparse.Namespace) -> None:
    with Server("hash", project=PROJECT) as server:
        headers = {"Authorization": f"Bearer {server.create_key()}"}
        rng = random.Random(7)
        sql = load_bench_queries()
        async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
            await post_facts(client, headers, "warm", [fact_text(rng, i) for i in range(200)])
            for start in range(0, args.facts, 1000):
                end = min(args.facts, start + 1000)
                await post_facts(client, headers, "big", [fact_text(rng, i) for i in range(start, end)])
            await post_facts(client, headers, "small", [fact_text(rng, i) for i in range(100)])
            conn = await asyncpg.connect(embedded_url(server.data_dir))
            try:
                row = await sql.bench_facts_since_analyze(conn)
                print(f"facts modified since the last ANALYZE when the queries start: {row['n_mod']}\n")
                print("| phase | p50 ms at 100 | p50 ms at big | ratio |\n|---|---:|---:|---:|")
                await phase(client, headers, rng, args.queries, "right after the writes")
                await phase(client, headers, rng, args.queries, "again")
                started = time.perf_counter()
                await sql.bench_analyze_facts(conn)
                took = time.perf_counter() - started
                await phase(client, headers, rng, args.queries, f"after ANALYZE facts ({took:.2f} s)")
                await sql.bench_vacuum_facts(conn)
                await phase(client, headers, rng, args.queries, "after VACUUM facts")
            finally:
                await conn.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--facts", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=60, help="fresh questions per subject and phase")
    asyncio.run(run(p.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
