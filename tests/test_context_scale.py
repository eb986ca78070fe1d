"""Two-phase retrieval at scale (docs/spec/context-assembler.md, "Two-phase retrieval").

The facts are seeded server-side (tests/sql/testing.sql) inside the test's rolled-back
transaction: random unit embeddings, the HNSW index dropped for the seed and rebuilt in one
pass, then ANALYZE, so the planner sees the table it would see in production.
"""

from __future__ import annotations

import asyncpg
import httpx
import numpy as np
import pytest

from service.constants import (
    CANDIDATE_LIMIT,
    RETRIEVAL_TOP_K,
    WEIGHT_RECENCY,
    WEIGHT_SIMILARITY,
)
from service.context import assembler
from service.context.call import PROFILE_WEIGHTS
from service.context.model import Candidate, Probe
from service.embedding.embedder import HashEmbedder
from service.repository import context as repo
from tests.helpers import PROJECT, candidate_decisions, context_and_trace
from tests.helpers.seeding import WEIGHTS, random_unit_vector, seed_scopes
from tests.helpers.sql import load_test_queries

pytestmark = pytest.mark.slow

NO_MATCH = "qqxxjjnothingmatchesthis"


async def vector_phase(
    conn: asyncpg.Connection, subject_id: str, qvec: np.ndarray
) -> tuple[list[Candidate], int]:
    """retrieve_facts_first with a query text that matches nothing (so only the vector side
    contributes), and how many HNSW index scans it started."""
    t = load_test_queries()
    hnsw_index = await t.test_fact_vector_index(conn, project_id=PROJECT, subject_id=subject_id)
    before = await t.test_index_scans(conn, index_name=hnsw_index)
    retrieved = await assembler.retrieve_facts_first(
        conn,
        Probe(project_id=PROJECT, subject_id=subject_id, embedding=qvec, query=NO_MATCH, weights=WEIGHTS),
    )
    after = await t.test_index_scans(conn, index_name=hnsw_index)
    assert not retrieved.blocked
    return retrieved.candidates, after - before


async def test_two_phase_vector_candidates_exactly_64(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    t = load_test_queries()
    scopes = {"scale-a": (10_000, "alpha seeded fact"), "scale-b": (10_000, "bravo seeded fact"),
              "scale-c": (10_000, "charlie seeded fact")}  # fmt: skip
    await seed_scopes(conn, scopes)
    assert await t.test_count_facts(conn) >= 30_000
    qvec = random_unit_vector(42)

    # Without open_context_call: pgvector's defaults (ef_search 40, no iterative scan). The
    # HNSW scan then yields at most ef_search rows over the whole table, and the scope filter
    # keeps about a third of them: fewer than RETRIEVAL_TOP_K. Deterministic part: if the plan
    # scans the HNSW index, it cannot return more than ef_search rows.
    async with conn.transaction():
        defaults = await t.test_vector_scan_settings(conn)
        assert (defaults["ef_search"], defaults["iterative_scan"]) == (40, "off")
        rows, hnsw_scans = await vector_phase(conn, "scale-b", qvec)
    if hnsw_scans:
        assert len(rows) <= defaults["ef_search"] < RETRIEVAL_TOP_K
    else:  # the planner chose an exact scan instead: a different plan, exact results
        assert len(rows) == RETRIEVAL_TOP_K

    # With it, as the assembler runs it: exactly RETRIEVAL_TOP_K candidates, through the HNSW index.
    async with conn.transaction():
        await assembler.open_context_call(conn)
        configured = await t.test_vector_scan_settings(conn)
        assert configured["ef_search"] >= RETRIEVAL_TOP_K
        assert configured["iterative_scan"] != "off"
        rows, hnsw_scans = await vector_phase(conn, "scale-b", qvec)
    assert hnsw_scans >= 1
    assert len(rows) == RETRIEVAL_TOP_K
    assert len({r.item_id for r in rows}) == RETRIEVAL_TOP_K
    assert all(r.content.startswith("bravo seeded fact ") for r in rows)
    assert all(r.text_rank == 0.0 for r in rows)
    for r in rows:
        assert r.similarity is not None and r.recency is not None
        assert r.score == pytest.approx(
            WEIGHT_SIMILARITY * r.similarity + WEIGHT_RECENCY * r.recency, abs=1e-9
        )

    # End to end: the same scope through POST /v1/context traces exactly RETRIEVAL_TOP_K candidates.
    _, trace = await context_and_trace(client, key, NO_MATCH, "scale-b", include_episodes=False)
    candidates = candidate_decisions(trace)
    assert len(candidates) == RETRIEVAL_TOP_K
    assert all(d["text_rank"] == 0.0 for d in candidates)


async def test_trace_never_exceeds_candidate_limit(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    # Every fact matches the query's words, so both phase-1 sides fill up to RETRIEVAL_TOP_K.
    await seed_scopes(conn, {"limit": (1_000, "common words fact")})
    _, trace = await context_and_trace(client, key, "common words", "limit", include_episodes=False)
    candidates = candidate_decisions(trace)
    facts = [d for d in trace["decisions"] if d["item_type"] == "fact"]
    assert len(facts) == len(candidates)  # no blocked fact, no entity to hop on
    assert RETRIEVAL_TOP_K < len(candidates) <= 2 * RETRIEVAL_TOP_K <= CANDIDATE_LIMIT
    assert sum(1 for d in candidates if d["text_rank"] > 0) == len(candidates)
    assert [d["rank"] for d in candidates] == list(range(1, len(candidates) + 1))

    # The phase-2 cap really applies: below the union size, the statement returns exactly the
    # cap, the best-scored head of the same union (the cap is the step's parameter, not a seam).
    cap = len(candidates) - 20
    qvec = (await HashEmbedder().embed(["common words"]))[0]

    async def union(limit: int) -> list[str]:
        async with conn.transaction():
            await assembler.open_context_call(conn)
            probe = Probe(
                project_id=PROJECT,
                subject_id="limit",
                embedding=qvec,
                query="common words",
                weights=PROFILE_WEIGHTS["unified"],
            )
            got = await repo.unified_candidates(conn, probe, with_episodes=False, candidate_limit=limit)
        return [str(c.item_id) for c in got.candidates]

    full, capped = await union(CANDIDATE_LIMIT), await union(cap)
    assert full == [d["item_id"] for d in candidates]
    assert capped == full[:cap]
