"""The benchmark world: one embedded PostgreSQL seeded with a deterministic multi-scope memory.

The world of benchmarks/test_context_latency.py: 11 scopes, 106,500 facts. The measured scope
`s10k` holds 10,000 active facts (40 of them in open ConflictSets, 50 stale volatile ones) plus
800 superseded or retracted ones and 1,000 events; `s1pct` holds 1,000 active facts (0.9 % of
the table); nine filler scopes hold the rest. Rows of all scopes interleave in the heap.
Vectors are precomputed (benchmarks/seed.py), so no model runs here.

Everything runs on one event loop owned by the session (pytest-benchmark times synchronous
callables), and every query goes through the service's own code: the assembler and the named
queries of queries/*.sql.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import numpy as np
from pgvector import Vector

from benchmarks.seed import Query, ScopeRows, ScopeSpec
from benchmarks.sql import load_bench_queries
from service.constants import (
    CANDIDATE_LIMIT,
    RECENCY_TAU_SECONDS,
    WEIGHT_RECENCY,
    WEIGHT_SIMILARITY,
    WEIGHT_TEXT_RANK,
)
from service.context import assembler
from service.context.call import PROFILE_WEIGHTS, ContextCall
from service.context.model import Probe, Retrieved
from service.db.call_runner import run_context_call
from service.observability.timing import StageTimer
from service.settings import ContextProfile, Settings
from service.structs import ContextPacket, ContextRequest

PROJECT = "bench"
TARGET = "s10k"
SMALL = "s1pct"
WORLD = [
    ScopeSpec(TARGET, 10_000, inactive=800, events=1_000, open_conflicts=20, stale_volatile=50),
    ScopeSpec(SMALL, 1_000, inactive=80, events=100, open_conflicts=2, stale_volatile=5),
    *(
        ScopeSpec(f"filler-{i:02d}", 9_800, inactive=700, events=500, open_conflicts=5, stale_volatile=20)
        for i in range(9)
    ),
]
QUERY_POOL = 300


class InstantEmbedder:
    """Hands back the precomputed vector of the current query: the SQL path without the model."""

    name = "precomputed"
    dim = 384

    def __init__(self) -> None:
        self.vector: np.ndarray | None = None

    async def embed(self, texts: Any, **_: object) -> list[np.ndarray]:
        assert self.vector is not None
        return [self.vector for _ in texts]

    async def aclose(self) -> None:
        return None


@dataclass
class World:
    runner: asyncio.Runner
    settings: Settings
    conn: asyncpg.Connection
    scopes: dict[str, ScopeRows]
    load_seconds: float
    index_seconds: dict[str, float]
    queries: list[Query]
    embedder: InstantEmbedder = field(default_factory=InstantEmbedder)

    def run(self, coro: Any) -> Any:
        return self.runner.run(coro)

    def assemble(
        self,
        query: Query,
        subject_id: str = TARGET,
        profile: ContextProfile = "unified",
        timer: StageTimer | None = None,
    ) -> ContextPacket:
        """The whole call but the embedding, under one profile, as the call runner runs it:
        candidates, pack, multi-hop, episodes, trace, and the transaction around them. `timer`
        gets the call's stages (they are timed either way)."""
        self.embedder.vector = query.vector
        req = ContextRequest(project_id=PROJECT, subject_id=subject_id, query=query.text, profile=profile)
        call = ContextCall.of(req, self.settings)
        packet: ContextPacket = self.run(run_context_call(self.conn, self.embedder, call, timer=timer))
        return packet

    def baseline(self, query: Query, subject_id: str = TARGET) -> list[Any]:
        """The score-every-servable-fact query that two-phase retrieval replaced."""

        async def go() -> list[Any]:
            return [
                r
                async for r in load_bench_queries().bench_score_all_facts(
                    self.conn,
                    project_id=PROJECT,
                    subject_id=subject_id,
                    query_embedding=Vector(query.vector),
                    query_text=query.text,
                    candidate_limit=CANDIDATE_LIMIT,
                    w_similarity=WEIGHT_SIMILARITY,
                    w_text_rank=WEIGHT_TEXT_RANK,
                    w_recency=WEIGHT_RECENCY,
                    tau_seconds=RECENCY_TAU_SECONDS,
                )
            ]

        result: list[Any] = self.run(go())
        return result

    def candidates(self, query: Query, subject_id: str = TARGET, text: str | None = None) -> Retrieved:
        """fact_candidates alone (`facts_first`: the walk of its facts, phases 1 and 2 and the
        blocked facts, one statement), configured as the assembler configures it."""
        return self._retrieve("facts_first", query, subject_id, text)

    def unified(self, query: Query, subject_id: str = TARGET, text: str | None = None) -> Retrieved:
        """unified_candidates alone (`unified`: the walks of facts and events, both kinds'
        phases 1 and 2 in one ranking, and the blocked facts, one statement), configured
        likewise."""
        return self._retrieve("unified", query, subject_id, text)

    def _retrieve(
        self, profile: ContextProfile, query: Query, subject_id: str, text: str | None
    ) -> Retrieved:
        """One profile's candidate step in its own transaction, planned as the assembler plans it."""
        probe = Probe(
            project_id=PROJECT,
            subject_id=subject_id,
            query=query.text if text is None else text,
            embedding=query.vector,
            weights=PROFILE_WEIGHTS[profile],
        )

        async def go() -> Retrieved:
            async with self.conn.transaction():
                await assembler.open_context_call(self.conn)
                return await assembler.RETRIEVERS[profile](self.conn, probe)

        result: Retrieved = self.run(go())
        return result
