"""The Context Assembler (spec/context-assembler.md), as a sequence of named steps.

    embed_query -> retrieve_candidates -> apply_recall_gate -> pack_facts -> expand_multi_hop
    -> pack_episodes -> write_trace

Every step's SQL is a named query in queries/context.sql; the scoring itself runs in SQL, so no
embedding ever comes back to Python.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

import numpy as np

from service.auth import Principal
from service.constants import (
    CANDIDATE_LIMIT,
    EPISODE_TOP_K,
    MULTI_HOP_MAX_ENTITIES,
    MULTI_HOP_MAX_PER_ENTITY,
    RECENCY_TAU_SECONDS,
    RETRIEVAL_TOP_K,
    WEIGHT_RECENCY,
    WEIGHT_SIMILARITY,
    WEIGHT_TEXT_RANK,
)
from service.context import repository as repo
from service.context.entities import extract_entities
from service.embedder import Embedder
from service.errors import NotFound
from service.ids import uuid7
from service.repository import Conn
from service.settings import Settings
from service.structs import (
    ContextPacket,
    ContextRequest,
    Decision,
    Inspection,
    PacketEpisode,
    PacketFact,
    StatsOverview,
)

if TYPE_CHECKING:
    from service.context.proposals import Proposal

log = logging.getLogger("haki.context")

Weights = tuple[float, float, float]
DEFAULT_WEIGHTS: Weights = (WEIGHT_SIMILARITY, WEIGHT_TEXT_RANK, WEIGHT_RECENCY)

# hnsw.ef_search must cover the largest K of any scan in the call (its default, 40, silently
# truncates a top-64). Twice K: recall@64 at 1M facts in one scope went from 0.75 to 0.81 for
# no measurable cost (the 10 % scope's iterative scan reads as many tuples; docs/performance.md).
EF_SEARCH = 2 * max(RETRIEVAL_TOP_K, EPISODE_TOP_K, 40)


class StageTimer:
    """Wall time per assembler stage, exposed as the Server-Timing header and in /metrics."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = self.ms.get(name, 0.0) + (time.perf_counter() - start) * 1000.0


class Budget:
    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    @property
    def remaining(self) -> int:
        return self.total - self.used

    def take(self, tokens: int) -> bool:
        if tokens > self.remaining:
            return False
        self.used += tokens
        return True


class Assembly:
    """The state one call accumulates: what is served, and every decision for the trace."""

    def __init__(self, budget_tokens: int) -> None:
        self.budget = Budget(budget_tokens)
        self.facts: list[PacketFact] = []
        self.episodes: list[PacketEpisode] = []
        self.decisions: list[Decision] = []
        self.blocked: list[Decision] = []
        self.warnings: list[str] = []
        self.candidates: list[Any] = []
        self.gated: int = 0
        self.considered: int = 0

    def decide(
        self,
        item_type: Literal["fact", "episode"],
        row: Any,
        item_id: UUID,
        decision: Literal["included", "excluded", "blocked"],
        reason_code: str,
        rank: int | None,
        score: float | None,
    ) -> None:
        self.decisions.append(
            Decision(
                item_type=item_type,
                item_id=item_id,
                decision=decision,
                reason_code=reason_code,
                rank=rank,
                score=score,
                similarity=row.get("similarity"),
                text_rank=row.get("text_rank"),
                recency=row.get("recency"),
                cosine_distance=row.get("cosine_distance"),
                tokens=row["tokens"],
            )
        )


def _served_fact(row: Any, reason_code: Literal["packed", "multi_hop_expansion"]) -> PacketFact:
    return PacketFact(
        fact_id=row["fact_id"],
        content=row["content"],
        score=row["score"],
        tokens=row["tokens"],
        reason_code=reason_code,
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        recorded_from=row["recorded_from"],
        source_event_id=row["source_event_id"],
    )


def _gated(row: Any, max_distance: float) -> bool:
    distance = row["cosine_distance"]
    return max_distance > 0 and distance is not None and distance > max_distance


# --- steps -----------------------------------------------------------------------------------


async def embed_query(embedder: Embedder, settings: Settings, query: str, out: Assembly) -> np.ndarray | None:
    """Rule 10: an embedder failure or time-out degrades to full-text retrieval, never a 500."""
    try:
        (vector,) = await asyncio.wait_for(embedder.embed([query]), timeout=settings.embed_timeout_seconds)
        return vector
    except Exception as exc:  # any embedder failure must degrade, not fail the call
        log.warning("query embedding failed (%s): %r", embedder.name, exc)
        out.warnings.append(
            "embedding_unavailable: the query could not be embedded; served from full-text candidates only"
        )
        return None


