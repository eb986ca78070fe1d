"""Trace storage: one row per decision (before migration 0026) against one compact row per call.

    .venv/bin/python -m benchmarks.trace_storage [--facts 2000] [--samples 30] [--calls 150] \
        [--purge-calls 20000]

On one embedded PostgreSQL with the hash embedder's vectors: seeds one scope (`--facts` facts,
events, open conflicts, stale facts), runs `--samples` real context calls of each profile
(run_context_call) and keeps their decisions. Then, for each profile, writes `--calls` traces of
those decisions in each form, alternating, each in a transaction configured as a context call's
(open_context_call, durable commit), and reports:

- bytes per call: context_calls and context_traces with TOAST and indexes, before and after,
  and by part (heap, TOAST, TOAST index, each index);
- WAL bytes per call (pg_current_wal_lsn before and after, commits included);
- the trace write's median (the insert statement alone, client round trip), the forms
  alternating: rows, the compact row from one JSON array (`compact_json`, the write until
  2026-12-05) and from parallel arrays (`compact`, insert_context_trace); beside the last, its
  parts: the same ten arrays sent to a statement that only counts them, and an empty round trip;
- GET /v1/inspect's read (get_inspection) p50 of each form;
- what the facts are worth (haki_fact_usage over the scope's facts) read from each form;
- the array sizes of the compact form, and its score parts as real[] (the encoding not taken).

Last, `--purge-calls` compact `unified` traces made 40 days ago, purged by the retention job
(purge_once, HAKI_TRACE_PURGE_BATCH calls a statement): its time, the dead rows it leaves, and
the table's size before and after VACUUM, with the VACUUM's time (docs/performance.md, "Trace
storage"). Up to 2,000 are written as a call writes them, the rest are copies of those made in
bulk (bench_clone_calls), so a day of a million calls is measured, not extrapolated.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.seed import ScopeSpec, load, queries
from benchmarks.sql import load_bench_queries
from benchmarks.world import InstantEmbedder
from service.context import assembler
from service.context.call import ContextCall
from service.db import connect, create_pool, init_connection
from service.db.call_runner import run_context_call
from service.db.embedded import embedded_url, release_embedded_server
from service.db.migrations import migrate
from service.ids import uuid7
from service.memory import retention
from service.repository import context as repo
from service.settings import ContextProfile, Settings
from service.structs import ContextPacket, ContextRequest, Decision

PROJECT = "bench"
SUBJECT = "s"
PROFILES: tuple[ContextProfile, ...] = ("facts_first", "unified")
_JSON = msgspec.json.Encoder()


def packet(profile: ContextProfile) -> ContextPacket:
    return ContextPacket(
        trace_id=uuid7(),
        profile=profile,
        status="ok",
        warnings=[],
        empty_reason=None,
        budget_tokens=900,
        used_tokens=768,
        facts=[],
        episodes=[],
    )


def call_of(project_id: str, profile: ContextProfile, settings: Settings) -> ContextCall:
    req = ContextRequest(
        project_id=project_id, subject_id=SUBJECT, query="what does the user like", profile=profile
    )
    return ContextCall.of(req, settings)


# The parts of the compact write, timed beside it: the arrays it sends (trace_columns' lists),
# sent to a statement that only counts them, and an empty round trip.
_PARTS = ("arrays", "round_trip")


async def write(conn: Any, call: ContextCall, ds: list[Decision], form: str = "compact") -> tuple[float, Any]:
    """One trace written in `form` in a transaction configured as a context call's (or, for the
    _PARTS, a part of that write); the time includes the client's encoding of the decisions."""
    p = packet(call.profile)
    async with conn.transaction():
        await assembler.open_context_call(conn)
        start = time.perf_counter()
        columns = repo.trace_call_columns(call, p)
        if form == "rows":
            await load_bench_queries().bench_insert_row_trace(
                conn, **columns, decisions=_JSON.encode(ds).decode()
            )
        elif form == "compact_json":
            await load_bench_queries().bench_insert_compact_json(
                conn, **columns, decisions=_JSON.encode(ds).decode()
            )
        elif form == "arrays":
            arrays = repo.trace_columns(ds, await repo.trace_codes(conn))
            await load_bench_queries().bench_send_trace_arrays(
                conn, **{k: v for k, v in arrays.items() if isinstance(v, list)}
            )
        elif form == "round_trip":
            await load_bench_queries().bench_round_trip(conn)
        else:
            await repo.insert_context_trace(conn, call, p, ds)
        took = time.perf_counter() - start
    return took * 1000.0, p.trace_id


