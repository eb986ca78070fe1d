"""Full text under a steady write load: the GIN pending list (`fastupdate`) and its three cures.

    .venv/bin/python -m benchmarks.gin_pending                  # 5 x 10k + 100 facts, 60 write rounds
    .venv/bin/python -m benchmarks.gin_pending --big 2000 --rounds 10   # a quick smoke run
    .venv/bin/python -m benchmarks.gin_pending --embed local --modes off --rounds 40   # real vectors

A scope's text top-K at 9 ms right after 50k writes through the API, and at
0.8 ms after `VACUUM facts` flushed the pending list. A memory service is write-heavy, so the list
is never empty between two autovacuums. This benchmark writes the issue's world (five scopes of
--big facts and one of 100, through the service's own write path, with the hash embedder or with
--embed local the local model), then, for each index mode in turn, starts from a flushed index
and runs --rounds rounds of:

1. one write batch: 100 facts spread over the big scopes and 20 events, timed (a write's cost,
   including the pending-list clean of the `clean` mode);
2. one context call per profile on the 100-fact scope and on a big scope, queries of four common
   words, timing the assembler's own `candidates` stage (what Server-Timing reports).

Modes (applied to all four scoped GIN indexes of facts and events):
- `pending`: fastupdate on, the default 4 MB gin_pending_list_limit (facts' simple-config index
  before migration 0013);
- `off`: fastupdate off, every write updates the posting trees at once;
- `small`: fastupdate on, gin_pending_list_limit = 64 kB (the minimum);
- `clean`: fastupdate on, `gin_clean_pending_list` after each write batch.

It prints, per mode, the p50 of the write batch and of each candidates stage, and the ratios the
issue sets targets on (100-fact scope <= 2 ms; big / small <= 1.5). The index settings are
changed with the ALTER INDEX statements of benchmarks/sql/gin_pending.sql, never in production
code; the chosen mode ships in migration 0013.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
import uuid
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.sql import load_bench_queries
from service.api.auth import Principal
from service.context.call import ContextCall
from service.db import connect, init_connection
from service.db.call_runner import run_context_call
from service.db.embedded import embedded_server, embedded_url
from service.db.migrations import migrate
from service.embedding.embedder import Embedder, build_embedder
from service.memory import writes as memory
from service.observability.timing import StageTimer
from service.settings import ContextProfile, Settings
from service.structs import ContextRequest, EventIn, FactIn, WriteEventsRequest, WriteFactsRequest

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")

PROJECT = "bench-gin"
SMALL = "s100"
MODES = ("pending", "off", "small", "clean")
PROFILES: tuple[ContextProfile, ...] = ("unified", "facts_first")
# Words every scope names often, so each query word's postings are long ones: the case where the
# pending list (scanned whole for every word) and the posting trees differ most.
COMMON = ["coffee", "work", "friends", "weekend", "music", "travel", "family", "morning", "city", "team"]
NAMES = ["Alice", "Bruno", "Chloe", "Daniel", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas"]
VERBS = ["likes", "talked about", "planned", "remembered", "visited", "prefers", "mentioned", "enjoys"]
RARE = [f"w{i:04d}" for i in range(3000)]

SQL = load_bench_queries()


def fact_text(rng: random.Random) -> str:
    words = rng.sample(COMMON, 2) + rng.sample(RARE, 3)
    return f"{rng.choice(NAMES)} {rng.choice(VERBS)} {' '.join(words)}"


def query_text(rng: random.Random) -> str:
    return " ".join(rng.sample(COMMON, 4))


async def write_batch(
    conn: Any,
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    rng: random.Random,
    subject: str,
    facts: int,
    events: int,
) -> None:
    req = WriteFactsRequest(
        project_id=PROJECT, subject_id=subject, facts=[FactIn(content=fact_text(rng)) for _ in range(facts)]
    )
    await memory.write_facts(conn, embedder, settings, principal, req)
    if events:
        now = datetime.now(UTC)
        ev = WriteEventsRequest(
            project_id=PROJECT,
            subject_id=subject,
            events=[
                EventIn(content=fact_text(rng), occurred_at=now - timedelta(minutes=i)) for i in range(events)
            ],
        )
        await memory.write_events(conn, embedder, settings, principal, ev)


async def seed(
    conn: Any, embedder: Embedder, settings: Settings, principal: Principal, big: int
) -> list[str]:
    rng = random.Random(13)
    scopes = [f"s10k-{i}" for i in range(5)]
    for scope in scopes:
        for _ in range(big // 500):
            await write_batch(conn, embedder, settings, principal, rng, scope, 500, 50)
    await write_batch(conn, embedder, settings, principal, rng, SMALL, 100, 10)
    return scopes


async def set_mode(conn: Any, mode: str) -> None:
    if mode == "off":
        await SQL.gin_mode_off(conn)
    elif mode == "small":
        await SQL.gin_mode_small(conn)
    else:
        await SQL.gin_mode_pending(conn)
    await SQL.vacuum_memory(conn)


async def candidates_ms(
    conn: Any,
    embedder: Embedder,
    settings: Settings,
    subject: str,
    query: str,
    profile: ContextProfile,
) -> float:
    timer = StageTimer()
    req = ContextRequest(project_id=PROJECT, subject_id=subject, query=query, profile=profile)
    # Each call runs in a transaction that is rolled back: its trace rows are not the measured
    # writes, and they would skew the next mode.
    tx = conn.transaction()
    await tx.start()
    try:
        await run_context_call(conn, embedder, ContextCall.of(req, settings), timer=timer)
    finally:
        await tx.rollback()
    return timer.ms["candidates"]


async def run_mode(
    conn: Any,
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    scopes: list[str],
    mode: str,
    rounds: int,
) -> dict[str, float]:
    await set_mode(conn, mode)
    rng = random.Random(29)
    writes: list[float] = []
    reads: dict[str, list[float]] = {}
    for r in range(rounds):
        start = time.perf_counter()
        await write_batch(conn, embedder, settings, principal, rng, scopes[r % len(scopes)], 100, 20)
        if mode == "clean":
            await SQL.gin_clean_all(conn)
        writes.append((time.perf_counter() - start) * 1000)
        query = query_text(rng)
        for profile in PROFILES:
            for label, subject in (("small", SMALL), ("big", scopes[(r + 1) % len(scopes)])):
                ms = await candidates_ms(conn, embedder, settings, subject, query, profile)
                reads.setdefault(f"{profile}:{label}", []).append(ms)
    out = {"write_ms": statistics.median(writes)}
    for name, values in reads.items():
        out[name] = statistics.median(values)
    return out


async def main_async(args: argparse.Namespace) -> None:
    base = Path(os.environ.get("HAKI_BENCH_TMP", tempfile.gettempdir()))
    data_dir = Path(tempfile.mkdtemp(prefix="haki-gin-", dir=base))
    settings = Settings(data_dir=data_dir, embed_provider=args.embed, database_url=embedded_url(data_dir))
    principal = Principal(project_id=PROJECT, key_id=uuid.uuid4())
    embedder = build_embedder(settings)
    try:
        conn = await connect(settings)
        await migrate(conn)
        await init_connection(conn)
        start = time.perf_counter()
        scopes = await seed(conn, embedder, settings, principal, args.big)
        print(f"seeded 5 x {args.big} + 100 facts in {time.perf_counter() - start:.0f} s", flush=True)
        # A warm-up mode first (caches, plans), then every mode twice, in order and in reverse, so
        # that neither the first nor the last position favours one: each figure is the mean of
        # its two passes' medians.
        await run_mode(conn, embedder, settings, principal, scopes, args.modes[0], max(3, args.rounds // 5))
        passes: dict[str, list[dict[str, float]]] = {}
        for mode in [*args.modes, *reversed(args.modes)]:
            passes.setdefault(mode, []).append(
                await run_mode(conn, embedder, settings, principal, scopes, mode, args.rounds)
            )
            print(mode, {k: round(v, 2) for k, v in passes[mode][-1].items()}, flush=True)
        results = {mode: {k: statistics.mean(p[k] for p in ps) for k in ps[0]} for mode, ps in passes.items()}
        await conn.close()
    finally:
        await embedder.aclose()
        embedded_server(data_dir).cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores; {args.embed} embedder; "
        f"2 x {args.rounds} rounds, p50 ms"
    )
    header = [
        "mode",
        "write batch",
        *(f"{p} {s}" for p in PROFILES for s in ("100", "big")),
        *(f"{p} big/100" for p in PROFILES),
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for mode, r in results.items():
        cells = [mode, f"{r['write_ms']:.1f}"]
        cells += [f"{r[f'{p}:{s}']:.2f}" for p in PROFILES for s in ("small", "big")]
        cells += [f"{r[f'{p}:big'] / r[f'{p}:small']:.2f}" for p in PROFILES]
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--big", type=int, default=10_000, help="facts in each of the five big scopes")
    parser.add_argument("--rounds", type=int, default=60, help="write-then-read rounds per mode")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument(
        "--embed",
        choices=["hash", "local"],
        default="hash",
        help="`local`: the facts and queries embedded by the local model, so the vector walk meets "
        "the neighbourhoods real vectors have (the hash embedder's give HNSW none)",
    )
    args = parser.parse_args(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