async def retrieve_candidates(
    conn: Conn, req: ContextRequest, qvec: np.ndarray | None, weights: Weights, out: Assembly
) -> None:
    """Phases 1 and 2 with the hard filters inside the query; blocked facts come back beside."""
    rows = await repo.fact_candidates(
        conn,
        project_id=req.project_id,
        subject_id=req.subject_id,
        query_embedding=qvec,
        query_text=req.query,
        top_k=RETRIEVAL_TOP_K,
        candidate_limit=CANDIDATE_LIMIT,
        weights=weights,
        tau_seconds=RECENCY_TAU_SECONDS,
    )
    counts: dict[str, int] = {}
    for row in rows:
        if row["kind"] == "candidate":
            out.candidates.append(row)
        else:
            record_blocked(out, counts, row["fact_id"], row)
    warn_blocked(out, counts)


def record_blocked(out: Assembly, counts: dict[str, int], fact_id: UUID, row: Any) -> None:
    """A hard-filtered fact of the scope: traced `blocked`, counted for its warning."""
    counts[row["reason_code"]] = row["blocked_total"]
    out.blocked.append(
        Decision(
            item_type="fact",
            item_id=fact_id,
            decision="blocked",
            reason_code=row["reason_code"],
            rank=None,
            score=None,
            similarity=None,
            text_rank=None,
            recency=None,
            cosine_distance=None,
            tokens=row["tokens"],
        )
    )


def warn_blocked(out: Assembly, counts: dict[str, int]) -> None:
    """The spec's warnings for facts hidden by an open conflict or a stale volatility."""
    if counts.get("conflict_open"):
        out.warnings.append(
            f"open_conflict: {counts['conflict_open']} fact(s) hidden pending conflict resolution"
        )
    if counts.get("volatility_expired"):
        out.warnings.append(
            f"volatility_expired: {counts['volatility_expired']} fact(s) hidden because their "
            "volatile information is stale"
        )


def pack_facts(settings: Settings, out: Assembly) -> None:
    """Greedy by decreasing score: each fact that still fits is packed, the rest is over_budget."""
    out.considered += len(out.candidates)
    for rank, row in enumerate(out.candidates, start=1):
        if _gated(row, settings.recall_max_distance):
            out.gated += 1
            out.decide("fact", row, row["fact_id"], "excluded", "below_relevance_floor", rank, row["score"])
        elif out.budget.take(row["tokens"]):
            out.facts.append(_served_fact(row, "packed"))
            out.decide("fact", row, row["fact_id"], "included", "packed", rank, row["score"])
        else:
            out.decide("fact", row, row["fact_id"], "excluded", "over_budget", rank, row["score"])


async def expand_multi_hop(
    conn: Conn, req: ContextRequest, qvec: np.ndarray | None, weights: Weights, out: Assembly
) -> None:
    """One hop along shared entities of the kept facts, full-text only, never gated."""
    if out.budget.remaining <= 0 or not out.facts:
        return
    entities = extract_entities((f.content for f in out.facts), req.query, MULTI_HOP_MAX_ENTITIES)
    if not entities:
        return
    rows = await repo.multi_hop_facts(
        conn,
        project_id=req.project_id,
        subject_id=req.subject_id,
        entities=entities,
        exclude_ids=[r["fact_id"] for r in out.candidates],
        per_entity=MULTI_HOP_MAX_PER_ENTITY,
        query_embedding=qvec,
        query_text=req.query,
        weights=weights,
        tau_seconds=RECENCY_TAU_SECONDS,
    )
    seen: set[UUID] = set()
    rank = len(out.candidates)
    for row in rows:
        if row["fact_id"] in seen:
            continue
        seen.add(row["fact_id"])
        rank += 1
        if out.budget.take(row["tokens"]):
            out.facts.append(_served_fact(row, "multi_hop_expansion"))
            out.decide("fact", row, row["fact_id"], "included", "multi_hop_expansion", rank, row["score"])
        else:
            out.decide("fact", row, row["fact_id"], "excluded", "over_budget", rank, row["score"])


async def fetch_episodes(conn: Conn, req: ContextRequest, qvec: np.ndarray | None) -> list[Any]:
    """The EPISODE_TOP_K events closest to the query (HNSW), none without episodes or a vector."""
    if not req.include_episodes or qvec is None:
        return []
    return await repo.episode_candidates(
        conn, project_id=req.project_id, subject_id=req.subject_id, query_embedding=qvec, top_k=EPISODE_TOP_K
    )


