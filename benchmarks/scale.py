"""How the Context Assembler's SQL path scales: 10k -> 100k -> 1M facts, and 1M over 100 scopes.

    .venv/bin/python -m benchmarks.scale                       # every configuration (about 1 h)
    .venv/bin/python -m benchmarks.scale --only 10k,100k       # a subset
    .venv/bin/python -m benchmarks.scale --markdown out.md

Not in CI: the 1M configurations load 1M x 384-dim vectors and build their HNSW graph (tens of
minutes on 2 cores). Each configuration gets its own throw-away embedded PostgreSQL, configured
as Haki creates one (shared_buffers RAM/8 within [128MB, 2GB], service/db/embedded.py; `--tuned`
forces 2GB), is COPY-loaded with the deterministic data of benchmarks/seed.py, indexed in one
pass (maintenance_work_mem 4GB, one parallel worker), VACUUM ANALYZEd, then measured:

- SQL path p50/p95 of both profiles (docs/spec/context-profiles.md), `unified` (the default) and
  `facts_first`, interleaved call by call in one loop, and their ratio:
  service.db.call_runner.run_context_call with a precomputed query vector (all but the embedding:
  candidates, pack, multi-hop, episodes, trace write, transaction);
- fact_candidates alone p50 and unified_candidates alone p50 (interleaved likewise), and the
  score-every-fact baseline p50 (skipped above 100k facts in the measured scope: seconds per
  call, and nobody would ship it);
- HNSW build time, table (heap + TOAST) and HNSW index sizes;
- recall@64: the vector side of fact_candidates (a query text that matches nothing) against the
  exact top-64 of the scope (sequential distance, benchmarks/sql/bench.sql bench_exact_neighbours).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pgvector import Vector

from benchmarks.machine import cores_and_ram
from benchmarks.seed import Query, ScopeSpec, load, percentile, queries
from benchmarks.sql import load_bench_queries
from benchmarks.world import InstantEmbedder
from service.constants import (
    CANDIDATE_LIMIT,
    RECENCY_TAU_SECONDS,
    RETRIEVAL_TOP_K,
    WEIGHT_RECENCY,
    WEIGHT_SIMILARITY,
    WEIGHT_TEXT_RANK,
)
from service.context import assembler
from service.context.call import PROFILE_WEIGHTS, ContextCall
from service.context.model import Probe, Retrieved
from service.db import connect, init_connection
from service.db.call_runner import run_context_call
from service.db.embedded import embedded_url, release_embedded_server
from service.db.migrations import migrate
from service.observability.timing import StageTimer
from service.settings import ContextProfile, Settings
from service.structs import ContextRequest

PROJECT = "scale"
PROFILES: tuple[ContextProfile, ...] = ("unified", "facts_first")
NO_TEXT_MATCH = "qqxxjjnothingmatchesthis"


@dataclass
class Config:
    name: str
    scopes: list[ScopeSpec]
    measured: str  # the subject_id measured
    recall_queries: int = 50


def configs() -> list[Config]:
    def one(n: int) -> ScopeSpec:
        return ScopeSpec("scope-0", n, inactive=n // 20, events=1_000, open_conflicts=20, stale_volatile=50)

    return [
        Config("10k", [one(10_000)], "scope-0"),
        Config("100k", [one(100_000)], "scope-0"),
        Config("1M", [one(1_000_000)], "scope-0", recall_queries=20),
        Config(
            "1M/100",
            [
                ScopeSpec(f"scope-{i}", 10_000, inactive=500, events=100, open_conflicts=2, stale_volatile=5)
                for i in range(100)
            ],
            "scope-0",
            recall_queries=30,
        ),
    ]


@dataclass
class Result:
    config: str
    facts_total: int
    facts_in_scope: int
    scopes: int
    copy_s: float = 0.0
    hnsw_build_s: float = 0.0
    gin_build_s: float = 0.0
    table_mb: float = 0.0
    hnsw_mb: float = 0.0
    events_in_scope: int = 0
    sql_p50_ms: dict[str, float] = field(default_factory=dict)  # per profile
    sql_p95_ms: dict[str, float] = field(default_factory=dict)
    unified_ratio: float = 0.0  # unified SQL path p50 / facts_first SQL path p50
    candidates_p50_ms: float = 0.0  # fact_candidates (facts_first)
    unified_candidates_p50_ms: float = 0.0
    baseline_p50_ms: float | None = None
    recall_at_64: float = 0.0
    shared_buffers: str = ""
    stages_p50_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # per profile


async def measure(conn: Any, settings: Settings, cfg: Config, rounds: int, result: Result) -> None:
    b = load_bench_queries()
    pool = queries(300)
    emb = InstantEmbedder()

    async def sql_path(query: Query, profile: ContextProfile, timer: StageTimer) -> None:
        emb.vector = query.vector
        req = ContextRequest(project_id=PROJECT, subject_id=cfg.measured, query=query.text, profile=profile)
        await run_context_call(conn, emb, ContextCall.of(req, settings), timer=timer)

    async def candidates(query: Query, text: str, profile: ContextProfile = "facts_first") -> Retrieved:
        """A profile's candidate step alone (one statement, the walk inside), with its weights."""
        async with conn.transaction():
            await assembler.open_context_call(conn)
            probe = Probe(
                project_id=PROJECT,
                subject_id=cfg.measured,
                query=text,
                embedding=query.vector,
                weights=PROFILE_WEIGHTS[profile],
            )
            return await assembler.RETRIEVERS[profile](conn, probe)

    # Warm-up: a production server's buffers hold its hot indexes.
    for i in range(30):
        for profile in PROFILES:
            await sql_path(pool[i], profile, StageTimer())
    # Both profiles in one loop, alternating call by call (and which goes first, round by
    # round), each on the same query, so machine load and cache state hit them alike.
    times: dict[str, list[float]] = {profile: [] for profile in PROFILES}
    stages: dict[str, dict[str, list[float]]] = {profile: {} for profile in PROFILES}
    for i in range(rounds):
        for profile in PROFILES if i % 2 == 0 else PROFILES[::-1]:
            timer = StageTimer()
            t0 = time.perf_counter()
            await sql_path(pool[i % len(pool)], profile, timer)
            times[profile].append((time.perf_counter() - t0) * 1000)
            for k, v in timer.ms.items():
                stages[profile].setdefault(k, []).append(v)
    result.sql_p50_ms = {p: round(percentile(t, 50), 3) for p, t in times.items()}
    result.sql_p95_ms = {p: round(percentile(t, 95), 3) for p, t in times.items()}
    result.unified_ratio = round(result.sql_p50_ms["unified"] / result.sql_p50_ms["facts_first"], 3)
    result.stages_p50_ms = {
        p: {k: round(percentile(v, 50), 3) for k, v in by_stage.items()} for p, by_stage in stages.items()
    }
    cand: dict[str, list[float]] = {"facts_first": [], "unified": []}
    for i in range(rounds):
        query = pool[i % len(pool)]
        for profile in PROFILES if i % 2 == 0 else PROFILES[::-1]:
            t0 = time.perf_counter()
            await candidates(query, query.text, profile)
            cand[profile].append((time.perf_counter() - t0) * 1000)
    result.candidates_p50_ms = percentile(cand["facts_first"], 50)
    result.unified_candidates_p50_ms = percentile(cand["unified"], 50)
    if result.facts_in_scope <= 100_000:
        base: list[float] = []
        for i in range(min(rounds, 30)):
            query = pool[i]
            t0 = time.perf_counter()
            _ = [
                r
                async for r in b.bench_score_all_facts(
                    conn,
                    project_id=PROJECT,
                    subject_id=cfg.measured,
                    query_embedding=Vector(query.vector),
                    query_text=query.text,
                    candidate_limit=CANDIDATE_LIMIT,
                    w_similarity=WEIGHT_SIMILARITY,
                    w_text_rank=WEIGHT_TEXT_RANK,
                    w_recency=WEIGHT_RECENCY,
                    tau_seconds=RECENCY_TAU_SECONDS,
                )
            ]
            base.append((time.perf_counter() - t0) * 1000)
        result.baseline_p50_ms = percentile(base, 50)
    hits = 0
    for query in pool[: cfg.recall_queries]:
        got = {c.item_id for c in (await candidates(query, NO_TEXT_MATCH)).facts}
        truth = {
            r["fact_id"]
            async for r in b.bench_exact_neighbours(
                conn,
                project_id=PROJECT,
                subject_id=cfg.measured,
                query_embedding=Vector(query.vector),
                top_k=RETRIEVAL_TOP_K,
            )
        }
        hits += len(got & truth)
    result.recall_at_64 = hits / (RETRIEVAL_TOP_K * cfg.recall_queries)