async def footprint(conn: Any) -> tuple[int, int]:
    row = await load_bench_queries().bench_trace_bytes(conn)
    return int(row["bytes"]), int(row["wal_bytes"])


async def relations(conn: Any) -> dict[str, int]:
    """Bytes on disk by part (heap, toast, toast index, each index), both tables summed."""
    parts: dict[str, int] = {}
    async for row in load_bench_queries().bench_trace_relations(conn):
        parts[row["part"]] = parts.get(row["part"], 0) + int(row["bytes"])
    return parts


async def sample_decisions(
    conn: Any, settings: Settings, profile: ContextProfile, n: int
) -> list[list[Decision]]:
    """The decisions of `n` real calls of `profile` (traced, then read back)."""
    embedder = InstantEmbedder()
    out = []
    for query in queries(n):
        embedder.vector = query.vector
        req = ContextRequest(project_id=PROJECT, subject_id=SUBJECT, query=query.text, profile=profile)
        p = await run_context_call(conn, embedder, ContextCall.of(req, settings))
        found = await repo.get_inspection(conn, PROJECT, p.trace_id)
        assert found is not None
        out.append(found.decisions)
    return out


async def measure_profile(
    conn: Any, settings: Settings, profile: ContextProfile, samples: list[list[Decision]], calls: int
) -> dict[str, Any]:
    forms = ("rows", "compact_json", "compact")
    out: dict[str, Any] = {"decisions": statistics.mean(len(s) for s in samples)}
    ids: dict[str, list[Any]] = {f: [] for f in forms}
    for form in forms:
        call = call_of(f"{form}-{profile}", profile, settings)
        rng = random.Random(26)  # each form writes the same calls' decisions
        # A few writes first, so the first pages and the catalog are warm.
        for _ in range(5):
            await write(conn, call, rng.choice(samples), form)
        before, wal_before = await footprint(conn)
        parts_before = await relations(conn)
        for _ in range(calls):
            ids[form].append((await write(conn, call, rng.choice(samples), form))[1])
        after, wal_after = await footprint(conn)
        parts_after = await relations(conn)
        out[form] = {
            "bytes_per_call": (after - before) / calls,
            "bytes_per_call_by_part": {
                part: round((size - parts_before.get(part, 0)) / calls)
                for part, size in sorted(parts_after.items())
                if size != parts_before.get(part, 0)
            },
            "wal_per_call": (wal_after - wal_before) / calls,
        }
    # The write's time, the forms alternating (the blocks above measure the bytes).
    writes: dict[str, list[float]] = {f: [] for f in forms}
    calls_of = {form: call_of(f"{form}-{profile}", profile, settings) for form in forms}
    rng = random.Random(29)
    parts: dict[str, list[float]] = {f: [] for f in _PARTS}
    for _ in range(calls):
        ds = rng.choice(samples)
        for form in forms:
            writes[form].append((await write(conn, calls_of[form], ds, form))[0])
        for part in _PARTS:
            parts[part].append((await write(conn, calls_of["compact"], ds, part))[0])
    for form in forms:
        out[form]["write_ms_p50"] = statistics.median(writes[form])
    out["compact"]["write_parts_ms_p50"] = {part: statistics.median(parts[part]) for part in _PARTS}
    # Inspect and the facts' worth, the forms alternating.
    reads: dict[str, list[float]] = {f: [] for f in forms}
    usage: dict[str, list[float]] = {f: [] for f in forms}
    fact_ids = list({d.item_id for s in samples for d in s if d.item_type == "fact"})[:200]
    for i in range(calls):
        for form in forms:
            project = f"{form}-{profile}"
            start = time.perf_counter()
            await repo.get_inspection(conn, project, ids[form][i])
            reads[form].append((time.perf_counter() - start) * 1000.0)
            if i % 10 == 0:
                start = time.perf_counter()
                await load_bench_queries().bench_fact_usage(conn, project_id=project, fact_ids=fact_ids)
                usage[form].append((time.perf_counter() - start) * 1000.0)
    for form in forms:
        out[form]["inspect_ms_p50"] = statistics.median(reads[form])
        out[form]["usage_200_facts_ms_p50"] = statistics.median(usage[form])
    arrays = await load_bench_queries().bench_array_bytes(conn, project_id=f"compact-{profile}")
    out["compact_arrays"] = {k: round(v) for k, v in dict(arrays).items()}
    return out


