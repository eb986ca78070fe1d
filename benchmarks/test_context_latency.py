"""Latency of the Context Assembler's SQL path on a 10k-fact scope of a 106k-fact table, under
both profiles (docs/spec/context-profiles.md): `unified` (the default) next to `facts_first`.

Run: .venv/bin/pytest benchmarks/test_context_latency.py --benchmark-only
CI guard (no pytest-benchmark timing, only the interleaved guard loop and the structural
checks): .venv/bin/pytest benchmarks/test_context_latency.py --benchmark-disable

Only one test asserts on time, and only as ratios measured in the same run plus a generous
ceiling: `test_two_phase_guard`. Everything else reports (pytest-benchmark tables, extra_info).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from benchmarks.seed import percentile
from benchmarks.sql import load_bench_queries
from benchmarks.world import PROJECT, SMALL, TARGET, World
from service.constants import CANDIDATE_LIMIT, RETRIEVAL_TOP_K
from service.context import assembler
from service.context.call import ContextCall
from service.ids import uuid7
from service.observability.timing import StageTimer
from service.repository import context as repo
from service.settings import ContextProfile, Settings
from service.structs import ContextPacket, ContextRequest, Decision, PacketFact

GUARD_ROUNDS = 120
GUARD_BLOCK = 4
GUARD_WARMUP = 3
# Two ratios to the score-every-fact baseline, as medians of one interleaved loop:
# - two-phase retrieval (assembler.retrieve_facts_first: phases 1 and 2 and the blocked facts, what the
#   baseline stands for) must stay 10x faster: the guard (its target is 30x). This
#   world measures 14-15x on 2 cores since the scope buckets of migration 0008.
# - the whole SQL path (which also packs, expands multi-hop, fetches episodes and writes the
#   trace, none of which the baseline does) must stay 4.5x faster; it measures 6.5-6.7x, and the
#   path before this guard rose to 10x measured 3.5-4.1x.
# - the `unified` SQL path (the default profile) must stay within 1.6x of the `facts_first`
#   SQL path, both medians of the same loop. The target is 1.5x (UNIFIED_RATIO_TARGET, reported
#   beside the ratio): it measures 1.42-1.57 with the host's speed, so a guard at the target
#   failed about one run in two; 1.6 catches a regression of what only `unified` does. 120
#   rounds, not 60: two 60-round halves of one loop differed by up to 0.05 (docs/performance.md).
# HAKI_BENCH_MIN_SPEEDUP, HAKI_BENCH_MIN_PATH_SPEEDUP and HAKI_BENCH_MAX_UNIFIED_RATIO override
# them. Both SQL paths' medians must also stay under the generous ceiling.
GUARD_MIN_SPEEDUP = float(os.environ.get("HAKI_BENCH_MIN_SPEEDUP", "10"))
GUARD_MIN_PATH_SPEEDUP = float(os.environ.get("HAKI_BENCH_MIN_PATH_SPEEDUP", "4.5"))
GUARD_MAX_UNIFIED_RATIO = float(os.environ.get("HAKI_BENCH_MAX_UNIFIED_RATIO", "1.6"))
UNIFIED_RATIO_TARGET = 1.5
GUARD_CEILING_MS = float(os.environ.get("HAKI_BENCH_CEILING_MS", "50"))
PROFILES: tuple[ContextProfile, ...] = ("unified", "facts_first")
NO_TEXT_MATCH = "qqxxjjnothingmatchesthis"


class Rotation:
    """Cycles through the query pool, so no two consecutive calls share a vector or a text."""

    def __init__(self, world: World) -> None:
        self.queries = world.queries
        self.i = 0

    def next(self) -> Any:
        query = self.queries[self.i % len(self.queries)]
        self.i += 1
        return query


@pytest.mark.parametrize("profile", PROFILES)
def test_assembler_sql_path(benchmark: Any, world: World, profile: ContextProfile) -> None:
    """POST /v1/context minus HTTP and the query embedding, under each profile: candidates,
    pack, multi-hop, episodes, the trace write, and the transaction around them (the call
    runner's whole call)."""
    rot = Rotation(world)
    packet = benchmark.pedantic(
        lambda: world.assemble(rot.next(), profile=profile), rounds=300, iterations=1, warmup_rounds=30
    )
    assert packet.profile == profile
    assert packet.facts


@pytest.mark.parametrize("profile", PROFILES)
def test_assembler_sql_path_small_scope(benchmark: Any, world: World, profile: ContextProfile) -> None:
    """The same on the 1,000-fact scope (0.9 % of the table): the planner's exact scan."""
    rot = Rotation(world)
    packet = benchmark.pedantic(
        lambda: world.assemble(rot.next(), SMALL, profile=profile), rounds=200, iterations=1, warmup_rounds=20
    )
    assert packet.profile == profile
    assert packet.facts


def test_fact_candidates_only(benchmark: Any, world: World) -> None:
    """`facts_first` phase 1 + phase 2 + the blocked facts (one statement, the walk inside): the
    like-for-like rival of the baseline."""
    rot = Rotation(world)
    retrieved = benchmark.pedantic(
        lambda: world.candidates(rot.next()), rounds=300, iterations=1, warmup_rounds=30
    )
    assert len(retrieved.candidates) >= RETRIEVAL_TOP_K
    assert retrieved.blocked


def test_unified_candidates_only(benchmark: Any, world: World) -> None:
    """`unified` phase 1 + phase 2 of facts and episodes in one ranking + the blocked facts
    (one statement, the walks of facts and events inside): fact_candidates' counterpart."""
    rot = Rotation(world)
    retrieved = benchmark.pedantic(
        lambda: world.unified(rot.next()), rounds=300, iterations=1, warmup_rounds=30
    )
    kinds = {c.item_type for c in retrieved.candidates}
    assert kinds == {"fact", "episode"}, kinds
    assert len(retrieved.facts) >= RETRIEVAL_TOP_K
    assert retrieved.blocked


def test_baseline_score_every_fact(benchmark: Any, world: World) -> None:
    """What two-phase retrieval replaced: the hybrid score over every servable fact of the scope."""
    rot = Rotation(world)
    rows = benchmark.pedantic(lambda: world.baseline(rot.next()), rounds=40, iterations=1, warmup_rounds=5)
    assert len(rows) == CANDIDATE_LIMIT


def _decisions(n: int) -> list[Decision]:
    return [
        Decision(
            item_type="fact" if i < n - 8 else "episode",
            item_id=uuid.uuid4(),
            decision="included" if i < 64 else "excluded",
            reason_code="packed" if i < 64 else "over_budget",
            rank=i + 1,
            score=0.5 - i / 1000,
            similarity=0.6,
            text_rank=0.1,
            recency=0.4,
            cosine_distance=0.4,
            tokens=12,
        )
        for i in range(n)
    ]


# A `unified` call under the default settings, as its trace records it.
TRACE_CALL = ContextCall.of(
    ContextRequest(project_id=PROJECT, subject_id=TARGET, query="trace write benchmark"), Settings()
)
SERVED = [
    PacketFact(
        fact_id=uuid.uuid4(),
        content="trace write benchmark fact",
        score=0.5,
        tokens=12,
        reason_code="packed",
        valid_from=None,
        valid_to=None,
        recorded_from=datetime(2025, 6, 1, tzinfo=UTC),
        source_event_id=None,
    )
    for _ in range(64)
]


def _write_trace(world: World, decisions: list[Decision]) -> None:
    packet = ContextPacket(
        trace_id=uuid7(),
        profile="unified",
        status="ok",
        warnings=[],
        empty_reason=None,
        budget_tokens=900,
        used_tokens=768,
        facts=SERVED,
        episodes=[],
    )
    world.run(repo.insert_context_trace(world.conn, TRACE_CALL, packet, decisions))


def test_trace_write_256_decisions(benchmark: Any, world: World) -> None:
    """One call row and 256 decision rows, timed as the call runner runs it: one statement inside
    the call's transaction (open_context_call), the
    commit outside the timing. Asserted only to be one statement."""
    decisions = _decisions(256)
    statements: list[str] = []

    def log(record: Any) -> None:
        statements.append(record.query)

    # The connection's first trace write makes asyncpg look up the float8[] type of `weights` (three
    # more statements, once per connection): the service's pooled connections are past it, and run
    # alone this test's connection was not.
    _write_trace(world, decisions)
    world.conn.add_query_logger(log)
    try:
        _write_trace(world, decisions)
    finally:
        world.conn.remove_query_logger(log)
    assert len(statements) == 1, statements

    open_tx: list[Any] = []

    def next_transaction() -> None:  # not timed: commit the previous round, open the next
        if open_tx:
            world.run(open_tx.pop().commit())
        tx = world.conn.transaction()
        world.run(tx.start())
        world.run(assembler.open_context_call(world.conn))
        open_tx.append(tx)

    try:
        benchmark.pedantic(
            lambda: _write_trace(world, decisions), setup=next_transaction, rounds=300, iterations=1
        )
    finally:
        if open_tx:
            world.run(open_tx.pop().commit())


def _recall(world: World, subject_id: str, queries: list[Any]) -> float:
    """recall@64 of fact_candidates' vector side (a query text that matches nothing leaves
    only vector_top) against the exact top-64 of the scope, averaged over the queries."""
    hits = 0
    for query in queries:
        got = {c.item_id for c in world.candidates(query, subject_id, text=NO_TEXT_MATCH).facts}

        async def exact(query: Any = query) -> set[Any]:
            from pgvector import Vector

            return {
                r["fact_id"]
                async for r in load_bench_queries().bench_exact_neighbours(
                    world.conn,
                    project_id=PROJECT,
                    subject_id=subject_id,
                    query_embedding=Vector(query.vector),
                    top_k=RETRIEVAL_TOP_K,
                )
            }

        truth: set[Any] = world.run(exact())
        hits += len(got & truth)
    return hits / (RETRIEVAL_TOP_K * len(queries))


@pytest.mark.parametrize("subject_id", [TARGET, SMALL])
def test_vector_recall_at_64(benchmark: Any, world: World, subject_id: str) -> None:
    """Reported, and held to a floor below the 0.95 target (HNSW builds are not bit-for-bit
    reproducible with parallel workers)."""
    recall = _recall(world, subject_id, world.queries[:50])
    benchmark.extra_info["recall_at_64"] = recall
    rot = Rotation(world)
    benchmark.pedantic(
        lambda: world.candidates(rot.next(), subject_id, text=NO_TEXT_MATCH), rounds=50, iterations=1
    )
    assert recall >= 0.9, recall


def test_two_phase_guard(benchmark: Any, world: World) -> None:
    """The CI guard: two-phase retrieval and the whole assembler SQL path of both profiles
    against the score-every-fact baseline, interleaved in one loop (so machine load hits all of
    them alike), compared as medians. Each round (~0.2 s) runs the baseline once, then
    GUARD_BLOCK calls of two-phase retrieval, then GUARD_BLOCK of each profile's SQL path, the
    two profiles in alternating order from round to round: the baseline reads 10,000 rows and
    evicts the CPU caches, and alternating call by call charged two-phase retrieval ~1 ms of
    cache misses (4.8 ms against 3.8 ms alone) that a serving process does not pay."""
    retrieval: list[float] = []
    paths: dict[ContextProfile, list[float]] = {profile: [] for profile in PROFILES}
    # Each path's stages (the call's own timer, which the call runner keeps whether or not it is given
    # one): reported beside the medians, so that a failing ratio says which stage moved.
    stages: dict[ContextProfile, dict[str, list[float]]] = {profile: {} for profile in PROFILES}
    baseline: list[float] = []
    rot = Rotation(world)
    rounds_done = 0

    def timed(samples: list[float], call: Any) -> None:
        t0 = time.perf_counter()
        call(rot.next())
        samples.append((time.perf_counter() - t0) * 1000)

    def one_round() -> None:
        nonlocal rounds_done
        timed(baseline, world.baseline)
        for _ in range(GUARD_BLOCK):
            timed(retrieval, world.candidates)
        order = PROFILES if rounds_done % 2 == 0 else PROFILES[::-1]
        rounds_done += 1
        for profile in order:
            for _ in range(GUARD_BLOCK):
                timer = StageTimer()

                def call(query: Any, profile: ContextProfile = profile, timer: StageTimer = timer) -> None:
                    world.assemble(query, profile=profile, timer=timer)

                timed(paths[profile], call)
                for stage, ms in timer.ms.items():
                    stages[profile].setdefault(stage, []).append(ms)

    for _ in range(GUARD_WARMUP):
        one_round()
    for samples in (retrieval, baseline, *paths.values()):
        samples.clear()
    for by_stage in stages.values():
        by_stage.clear()
    # With --benchmark-disable, pedantic runs one round: the loop does the rest.
    for _ in range(GUARD_ROUNDS - 1 if benchmark.disabled else 0):
        one_round()
    benchmark.pedantic(one_round, rounds=1 if benchmark.disabled else GUARD_ROUNDS, iterations=1)
    base_median = statistics.median(baseline)
    retrieval_median = statistics.median(retrieval)
    path_median = statistics.median(paths["facts_first"])
    unified_median = statistics.median(paths["unified"])
    speedup = base_median / retrieval_median
    path_speedup = base_median / path_median
    unified_ratio = unified_median / path_median
    target_met = unified_ratio <= UNIFIED_RATIO_TARGET
    stage_medians = {
        profile: {stage: round(statistics.median(ms), 3) for stage, ms in by_stage.items()}
        for profile, by_stage in stages.items()
    }
    benchmark.extra_info.update(
        {
            "two_phase_p50_ms": round(retrieval_median, 3),
            "sql_path_p50_ms": round(path_median, 3),
            "sql_path_p95_ms": round(percentile(paths["facts_first"], 95), 3),
            "unified_sql_path_p50_ms": round(unified_median, 3),
            "unified_sql_path_p95_ms": round(percentile(paths["unified"], 95), 3),
            "baseline_p50_ms": round(base_median, 3),
            "speedup": round(speedup, 2),
            "path_speedup": round(path_speedup, 2),
            "unified_ratio": round(unified_ratio, 3),
            "unified_ratio_target_met": target_met,
            "stage_p50_ms": stage_medians,
        }
    )
    print(
        f"\nbaseline p50 {base_median:.2f} ms; two-phase retrieval p50 {retrieval_median:.2f} ms "
        f"(x{speedup:.1f}); facts_first SQL path p50 {path_median:.2f} ms (x{path_speedup:.1f}); "
        f"unified SQL path p50 {unified_median:.2f} ms ({unified_ratio:.2f}x facts_first, target "
        f"{UNIFIED_RATIO_TARGET:g}x {'met' if target_met else 'missed'}); "
        f"{GUARD_ROUNDS} rounds of 1 baseline, then {GUARD_BLOCK} of each path; stage p50s (ms): "
        f"{stage_medians}"
    )
    for profile, median in (("facts_first", path_median), ("unified", unified_median)):
        assert median <= GUARD_CEILING_MS, (
            f"{profile} SQL path median {median:.1f} ms > {GUARD_CEILING_MS} ms"
        )
    assert speedup >= GUARD_MIN_SPEEDUP, (
        f"two-phase retrieval median {retrieval_median:.2f} ms is only x{speedup:.1f} faster than "
        f"scoring every fact ({base_median:.2f} ms); the guard wants x{GUARD_MIN_SPEEDUP:g}"
    )
    assert path_speedup >= GUARD_MIN_PATH_SPEEDUP, (
        f"facts_first SQL path median {path_median:.2f} ms is only x{path_speedup:.1f} faster than "
        f"scoring every fact ({base_median:.2f} ms); the guard wants x{GUARD_MIN_PATH_SPEEDUP:g}"
    )
    assert unified_ratio <= GUARD_MAX_UNIFIED_RATIO, (
        f"unified SQL path median {unified_median:.2f} ms is {unified_ratio:.2f}x the facts_first "
        f"SQL path median ({path_median:.2f} ms) of the same run; the guard wants at most "
        f"{GUARD_MAX_UNIFIED_RATIO:g}x (stage p50s, ms: {stage_medians})"
    )