async def run_config(cfg: Config, base: Path, rounds: int, tuned: bool) -> Result:
    data_dir = Path(tempfile.mkdtemp(prefix=f"haki-scale-{cfg.name.replace('/', '-')}-", dir=base))
    total = sum(s.facts + s.inactive for s in cfg.scopes)
    measured = next(s for s in cfg.scopes if s.subject_id == cfg.measured)
    result = Result(cfg.name, total, measured.facts, len(cfg.scopes), events_in_scope=measured.events)
    try:
        settings = Settings(data_dir=data_dir, embed_provider="hash", database_url=embedded_url(data_dir))
        if tuned:
            conn = await connect(settings)
            await load_bench_queries().bench_tune_shared_buffers(conn)
            await conn.close()
            release_embedded_server(data_dir)
            settings = Settings(data_dir=data_dir, embed_provider="hash", database_url=embedded_url(data_dir))
        conn = await connect(settings)
        await migrate(conn)
        await init_connection(conn)
        say(f"[{cfg.name}] loading {total} facts over {len(cfg.scopes)} scope(s)")
        _, report = await load(
            conn, PROJECT, cfg.scopes, maintenance_work_mem="4GB", parallel_workers=1, log=say
        )
        result.copy_s = report.copy_seconds
        # One partial HNSW index per scope bucket (migration 0008): their sum.
        buckets = "facts_embedding_hnsw_"
        result.hnsw_build_s = sum(s for n, s in report.index_seconds.items() if n.startswith(buckets))
        result.gin_build_s = report.index_seconds.get("facts_scoped_search_gin", 0.0)
        sizes = {r["relation"]: r async for r in load_bench_queries().bench_relation_sizes(conn)}
        result.table_mb = sizes["facts"]["main_bytes"] / 2**20
        result.hnsw_mb = sum(r["total_bytes"] for n, r in sizes.items() if n.startswith(buckets)) / 2**20
        await conn.close()
        conn = await connect(settings)  # a fresh session, as the service's pool would lend
        await init_connection(conn)
        result.shared_buffers = str(await load_bench_queries().bench_shared_buffers(conn))
        say(f"[{cfg.name}] measuring")
        await measure(conn, settings, cfg, rounds, result)
        await conn.close()
    finally:
        release_embedded_server(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
    say(f"[{cfg.name}] {asdict(result)}")
    return result


def say(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def table(results: list[Result]) -> str:
    head = (
        "| config | facts (table) | facts (scope) | events (scope) | scopes | unified SQL path p50 ms | "
        "p95 ms | facts_first SQL path p50 ms | p95 ms | unified / facts_first | unified_candidates "
        "p50 ms | fact_candidates p50 ms | baseline p50 ms | HNSW build s | table MB | HNSW MB | recall@64 |"
    )
    lines = [head, "|" + "---|" * 17]
    for r in results:
        base = f"{r.baseline_p50_ms:.1f}" if r.baseline_p50_ms is not None else "n/a"
        lines.append(
            f"| {r.config} | {r.facts_total:,} | {r.facts_in_scope:,} | {r.events_in_scope:,} | "
            f"{r.scopes} | {r.sql_p50_ms['unified']:.2f} | {r.sql_p95_ms['unified']:.2f} | "
            f"{r.sql_p50_ms['facts_first']:.2f} | {r.sql_p95_ms['facts_first']:.2f} | "
            f"{r.unified_ratio:.2f} | {r.unified_candidates_p50_ms:.2f} | {r.candidates_p50_ms:.2f} | "
            f"{base} | {r.hnsw_build_s:.0f} | "
            f"{r.table_mb:.0f} | {r.hnsw_mb:.0f} | {r.recall_at_64:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=None, help="comma-separated config names: 10k,100k,1M,1M/100")
    p.add_argument("--rounds", type=int, default=300, help="measured calls per profile and configuration")
    p.add_argument("--tuned", action="store_true", help="shared_buffers 2GB (default: the embedded server's)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the table here")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = p.parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else None
    chosen = [c for c in configs() if wanted is None or c.name in wanted]
    base = Path(os.environ.get("HAKI_BENCH_TMP", tempfile.gettempdir()))
    started = time.time()
    load_at_start = os.getloadavg()
    results = [asyncio.run(run_config(c, base, args.rounds, args.tuned)) for c in chosen]
    out = table(results)
    header = (
        f"{cores_and_ram()}; load average {load_at_start[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end; "
        f"{(time.time() - started) / 60:.0f} min; "
        f"shared_buffers {', '.join(sorted({r.shared_buffers for r in results}))}"
    )
    print(header)
    print(out)
    for r in results:
        for profile, stages in r.stages_p50_ms.items():
            print(f"{r.config} {profile} stages p50 (ms): {stages}")
    if args.markdown:
        args.markdown.write_text(header + "\n\n" + out + "\n")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
