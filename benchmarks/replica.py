"""Reads split over a primary and a streaming standby, against the primary alone.

    .venv/bin/python -m benchmarks.replica                    # 16 clients, 20 s per run, hash embedder
    .venv/bin/python -m benchmarks.replica --duration 30 --embed local

What it does, on one machine (so a ratio, never a promise of capacity):
1. starts an embedded PostgreSQL (the primary), migrates it, and makes a second one its streaming
   standby with `pg_basebackup -R` (service.db.embedded.embedded_standby);
2. starts two `haki serve` on the primary: A with HAKI_DATABASE_URL alone, B with
   HAKI_DATABASE_READ_URL on the standby as well; seeds --subjects subjects through A
   (benchmarks/load.py's seed) and waits until the standby replayed them;
3. runs benchmarks/load.py's client loop at --concurrency clients, alternately against A and B
   (A, B, A, B: drift of the machine shows as a difference between the two runs of one side):
   - `reads`: POST /v1/context only: the throughput of the read path, split or not;
   - `mixed`: 20 % writes (load.py's mix), where each written scope reads from the primary until
     the standby replayed the write (per-scope WAL position, service/db/replica.py); the share of
     reads sent to the primary for it is read from B's /metrics;
4. measures each read-your-writes mechanism's cost: the per-scope position is one
   `SELECT pg_current_wal_insert_lsn()` after each write (timed alone, and as B's write latency
   against A's), and `synchronous_commit = remote_apply` with the standby synchronous (the
   alternative that also covers other processes' writes): B's mixed run again with it set on
   the primary, writes waiting for the standby's replay.
Prints one table; exit status 1 on any request error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from benchmarks.load import PROJECT, Results, Server, client_loop, percentile, seed
from benchmarks.sql import load_bench_queries
from service.db.embedded import embedded_server, embedded_standby, embedded_url
from service.db.migrations import migrate
from service.repository import replica as replica_repo

# B's /metrics token: /metrics is closed without one.
METRICS_TOKEN = "replica-bench-metrics"


def fallbacks(metrics: str) -> dict[str, float]:
    found = re.findall(r'^haki_read_replica_fallbacks_total\{reason="(\w+)"\} (\S+)$', metrics, re.MULTILINE)
    return {reason: float(n) for reason, n in found}


def reads_by_pool(metrics: str) -> dict[str, float]:
    found = re.findall(r'^haki_read_requests_total\{pool="(\w+)"\} (\S+)$', metrics, re.MULTILINE)
    return {pool: float(n) for pool, n in found}


async def wait_replayed(primary_url: str, standby_url: str) -> float:
    """Seconds until the standby replayed the primary's current WAL position."""
    start = time.perf_counter()
    p, s = await asyncpg.connect(primary_url), await asyncpg.connect(standby_url)
    try:
        lsn = await replica_repo.wal_insert_lsn(p)
        while ((await replica_repo.standby_position(s))[1] or -1) < lsn:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    finally:
        await p.close()
        await s.close()
    return time.perf_counter() - start


async def lsn_round_trip_ms(primary_url: str, n: int = 2000) -> float:
    """The per-scope mechanism's cost on the write path: its one extra statement, alone."""
    conn = await asyncpg.connect(primary_url)
    try:
        for _ in range(100):
            await replica_repo.wal_insert_lsn(conn)  # the statement note_write runs, as it runs it
        start = time.perf_counter()
        for _ in range(n):
            await replica_repo.wal_insert_lsn(conn)
        return (time.perf_counter() - start) / n * 1000
    finally:
        await conn.close()


async def set_remote_apply(primary_url: str, on: bool) -> None:
    conn = await asyncpg.connect(primary_url)
    try:
        sql = load_bench_queries()
        if on:
            await sql.bench_set_synchronous_standbys(conn)
            await sql.bench_set_remote_apply(conn)
        else:
            await sql.bench_reset_synchronous_standbys(conn)
            await sql.bench_reset_remote_apply(conn)
        await sql.bench_reload_conf(conn)
    finally:
        await conn.close()


async def measure(
    client: httpx.AsyncClient, key: str, args: argparse.Namespace, write_share: float
) -> Results:
    loop_args = argparse.Namespace(subjects=args.subjects, write_share=write_share)
    warm = Results()
    warm_end = time.monotonic() + args.warmup
    await asyncio.gather(
        *(client_loop(client, key, w, loop_args, warm_end, warm) for w in range(args.concurrency))
    )
    out = Results()
    out.started = time.monotonic()
    deadline = out.started + args.duration
    await asyncio.gather(
        *(client_loop(client, key, 100 + w, loop_args, deadline, out) for w in range(args.concurrency))
    )
    out.ended = time.monotonic()
    return out


def row(name: str, out: Results, extra: str = "") -> dict[str, Any]:
    seconds = out.ended - out.started
    context = out.latencies["context"]
    writes = out.latencies["facts"] + out.latencies["events"]
    every = context + writes
    summary = {
        "run": name,
        "req_s": round(len(every) / seconds, 1),
        "context_req_s": round(len(context) / seconds, 1),
        "context_p50_ms": round(percentile(context, 50) * 1000, 1),
        "context_p95_ms": round(percentile(context, 95) * 1000, 1),
        "write_p50_ms": round(percentile(writes, 50) * 1000, 1) if writes else None,
        "errors": sum(out.errors.values()),
        "extra": extra,
    }
    print(
        f"| {name} | {summary['req_s']} | {summary['context_req_s']} | {summary['context_p50_ms']} "
        f"| {summary['context_p95_ms']} | {summary['write_p50_ms'] or '-'} | {summary['errors']} | {extra} |",
        flush=True,
    )
    for kind, n in out.errors.most_common(3):
        print(f"    {n} x {kind}", file=sys.stderr)
    return summary


