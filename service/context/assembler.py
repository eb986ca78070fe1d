"""The Context Assembler: two profiles (docs/spec/context-profiles.md), each a sequence of named steps.

    every call   open_context_call (while embed_query runs) -> the profile -> build_packet ->
                 write_trace
    unified      retrieve_unified (unified_candidates) -> preview -> link_entities ->
                 lift_linked -> pack (one ranking, one budget)
    facts_first  fetch_episodes -> retrieve_facts_first (fact_candidates) ->
                 pack (facts) -> multi_hop_facts -> pack (expansion) -> pack (episodes)
                 (docs/spec/context-assembler.md exactly)

Each step takes values and returns values; the profiles differ in which steps they chain, never
by a branch inside a step. The call's terms (the plan mode: generic plans, HNSW settings; the
durability choice: no wait for the WAL flush) are a step of their own. Every statement is a
named query of queries/context.sql, reached through service/repository/context.py, which turns
rows into the Structs of service/context/model.py. The scoring runs in SQL: no embedding ever
comes back to Python.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
import numpy as np

from service.auth import Principal
from service.constants import (
    CONTEXT_EMBED_PATIENCE_SECONDS,
    EPISODE_TOP_K,
    MULTI_HOP_ENTITY_CANDIDATES,
    MULTI_HOP_MAX_ENTITIES,
    RETRIEVAL_TOP_K,
    UNIFIED_WEIGHT_RECENCY,
    UNIFIED_WEIGHT_SIMILARITY,
    UNIFIED_WEIGHT_TEXT_RANK,
    WEIGHT_RECENCY,
    WEIGHT_SIMILARITY,
    WEIGHT_TEXT_RANK,
)
from service.context.entities import ENTITY_PATTERN, extract_entities
from service.context.model import Candidate, Packed, Probe, Retrieved, Weights, decision, pack, preview
from service.db import Lent
from service.embedder import Embedder
from service.errors import InvalidInput, NotFound
from service.ids import uuid7
from service.memory import storable_utc
from service.observability.timing import StageTimer
from service.replica import trace_transaction
from service.repository import Conn
from service.repository import context as repo
from service.settings import ContextProfile, Settings
from service.structs import ContextPacket, ContextRequest, Inspection, StatsOverview

log = logging.getLogger("haki.context")

# The hybrid score's weights of each profile (not contract; service/constants.py).
PROFILE_WEIGHTS: dict[ContextProfile, Weights] = {
    "unified": (UNIFIED_WEIGHT_SIMILARITY, UNIFIED_WEIGHT_TEXT_RANK, UNIFIED_WEIGHT_RECENCY),
    "facts_first": (WEIGHT_SIMILARITY, WEIGHT_TEXT_RANK, WEIGHT_RECENCY),
}

# hnsw.ef_search must cover the largest K of any scan in the call (its default, 40, silently
# truncates a top-64). Twice K: recall@64 at 1M facts in one scope went from 0.75 to 0.81 for
# no measurable cost (the 10 % scope's iterative scan reads as many tuples; docs/performance.md).
EF_SEARCH = 2 * max(RETRIEVAL_TOP_K, EPISODE_TOP_K, 40)

EMBEDDING_UNAVAILABLE = (
    "embedding_unavailable: the query could not be embedded; served from full-text candidates only"
)


def check_as_of(field: str, as_of: datetime | None) -> None:
    """An as-of instant must not be in the future (docs/time-travel.md): the memory of an instant
    that has not happened yet is not known. Years 1..9999 in UTC, as every stored timestamp."""
    if as_of is not None and storable_utc(field, as_of) > datetime.now(UTC):
        raise InvalidInput(field, "is in the future: the memory can only be read as of now or before")


# --- the call's terms: plan mode and durability ---------------------------------------------


async def open_context_call(conn: Conn) -> None:
    """The terms of the call, for its transaction only, in one round trip:
    - the plan mode: every statement of the call runs under its generic plan, built once per
      connection (each has one right plan for every scope; the walks pick an exact scan or their
      bucket's HNSW graph when they run, migration 0017), with HNSW allowed EF_SEARCH rows and an
      iterative scan past rows the scope filter rejects;
    - the durability choice: the commit (of the call's trace) does not wait for the WAL flush. A
      crash can lose the last few hundred ms of traces, never corrupt them; memories are never
      written by a context call (docs/performance.md). As a statement of its own before the
      trace write it cost a round trip on the call's critical path (0.37-0.49 ms a call)."""
    await repo.open_context_call(conn, EF_SEARCH)


# --- steps shared by both profiles -------------------------------------------------------------


async def embed_query(
    embedder: Embedder, settings: Settings, query: str, project: str | None = None
) -> np.ndarray | None:
    """Rule 10: an embedder failure or time-out degrades to full-text retrieval, never a 500.
    None means the call is degraded (see warnings_of)."""
    try:
        (vector,) = await asyncio.wait_for(
            embedder.embed([query], purpose="query", project=project), timeout=settings.embed_timeout_seconds
        )
        return vector
    except Exception as exc:  # any embedder failure must degrade, not fail the call
        log.warning("query embedding failed (%s): %r", embedder.name, exc)
        return None


def probe_of(req: ContextRequest, qvec: np.ndarray | None, settings: Settings, weights: Weights) -> Probe:
    """The call's retrieval inputs, shared by every statement of its profile."""
    return Probe(
        project_id=req.project_id,
        subject_id=req.subject_id,
        query=req.query,
        embedding=qvec,
        weights=weights,
        text_config=settings.text_search_config,
        as_of=req.as_of,
    )


def warnings_of(qvec: np.ndarray | None, retrieved: Retrieved) -> list[str]:
    """The spec's warnings: the embedder down, facts hidden by an open conflict or staleness."""
    warnings = [] if qvec is not None else [EMBEDDING_UNAVAILABLE]
    totals = {b.reason_code: b.total for b in retrieved.blocked}
    if totals.get("conflict_open"):
        warnings.append(
            f"open_conflict: {totals['conflict_open']} fact(s) hidden pending conflict resolution"
        )
    if totals.get("volatility_expired"):
        warnings.append(
            f"volatility_expired: {totals['volatility_expired']} fact(s) hidden because their "
            "volatile information is stale"
        )
    return warnings


def entities_of(kept: Sequence[Candidate], query: str, limit: int) -> list[str]:
    """The spec's entities of the kept facts: capitalised tokens by frequency, no sentence
    starters, no words of the query (service/context/entities.py)."""
    return extract_entities((c.content for c in kept if c.item_type == "fact"), query, limit)


def build_packet(
    req: ContextRequest, profile: ContextProfile, warnings: list[str], packed: Packed
) -> ContextPacket:
    """The packet of what was served. Degraded when any warning was raised; `no_relevant_memory`
    only when the recall gate excluded every candidate that existed (spec, "Recall gate")."""
    served = len(packed.facts) + len(packed.episodes)
    emptied_by_gate = served == 0 and packed.considered > 0 and packed.gated == packed.considered
    return ContextPacket(
        trace_id=uuid7(),
        profile=profile,
        status="degraded" if warnings else "ok",
        warnings=warnings,
        empty_reason="no_relevant_memory" if emptied_by_gate else None,
        budget_tokens=req.budget_tokens,
        used_tokens=packed.used_tokens,
        facts=packed.facts,
        episodes=packed.episodes,
    )


async def write_trace(
    conn: Conn,
    req: ContextRequest,
    packet: ContextPacket,
    packed: Packed,
    retrieved: Retrieved,
    settings: Settings,
    probe: Probe,
    replay_of: UUID | None = None,
) -> None:
    """One round trip: the call row (with what a replay needs to rebuild it: the recall floor,
    and the text search configuration and weights of `probe`) and every decision (blocked facts
    last)."""
    blocked = [decision(b, "blocked", b.reason_code, None) for b in retrieved.blocked]
    await repo.insert_context_trace(
        conn,
        req,
        packet,
        [*packed.decisions, *blocked],
        recall_max_distance=settings.recall_max_distance,
        text_search_config=probe.text_config,
        weights=probe.weights,
        replay_of=replay_of,
    )


# --- the unified profile (docs/spec/context-profiles.md) ---------------------------------------------


async def retrieve_unified(conn: Conn, probe: Probe, with_episodes: bool = True) -> Retrieved:
    """Fact and episode candidates, each the vector top-K UNION the text top-K (the OR of the
    query's words, ranked by idf share), in one ranking by the hybrid score; blocked facts."""
    return await repo.unified_candidates(conn, probe, with_episodes=with_episodes)


async def retrieve_facts_first(conn: Conn, probe: Probe) -> Retrieved:
    """Fact candidates, the vector top-K UNION the text top-K (every word), and blocked facts."""
    return await repo.fact_candidates(conn, probe)


# Each profile's candidate step (the benchmarks time it alone, as the assembler runs it).
RETRIEVERS: dict[ContextProfile, Callable[[Conn, Probe], Awaitable[Retrieved]]] = {
    "unified": retrieve_unified,
    "facts_first": retrieve_facts_first,
}


async def link_entities(
    conn: Conn, probe: Probe, provisional: Sequence[Candidate], retrieved: Retrieved
) -> list[tuple[str, Candidate]]:
    """One hop from the facts the packet would hold without expansion: the facts of the scope
    that name their most frequent informative entities, closest to the query first. The words'
    idf and the open-conflict facts are those the candidates were ranked and filtered with."""
    entities = entities_of(provisional, probe.query, MULTI_HOP_ENTITY_CANDIDATES)
    if not entities:
        return []
    open_members = [b.fact_id for b in retrieved.blocked if b.reason_code == "conflict_open"]
    return await repo.linked_facts(
        conn, probe, entities=entities, idf=retrieved.idf, open_members=open_members
    )


def ranking_key(c: Candidate) -> tuple[float, bool, bool, UUID]:
    """Decreasing score; ties: an expansion after the item that led to it, facts before
    episodes (the cheaper form of a turn), then by id."""
    return (-c.score, c.expansion, c.item_type == "episode", c.item_id)


def lift_linked(
    candidates: Sequence[Candidate], linked: Sequence[tuple[str, Candidate]], kept: Sequence[Candidate]
) -> list[Candidate]:
    """Unified rule 5: an entity-linked fact joins the one ranking at the better of its own score
    and the score of the best kept item that names its entity, so it can be served inside the
    budget next to what led to it. A candidate lifted that way becomes an expansion too."""
    by_id = {c.item_id: c for c in candidates}
    # entity -> score of the best kept item naming it, for the linked entities only: a kept item
    # is tokenised only when it holds one as a substring (a budget of 900 keeps about a hundred
    # items; tokenising them all cost 0.15 ms a call).
    wanted = {entity for entity, _ in linked}
    best: dict[str, float] = {}
    for k in kept:
        named = [entity for entity in wanted if entity in k.content]
        if named:
            tokens = set(ENTITY_PATTERN.findall(k.content))
            for entity in named:
                if entity in tokens:
                    best[entity] = max(best.get(entity, k.score), k.score)
    lifted: dict[UUID, Candidate] = {}
    for entity, fact in linked:
        parent = best.get(entity, 0.0)
        base = lifted.get(fact.item_id) or by_id.get(fact.item_id) or fact
        if parent > base.score:
            lifted[fact.item_id] = msgspec.structs.replace(base, score=parent, expansion=True)
        elif fact.item_id not in by_id:
            lifted.setdefault(fact.item_id, fact)
    merged = [lifted.pop(c.item_id, c) for c in candidates]
    return sorted([*merged, *lifted.values()], key=ranking_key)


async def assemble_unified(
    conn: Conn, req: ContextRequest, probe: Probe, gate: float, timer: StageTimer
) -> tuple[Retrieved, Packed]:
    with timer.stage("candidates"):
        retrieved = await retrieve_unified(conn, probe, with_episodes=req.include_episodes)
    with timer.stage("multi_hop"):
        provisional = preview(retrieved.candidates, req.budget_tokens, gate)
        linked = await link_entities(conn, probe, provisional, retrieved)
    with timer.stage("pack"):
        ranked = lift_linked(retrieved.candidates, linked, provisional)
        packed = pack(ranked, req.budget_tokens, gate, dedupe=True)
    return retrieved, packed


# --- the facts_first profile (docs/spec/context-assembler.md) ----------------------------------------


async def fetch_episodes(conn: Conn, req: ContextRequest, probe: Probe) -> list[Candidate]:
    """The EPISODE_TOP_K events closest to the query (HNSW), none without episodes or a vector."""
    if not req.include_episodes or probe.embedding is None:
        return []
    return await repo.episode_candidates(conn, probe, top_k=EPISODE_TOP_K)


async def assemble_facts_first(
    conn: Conn, req: ContextRequest, probe: Probe, gate: float, timer: StageTimer
) -> tuple[Retrieved, Packed]:
    with timer.stage("episodes"):
        episodes = await fetch_episodes(conn, req, probe)
    with timer.stage("candidates"):
        retrieved = await retrieve_facts_first(conn, probe)
    with timer.stage("pack"):
        packed = pack(retrieved.facts, req.budget_tokens, gate, dedupe=False)
    with timer.stage("multi_hop"):
        # "After the main pack, if budget remains": one hop from the packed facts.
        entities = entities_of(packed.kept, req.query, MULTI_HOP_MAX_ENTITIES)
        if packed.remaining > 0 and entities:
            exclude = [c.item_id for c in retrieved.facts]
            expansion = await repo.multi_hop_facts(conn, probe, entities=entities, exclude_ids=exclude)
            packed = packed.then(
                pack(expansion, packed.remaining, gate, dedupe=False, first_rank=len(retrieved.facts) + 1)
            )
    with timer.stage("episodes"):
        # "Facts first, episodes with what's left."
        packed = packed.then(pack(episodes, packed.remaining, gate, dedupe=False))
    return retrieved, packed


# --- the call --------------------------------------------------------------------------------

# A profile's steps: the call's probe (probe_of) and recall gate (settings.recall_max_distance)
# are the same for both, so the call builds them once.
Steps = Callable[[Conn, ContextRequest, Probe, float, StageTimer], Awaitable[tuple[Retrieved, Packed]]]
PROFILES: dict[ContextProfile, Steps] = {"unified": assemble_unified, "facts_first": assemble_facts_first}


async def assemble(
    conn: Conn,
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    req: ContextRequest,
    *,
    weights: Weights | None = None,
    timer: StageTimer | None = None,
    replay_of: UUID | None = None,
    trace_pool: Any | None = None,
    lent: Lent | None = None,
) -> ContextPacket:
    """Builds, traces and returns the ContextPacket of one POST /v1/context call, with the
    request's profile or the deployment's, at the request's as_of or now.

    `weights` (default: the profile's) exists for the offline quality evaluation
    (benchmarks/locomo.py builds its single-signal modes with it); the HTTP API never exposes it.
    `replay_of` links the trace of a replay to its origin (replay below).
    `trace_pool` (the primary's pool) is given when `conn` is a streaming standby's
    (service/replica.py): the retrieval runs there read-only, and the trace is written on the
    primary afterwards in a transaction of its own. None: one transaction, as always.
    `lent` (the request's lease, which `conn` comes from) lets a call whose query embeds slowly
    give its connection back while it waits (CONTEXT_EMBED_PATIENCE_SECONDS); without it the call
    keeps `conn` throughout.
    """
    principal.require(req.project_id)
    if replay_of is None:  # a replay's default instant is its origin's, stamped by the database
        check_as_of("as_of", req.as_of)
    timer = timer or StageTimer()
    profile: ContextProfile = req.profile or settings.context_profile
    # The query embeds on the embedder's thread while the transaction opens and is configured:
    # their two round trips leave the critical path (docs/performance.md, "Outside the stages").
    embedding = asyncio.create_task(
        timed_embedding(embedder, settings, req.query, timer, principal.project_id)
    )
    try:
        while True:
            try:
                async with conn.transaction(readonly=trace_pool is not None):
                    await open_context_call(conn)
                    if lent is not None and not await finished(embedding, CONTEXT_EMBED_PATIENCE_SECONDS):
                        raise _EmbedderSlow  # rolls the transaction back: it has only read
                    qvec = await embedding
                    probe = probe_of(req, qvec, settings, weights or PROFILE_WEIGHTS[profile])
                    retrieved, packed = await PROFILES[profile](
                        conn, req, probe, settings.recall_max_distance, timer
                    )
                    packet = build_packet(req, profile, warnings_of(qvec, retrieved), packed)
                    if trace_pool is None:
                        with timer.stage("trace"):
                            await write_trace(
                                conn, req, packet, packed, retrieved, settings, probe, replay_of
                            )
                break
            except _EmbedderSlow:
                assert lent is not None
                # The pool gets the connection back until the vector comes (or the embedder's
                # time-out: a degraded call), then the call starts over on a connection lent anew.
                async with lent.set_aside():
                    await asyncio.wait({embedding})
                conn, lent = lent.conn, None
        if trace_pool is not None:
            with timer.stage("trace"):
                async with trace_transaction(trace_pool, settings.pool_acquire_timeout_seconds) as primary:
                    await open_context_call(primary)  # the terms of the call's own transaction
                    await write_trace(primary, req, packet, packed, retrieved, settings, probe, replay_of)
    finally:
        if not embedding.done():  # the database failed first: the vector is not needed
            embedding.cancel()
    return packet


class _EmbedderSlow(Exception):
    """The query's vector did not come within CONTEXT_EMBED_PATIENCE_SECONDS."""


async def finished(task: asyncio.Task[Any], seconds: float) -> bool:
    """Whether `task` is done within `seconds` (it runs on either way)."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    return bool(done)


async def timed_embedding(
    embedder: Embedder, settings: Settings, query: str, timer: StageTimer, project: str | None = None
) -> np.ndarray | None:
    """embed_query, timed as the `embed` stage (it overlaps the opening of the transaction)."""
    with timer.stage("embed"):
        return await embed_query(embedder, settings, query, project)


async def inspect(conn: Conn, principal: Principal, trace_id: UUID) -> Inspection:
    found = await repo.get_inspection(conn, principal.project_id, trace_id)
    if found is None:
        raise NotFound("No context trace with this id in the key's project.", trace_id=str(trace_id))
    return found


async def stats(conn: Conn, principal: Principal, project_id: str) -> StatsOverview:
    principal.require(project_id)
    return await repo.stats_overview(conn, project_id)


__all__ = [
    "EF_SEARCH",
    "PROFILES",
    "PROFILE_WEIGHTS",
    "RETRIEVERS",
    "assemble",
    "check_as_of",
    "inspect",
    "open_context_call",
    "retrieve_facts_first",
    "retrieve_unified",
    "stats",
]
