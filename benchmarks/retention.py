"""Trace retention beside the trace writes of context calls.

    .venv/bin/python -m benchmarks.retention [--calls 6000] [--rounds 300] [--batch 500] [--pause-ratio 0]

On one embedded PostgreSQL, writes `--calls` context calls of 128 decisions each
(insert_context_trace, the last write of every POST /v1/context), then backdates every second
one by 40 days. It times `--rounds` trace writes alone before and after, and the trace writes
made one after another while the retention purge (service/memory/retention.py purge_once,
batches of `--batch` calls) runs on a second connection; and the purge's own rate. Then it
seeds `--facts` facts into the scope and times the erasure of one fact and of the whole subject
(docs/reliability.md, "Trace retention" and "Erasure").
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
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.trace_usage import PROJECT, call, decisions, packet
from service.db import connect, create_pool, init_connection
from service.db.embedded import embedded_url, release_embedded_server
from service.db.migrations import migrate
from service.memory import retention
from service.repository import context as repo
from service.repository import facts as memory_repo
from service.repository import lifecycle as lifecycle_repo
from service.settings import Settings
from service.structs import FactErasure
from tests.helpers.sql import load_test_queries


async def write(conn: Any, rng: random.Random, pool: list[uuid.UUID]) -> tuple[uuid.UUID, float]:
    p = packet()
    ds = decisions(rng, pool)[:128]
    start = time.perf_counter()
    await repo.insert_context_trace(conn, call(None), p, ds)
    return p.trace_id, (time.perf_counter() - start) * 1000.0


async def run(calls: int, rounds: int, batch: int, pause_ratio: float, facts: int) -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="haki-retention-"))
    rng = random.Random(14)
    ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(10_000)]
    try:
        settings = Settings(data_dir=base, embed_provider="hash", database_url=embedded_url(base))
        # The seeding (random vectors into 16 HNSW graphs) outlasts the service's 5 s timeout.
        settings = msgspec.structs.replace(
            settings, trace_purge_batch=batch, pool_max_size=2, statement_timeout_ms=600_000
        )
        conn = await connect(settings)
        await migrate(conn)
        await init_connection(conn)
        written = [(await write(conn, rng, ids))[0] for _ in range(calls)]
        await load_test_queries().test_backdate_context_calls(
            conn, project_id=PROJECT, trace_ids=written[::2], days=40
        )
        await conn.execute("VACUUM ANALYZE context_calls, context_traces")
        alone = [(await write(conn, rng, ids))[1] for _ in range(rounds)]
        pool = await create_pool(settings)
        beside: list[float] = []
        purge_start = time.perf_counter()
        purging = asyncio.create_task(retention.purge_once(pool, settings, pause_ratio=pause_ratio))
        await asyncio.sleep(0)
        # Only the writes made while the purge runs count.
        while not purging.done():
            beside.append((await write(conn, rng, ids))[1])
        purge_seconds = time.perf_counter() - purge_start
        # The machine drifts: the writes alone are timed before and after, and pooled.
        alone += [(await write(conn, rng, ids))[1] for _ in range(rounds)]
        purged = await purging
        await pool.close()
        # Erasure of the same scope: one fact (its decisions are found through the scope's
        # calls), then the whole subject, after `--facts` facts are seeded into it.
        for start_at in range(0, facts, 1000):  # in chunks: each statement under the timeout
            await load_test_queries().test_seed_random_facts(
                conn,
                project_id=PROJECT,
                subject_id="s",
                n=min(1000, facts - start_at),
                content_prefix="seeded",
            )
        (fact,) = await memory_repo.list_facts(conn, PROJECT, "s", None, None, 1)
        fact_id = fact.fact_id
        start = time.perf_counter()
        await lifecycle_repo.erase_memory(conn, FactErasure, PROJECT, fact_id, uuid.uuid4(), uuid.uuid4())
        erase_fact_ms = (time.perf_counter() - start) * 1000.0
        start = time.perf_counter()
        erased = await lifecycle_repo.erase_subject(conn, PROJECT, "s", uuid.uuid4(), uuid.uuid4())
        erase_subject_ms = (time.perf_counter() - start) * 1000.0
        await conn.close()
        return {
            "erase_fact_ms": erase_fact_ms,
            "erase_subject_ms": erase_subject_ms,
            "erased_facts": float(erased.facts),
            "erased_calls": float(erased.context_calls),
            "erased_decisions": float(erased.decisions),
            "alone_ms": statistics.median(alone),
            "beside_ms": statistics.median(beside),
            "writes_beside": float(len(beside)),
            "purged_calls": float(purged.context_calls),
            "purged_decisions": float(purged.decisions),
            "batches": float(purged.batches),
            "purge_seconds": purge_seconds,
        }
    finally:
        release_embedded_server(base)
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=6000)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument(
        "--pause-ratio", type=float, default=0.0, help="rest after each batch, times its duration (serve: 1)"
    )
    p.add_argument("--facts", type=int, default=10_000, help="facts seeded into the erased subject")
    args = p.parse_args(argv)
    r = asyncio.run(run(args.calls, args.rounds, args.batch, args.pause_ratio, args.facts))
    print(f"trace write alone:        median {r['alone_ms']:.3f} ms")
    print(
        f"trace write beside purge: median {r['beside_ms']:.3f} ms ({r['beside_ms'] / r['alone_ms']:.2f}x), "
        f"{r['writes_beside']:.0f} writes"
    )
    rows = r["purged_calls"] + r["purged_decisions"]
    print(
        f"purge: {r['purged_calls']:.0f} calls + {r['purged_decisions']:.0f} decisions in {r['batches']:.0f} "
        f"batches, {r['purge_seconds']:.2f} s ({rows / r['purge_seconds']:,.0f} rows/s)"
    )
    print(f"erase one fact of the scope: {r['erase_fact_ms']:.1f} ms")
    print(
        f"erase the subject: {r['erase_subject_ms']:.0f} ms ({r['erased_facts']:.0f} facts, "
        f"{r['erased_calls']:.0f} calls, {r['erased_decisions']:.0f} decisions)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