async def run(
    args: argparse.Namespace, a: Server, b: Server, key: str, primary_url: str, standby_url: str
) -> int:
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    errors = 0
    async with (
        httpx.AsyncClient(base_url=a.url, timeout=60, limits=limits) as ca,
        httpx.AsyncClient(base_url=b.url, timeout=60, limits=limits) as cb,
    ):
        print(f"seeding {args.subjects} subjects x (100 facts + 20 events)...", file=sys.stderr)
        await seed(ca, key, args.subjects)
        print(
            f"standby replayed the seed {await wait_replayed(primary_url, standby_url):.2f} s later",
            file=sys.stderr,
        )
        machine = f"{platform.machine()}, {os.cpu_count()} CPU(s)"
        print(
            f"\n{machine}; embedder {args.embed}; {args.concurrency} clients, {args.duration:.0f} s per run\n"
        )
        header = "| run | req/s | context req/s | context p50 ms | context p95 ms | write p50 ms "
        print(header + "| errors | notes |")
        print("|---|---|---|---|---|---|---|---|")
        reads: dict[str, list[float]] = {"A": [], "B": []}
        for i in range(args.rounds):
            for name, client in (("A", ca), ("B", cb)):
                out = await measure(client, key, args, 0.0)
                label = "primary alone" if name == "A" else "primary + standby"
                s = row(f"reads {name} ({label}) #{i + 1}", out)
                reads[name].append(s["context_req_s"])
                errors += s["errors"]
        mixed: dict[str, dict[str, Any]] = {}
        for name, client in (("A", ca), ("B", cb)):
            scrape = {"Authorization": f"Bearer {METRICS_TOKEN}"}
            before = (await cb.get("/metrics", headers=scrape)).text
            out = await measure(client, key, args, 0.2)
            after = (await cb.get("/metrics", headers=scrape)).text
            note = ""
            if name == "B":
                fb = {k: v - fallbacks(before).get(k, 0.0) for k, v in fallbacks(after).items()}
                pools = {k: v - reads_by_pool(before).get(k, 0.0) for k, v in reads_by_pool(after).items()}
                total = sum(pools.values()) or 1.0
                note = (
                    f"reads on the primary: {pools.get('primary', 0) / total:.1%} "
                    f"(unreplayed_write {fb.get('unreplayed_write', 0) / total:.1%}, "
                    f"lagging {fb.get('lagging', 0) / total:.1%})"
                )
            mixed[name] = row(f"mixed {name}", out, note)
            errors += mixed[name]["errors"]
        await set_remote_apply(primary_url, True)
        try:
            out = await measure(cb, key, args, 0.2)
            remote = row(
                "mixed B, synchronous_commit = remote_apply", out, "writes wait for the standby's replay"
            )
            errors += remote["errors"]
        finally:
            await set_remote_apply(primary_url, False)
    lsn_ms = await lsn_round_trip_ms(primary_url)
    ratio = (sum(reads["B"]) / len(reads["B"])) / (sum(reads["A"]) / len(reads["A"]))
    print(
        f"\ncontext throughput, primary + standby / primary alone: {ratio:.2f}x "
        f"(mean of {args.rounds} runs each)"
    )
    print(f"per-scope WAL position: SELECT pg_current_wal_insert_lsn() alone = {lsn_ms:.3f} ms per write")
    print(
        f"write p50: A {mixed['A']['write_p50_ms']} ms, B {mixed['B']['write_p50_ms']} ms, "
        f"B with remote_apply {remote['write_p50_ms']} ms"
    )
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2, help="A/B alternations of the read-only run")
    parser.add_argument("--subjects", type=int, default=20)
    parser.add_argument("--embed", choices=["local", "hash"], default="hash")
    args = parser.parse_args(argv)

    base = Path(tempfile.mkdtemp(prefix="haki-replica-", dir=os.environ.get("HAKI_BENCH_TMP")))
    servers: list[Server] = []
    try:
        primary_url = embedded_url(base / "primary")

        async def migrated() -> None:
            conn = await asyncpg.connect(primary_url)
            try:
                await migrate(conn)
            finally:
                await conn.close()

        asyncio.run(migrated())
        embedded_standby(base / "primary", base / "standby")
        standby_url = embedded_url(base / "standby")
        a = Server(args.embed, env={"HAKI_DATABASE_URL": primary_url}, project=PROJECT)
        servers.append(a)
        key = a.create_key()
        a.start()
        b = Server(
            args.embed,
            env={
                "HAKI_DATABASE_URL": primary_url,
                "HAKI_DATABASE_READ_URL": standby_url,
                "HAKI_METRICS_TOKEN": METRICS_TOKEN,
            },
            project=PROJECT,
        )
        servers.append(b)
        b.start()
        return asyncio.run(run(args, a, b, key, primary_url, standby_url))
    finally:
        for server in reversed(servers):
            server.stop()
        for name in ("standby", "primary"):
            with contextlib.suppress(Exception):
                embedded_server(base / name).cleanup()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