async def pack_episodes(
    conn: Conn,
    req: ContextRequest,
    qvec: np.ndarray | None,
    settings: Settings,
    out: Assembly,
    rows: list[Any] | None = None,
) -> None:
    """The EPISODE_TOP_K closest events, into what the facts left of the budget. `rows` are
    those of fetch_episodes when the call fetched them already."""
    if not req.include_episodes or qvec is None:
        return
    if rows is None:
        rows = await fetch_episodes(conn, req, qvec)
    out.considered += len(rows)
    for rank, raw in enumerate(rows, start=1):
        row = {**dict(raw), "similarity": 1.0 - raw["cosine_distance"]}
        score = row["similarity"]
        if _gated(row, settings.recall_max_distance):
            out.gated += 1
            out.decide("episode", row, row["event_id"], "excluded", "below_relevance_floor", rank, score)
        elif out.budget.take(row["tokens"]):
            out.episodes.append(
                PacketEpisode(
                    event_id=row["event_id"],
                    content=row["content"],
                    occurred_at=row["occurred_at"],
                    score=score,
                    tokens=row["tokens"],
                )
            )
            out.decide("episode", row, row["event_id"], "included", "packed", rank, score)
        else:
            out.decide("episode", row, row["event_id"], "excluded", "over_budget", rank, score)


def build_packet(req: ContextRequest, out: Assembly) -> ContextPacket:
    """The packet of what was served. Degraded when any warning was raised; `no_relevant_memory`
    only when the recall gate excluded every candidate that existed (spec, "Recall gate")."""
    served = len(out.facts) + len(out.episodes)
    emptied_by_gate = served == 0 and out.considered > 0 and out.gated == out.considered
    return ContextPacket(
        trace_id=uuid7(),
        status="degraded" if out.warnings else "ok",
        warnings=out.warnings,
        empty_reason="no_relevant_memory" if emptied_by_gate else None,
        budget_tokens=req.budget_tokens,
        used_tokens=out.budget.used,
        facts=out.facts,
        episodes=out.episodes,
    )


async def write_trace(conn: Conn, req: ContextRequest, packet: ContextPacket, out: Assembly) -> None:
    """One round trip: the call row and every decision (blocked facts last)."""
    await repo.insert_context_trace(
        conn,
        {
            "project_id": req.project_id,
            "trace_id": packet.trace_id,
            "subject_id": req.subject_id,
            "query": req.query,
            "budget_tokens": packet.budget_tokens,
            "used_tokens": packet.used_tokens,
            "status": packet.status,
            "warnings": packet.warnings,
            "empty_reason": packet.empty_reason,
            "facts_served": len(packet.facts),
            "episodes_served": len(packet.episodes),
        },
        out.decisions + out.blocked,
    )


# --- the call --------------------------------------------------------------------------------


async def assemble(
    conn: Conn,
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    req: ContextRequest,
    *,
    weights: Weights = DEFAULT_WEIGHTS,
    timer: StageTimer | None = None,
    proposal: Proposal | None = None,
) -> ContextPacket:
    """Builds, traces and returns the ContextPacket of one POST /v1/context call.

    `weights` exists for the offline quality evaluation (vector-only / full-text-only modes);
    the HTTP API never exposes it. `proposal` likewise: the measured spec-change proposals of
    docs/quality.md (service/context/proposals.py), evaluation only.
    """
    principal.require(req.project_id)
    timer = timer or StageTimer()
    if proposal is not None:
        from service.context import proposals

        return await proposals.assemble(
            conn, embedder, settings, principal, req, weights=weights, timer=timer, proposal=proposal
        )
    out = Assembly(req.budget_tokens)
    with timer.stage("embed"):
        qvec = await embed_query(embedder, settings, req.query, out)
    async with conn.transaction():
        # The two vector-index walks first, planned for this call's scope (configure_vector_scan):
        # the episodes' here, packed later in the spec's order; the facts' inside
        # retrieve_candidates, which then turns to generic plans for the rest of the call.
        await repo.configure_vector_scan(conn, EF_SEARCH)
        with timer.stage("episodes"):
            episode_rows = await fetch_episodes(conn, req, qvec)
        with timer.stage("candidates"):
            await retrieve_candidates(conn, req, qvec, weights, out)
        with timer.stage("pack"):
            pack_facts(settings, out)
        with timer.stage("multi_hop"):
            await expand_multi_hop(conn, req, qvec, weights, out)
        with timer.stage("episodes"):
            await pack_episodes(conn, req, qvec, settings, out, episode_rows)
        packet = build_packet(req, out)
        with timer.stage("trace"):
            await write_trace(conn, req, packet, out)
    return packet


async def inspect(conn: Conn, principal: Principal, trace_id: UUID) -> Inspection:
    found = await repo.get_inspection(conn, principal.project_id, trace_id)
    if found is None:
        raise NotFound("No context trace with this id in the key's project.", trace_id=str(trace_id))
    return found


async def stats(conn: Conn, principal: Principal, project_id: str) -> StatsOverview:
    principal.require(project_id)
    return await repo.stats_overview(conn, project_id)
