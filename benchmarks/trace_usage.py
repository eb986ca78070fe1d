"""What each memory is worth: counted from the traces (an index) or maintained counters?

    .venv/bin/python -m benchmarks.trace_usage [--rounds 400] [--history 2000]

Times the trace write of one context call with 256 decisions (64 served, 192 left out over
budget, facts drawn from a pool of 10,000 ids), three ways, interleaved round by round in one run
on one embedded PostgreSQL, each round one transaction configured as the assembler's
(open_context_call), the commit outside the timing:

- `no index`: insert_context_trace of an as-of call, whose decisions are not `counted` and so
  skip the partial index context_traces_fact_usage (migration 0012): the write before 0012;
- `index`: insert_context_trace of a call at now (the service since 0012);
- `counters`: the write of `no index` plus an upsert of one counter row per fact
  (bench_insert_context_trace_with_counters, benchmarks/sql/bench.sql).

First `--history` calls are written, so the index and the counters are not empty. Prints the
medians and their ratios to `no index` (docs/performance.md, "What each memory is worth").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.sql import load_bench_queries
from service.context import assembler
from service.context.call import ContextCall
from service.db import connect, init_connection
from service.db.embedded import embedded_url, release_embedded_server
from service.db.migrations import migrate
from service.ids import uuid7
from service.repository import context as repo
from service.settings import Settings
from service.structs import ContextPacket, ContextRequest, Decision

PROJECT = "bench"


def decisions(rng: random.Random, pool: list[uuid.UUID]) -> list[Decision]:
    items = rng.sample(pool, 256)
    return [
        Decision(
            item_type="fact",
            item_id=item,
            decision="included" if i < 64 else "excluded",
            reason_code="packed" if i < 64 else "over_budget",
            rank=i + 1,
            score=0.5,
            similarity=0.6,
            text_rank=0.1,
            recency=0.4,
            cosine_distance=0.4,
            tokens=12,
        )
        for i, item in enumerate(items)
    ]


def call(as_of: datetime | None) -> ContextCall:
    """A `unified` call under the default settings, as its trace records it (benchmarks/explain.py
    and retention.py record the same)."""
    req = ContextRequest(project_id=PROJECT, subject_id="s", query="what does the user like", as_of=as_of)
    return ContextCall.of(req, Settings())


def packet() -> ContextPacket:
    return ContextPacket(
        trace_id=uuid7(),
        profile="unified",
        status="ok",
        warnings=[],
        empty_reason=None,
        budget_tokens=900,
        used_tokens=768,
        facts=[],
        episodes=[],
    )


async def write(conn: Any, mode: str, ds: list[Decision], past: datetime) -> float:
    async with conn.transaction():
        await assembler.open_context_call(conn)
        start = time.perf_counter()
        if mode == "counters":
            p = packet()
            await load_bench_queries().bench_insert_context_trace_with_counters(
                conn,
                project_id=PROJECT,
                trace_id=p.trace_id,
                subject_id="s",
                query="what does the user like",
                profile="unified",
                budget_tokens=900,
                used_tokens=768,
                status="ok",
                warnings=[],
                empty_reason=None,
                facts_served=64,
                episodes_served=0,
                include_episodes=True,
                recall_max_distance=0.0,
                as_of=None,
                replay_of=None,
                decisions=msgspec.json.encode(ds).decode(),
            )
        else:
            as_of = past if mode == "no index" else None
            await repo.insert_context_trace(conn, call(as_of), packet(), ds)
        elapsed = (time.perf_counter() - start) * 1000.0
    return elapsed


async def run(rounds: int, history: int) -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="haki-trace-usage-"))
    rng = random.Random(15)
    pool = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(10_000)]
    past = datetime(2026, 1, 1, tzinfo=UTC)
    modes = ("no index", "index", "counters")
    try:
        settings = Settings(data_dir=base, embed_provider="hash", database_url=embedded_url(base))
        conn = await connect(settings)
        await migrate(conn)
        await init_connection(conn)
        await load_bench_queries().bench_create_fact_counters(conn)
        for i in range(history):
            await write(conn, modes[1 + i % 2], decisions(rng, pool), past)
        times: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(rounds):
            for mode in rng.sample(modes, len(modes)):
                times[mode].append(await write(conn, mode, decisions(rng, pool), past))
        await conn.close()
        return {m: statistics.median(t) for m, t in times.items()}
    finally:
        release_embedded_server(base)
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=400)
    p.add_argument("--history", type=int, default=2000)
    args = p.parse_args(argv)
    medians = asyncio.run(run(args.rounds, args.history))
    base = medians["no index"]
    for mode, ms in medians.items():
        print(f"{mode:>9}: median {ms:.3f} ms  ({ms / base:.2f}x the write without the index)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