async def measure_uncounted(
    conn: Any, settings: Settings, profile: ContextProfile, samples: list[list[Decision]], calls: int
) -> float:
    """The compact write of an as-of call, whose decisions skip the usage indexes (the GIN
    indexes' share of the write)."""
    rng = random.Random(27)
    call = msgspec.structs.replace(
        call_of(f"asof-{profile}", profile, settings), as_of=datetime.now(UTC) - timedelta(days=1)
    )
    times = [(await write(conn, call, rng.choice(samples)))[0] for _ in range(calls)]
    return statistics.median(times)


# The purge's calls: this many written through insert_context_trace, the rest their copies
# (bench_clone_calls), CLONE_CHUNK calls a statement.
PURGE_WRITTEN = 2_000
CLONE_CHUNK = 50_000


async def measure_purge(
    conn: Any, settings: Settings, samples: list[list[Decision]], n: int
) -> dict[str, float]:
    project, source = "purge", "purge-source"
    call = call_of(source, "unified", settings)
    rng = random.Random(28)
    written = min(n, PURGE_WRITTEN)
    for _ in range(written):
        await repo.insert_context_trace(conn, call, packet("unified"), rng.choice(samples))
    copies = -(-n // written)
    per_chunk = max(1, CLONE_CHUNK // written)
    fill_start = time.perf_counter()
    for first in range(0, copies, per_chunk):
        last = min(first + per_chunk, copies) - 1
        await load_bench_queries().bench_clone_calls(
            conn, project_id=project, source_project_id=source, first=first, last=last, days=40
        )
        print(f"  purge fill: {(last + 1) * written:,} calls", file=sys.stderr, flush=True)
    fill_seconds = time.perf_counter() - fill_start
    await conn.execute("VACUUM ANALYZE context_calls")
    size_before, _ = await footprint(conn)
    settings = msgspec.structs.replace(settings, trace_retention_days=30)
    pool = await create_pool(settings)
    try:
        start = time.perf_counter()
        purged = await retention.purge_once(pool, settings)
        seconds = time.perf_counter() - start
    finally:
        await pool.close()
    await conn.execute("ANALYZE context_calls")
    dead = await load_bench_queries().bench_dead_rows(conn)
    size_after, _ = await footprint(conn)
    start = time.perf_counter()
    await conn.execute("VACUUM context_calls")
    vacuum_seconds = time.perf_counter() - start
    size_vacuumed, _ = await footprint(conn)
    return {
        "fill_seconds": fill_seconds,
        "calls": purged.context_calls,
        "decisions": purged.decisions,
        "seconds": seconds,
        "calls_per_second": purged.context_calls / seconds,
        "seconds_at_1M_calls": seconds * 1_000_000 / max(purged.context_calls, 1),
        "dead_rows_left": dead["dead_rows"],
        "mb_before": size_before / 1e6,
        "mb_after_purge": size_after / 1e6,
        "vacuum_seconds": vacuum_seconds,
        "mb_after_vacuum": size_vacuumed / 1e6,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="haki-trace-storage-"))
    try:
        settings = Settings(data_dir=base, embed_provider="hash", database_url=embedded_url(base))
        settings = msgspec.structs.replace(settings, statement_timeout_ms=600_000, pool_max_size=2)
        conn = await connect(settings)
        await migrate(conn)
        await init_connection(conn)
        spec = ScopeSpec(SUBJECT, args.facts, inactive=args.facts // 20, events=args.facts // 5,
                         open_conflicts=5, stale_volatile=10)  # fmt: skip
        await load(conn, PROJECT, [spec], maintenance_work_mem="256MB")
        await conn.close()
        conn = await connect(settings)
        await init_connection(conn)
        report: dict[str, Any] = {}
        samples = {p: await sample_decisions(conn, settings, p, args.samples) for p in PROFILES}
        for profile in PROFILES:
            measured = await measure_profile(conn, settings, profile, samples[profile], args.calls)
            measured["compact_uncounted_write_ms_p50"] = await measure_uncounted(
                conn, settings, profile, samples[profile], args.calls
            )
            report[profile] = measured
        if args.purge_calls:
            report["purge"] = await measure_purge(conn, settings, samples["unified"], args.purge_calls)
        await conn.close()
        return report
    finally:
        release_embedded_server(base)
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--purge-calls", type=int, default=20_000)
    report = asyncio.run(run(parser.parse_args()))
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(report)).decode() + "\n")


if __name__ == "__main__":
    main()
