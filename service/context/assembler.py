"""The Context Assembler: two profiles (docs/spec/context-profiles.md), each a sequence of named steps.

    every call   probe_of -> the profile -> build_packet (assemble)
    unified      retrieve_unified (unified_candidates, with the episodes' stand-ins) -> preview ->
                 link_entities -> lift_linked -> pack (one ranking, one budget)
    facts_first  fetch_episodes -> retrieve_facts_first (fact_candidates) ->
                 pack (facts) -> multi_hop_facts -> pack (expansion) -> pack (episodes)
                 (docs/spec/context-assembler.md exactly)

Each step takes values and returns values; the profiles differ in which steps they chain, never
by a branch inside a step. The assembler only retrieves and packs, on the connection and in the
transaction it is given, for one `ContextCall` (service/context/call.py) and its query's vector.
Which connection, which transaction, the trace and the wait for the vector are the call
runner's (service/db/call_runner.py), which also runs the steps below that open the call
(`open_context_call`) and embed its query (`timed_embedding`). Every statement is a named query
of queries/context.sql, reached through service/repository/context.py, which turns rows into the
Structs of service/context/model.py. The scoring runs in SQL: no embedding ever comes back to
Python.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from uuid import UUID

import msgspec
import numpy as np

from service.constants import (
    EPISODE_TOP_K,
    MULTI_HOP_ENTITY_CANDIDATES,
    MULTI_HOP_MAX_ENTITIES,
    RETRIEVAL_TOP_K,
)
from service.context.call import ContextCall
from service.context.entities import ENTITY_PATTERN, extract_entities
from service.context.model import (
    Assembled,
    Candidate,
    Packed,
    Probe,
    Retrieved,
    below_floor,
    decision,
    pack,
    preview,
)
from service.embedding.embedder import Embedder
from service.ids import uuid7
from service.observability.timing import StageTimer
from service.repository import Conn, embedding_model
from service.repository import context as repo
from service.settings import ContextProfile
from service.structs import ContextPacket, Decision

log = logging.getLogger("haki.context")

# hnsw.ef_search must cover the largest K of any scan in the call (its default, 40, silently
# truncates a top-64). Twice K: recall@64 at 1M facts in one scope went from 0.75 to 0.81 for
# no measurable cost (the 10 % scope's iterative scan reads as many tuples; docs/performance.md).
EF_SEARCH = 2 * max(RETRIEVAL_TOP_K, EPISODE_TOP_K, 40)

EMBEDDING_UNAVAILABLE = (
    "embedding_unavailable: the query could not be embedded; served from full-text candidates only"
)


# --- the call's terms: plan mode and durability ---------------------------------------------


async def open_context_call(conn: Conn, project_id: str | None = None, model: str | None = None) -> None:
    """The terms of the call, for its transaction only, in one round trip, which also reads the
    model of `project_id`'s vectors: a call whose embedder is another `model` is refused
    (embedding_model_mismatch) before any retrieval, without a round trip of its own:
    - the plan mode: every statement of the call runs under its generic plan, built once per
      connection (each has one right plan for every scope; the walks pick an exact scan or their
      bucket's HNSW graph when they run, migration 0017), with HNSW allowed EF_SEARCH rows and an
      iterative scan past rows the scope filter rejects;
    - no durability choice: synchronous_commit stays on, so the commit of the call's trace waits
      for the WAL flush and the trace is durable before the packet is returned
      (docs/spec/context-profiles.md)."""
    recorded = await repo.open_context_call(conn, EF_SEARCH, project_id)
    if project_id is not None and model is not None:
        embedding_model.require_model(project_id, recorded, model)


# --- steps shared by both profiles -------------------------------------------------------------


async def embed_query(embedder: Embedder, call: ContextCall) -> np.ndarray | None:
    """Rule 10: an embedder failure or time-out degrades to full-text retrieval, never a 500.
    None means the call is degraded (see warnings_of). The call's project is the one its
    embedding is queued and charged under (the key's, which the call's scope must be)."""
    try:
        (vector,) = await asyncio.wait_for(
            embedder.embed([call.query], purpose="query", project=call.project_id),
            timeout=call.embed_timeout_seconds,
        )
        return vector
    except Exception as exc:  # any embedder failure must degrade, not fail the call
        log.warning("query embedding failed (%s): %r", embedder.name, exc)
        return None


async def timed_embedding(embedder: Embedder, call: ContextCall, timer: StageTimer) -> np.ndarray | None:
    """embed_query, timed as the `embed` stage (it overlaps the opening of the transaction)."""
    with timer.stage("embed"):
        return await embed_query(embedder, call)


def probe_of(call: ContextCall, qvec: np.ndarray | None) -> Probe:
    """The call's retrieval inputs, shared by every statement of its profile."""
    return Probe(
        project_id=call.project_id,
        subject_id=call.subject_id,
        query=call.query,
        embedding=qvec,
        weights=call.weights,
        text_config=call.text_search_config,
        as_of=call.as_of,
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


def build_packet(call: ContextCall, warnings: list[str], packed: Packed) -> ContextPacket:
    """The packet of what was served. Degraded when any warning was raised; `no_relevant_memory`
    only when the recall gate excluded every candidate that existed (spec, "Recall gate")."""
    served = len(packed.facts) + len(packed.episodes)
    emptied_by_gate = served == 0 and packed.considered > 0 and packed.gated == packed.considered
    return ContextPacket(
        trace_id=uuid7(),
        profile=call.profile,
        status="degraded" if warnings else "ok",
        warnings=warnings,
        empty_reason="no_relevant_memory" if emptied_by_gate else None,
        budget_tokens=call.budget_tokens,
        used_tokens=packed.used_tokens,
        facts=packed.facts,
        episodes=packed.episodes,
    )


def trace_of(packed: Packed, retrieved: Retrieved) -> list[Decision]:
    """Every decision of the call in the order it made them, the blocked facts last."""
    blocked = [decision(b, "blocked", b.reason_code, None) for b in retrieved.blocked]
    return [*packed.decisions, *blocked]


# --- the unified profile (docs/spec/context-profiles.md) ---------------------------------------------


async def retrieve_unified(conn: Conn, probe: Probe, with_episodes: bool = True) -> Retrieved:
    """Fact and episode candidates, each the vector top-K UNION the text top-K (the OR of the
    query's words, ranked by idf share), in one ranking by the hybrid score; blocked facts; the
    episodes' stand-ins (rule 7)."""
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
    candidates: Sequence[Candidate],
    linked: Sequence[tuple[str, Candidate]],
    kept: Sequence[Candidate],
    gate: float,
) -> list[Candidate]:
    """Unified rule 5: an entity-linked fact joins the one ranking at the better of its own score
    and the score of the best kept item that names its entity, so it can be served inside the
    budget next to what led to it. A candidate lifted that way becomes an expansion too, and so
    does one the gate would leave out: linked facts are never gated (as in facts_first)."""
    by_id = {c.item_id: c for c in candidates}
    # entity -> score of the best kept item naming it, for the linked entities only: a kept item
    # is tokenised only when it holds one as a substring, since a packet keeps about a hundred.
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
        elif below_floor(base, gate):
            lifted[fact.item_id] = msgspec.structs.replace(base, expansion=True)
    merged = [lifted.pop(c.item_id, c) for c in candidates]
    return sorted([*merged, *lifted.values()], key=ranking_key)


async def assemble_unified(
    conn: Conn, call: ContextCall, probe: Probe, timer: StageTimer
) -> tuple[Retrieved, Packed]:
    gate = call.recall_max_distance
    with timer.stage("candidates"):
        retrieved = await retrieve_unified(conn, probe, with_episodes=call.include_episodes)
    with timer.stage("multi_hop"):
        provisional = preview(retrieved.candidates, call.budget_tokens, gate, retrieved.stand_ins)
        linked = await link_entities(conn, probe, provisional, retrieved)
    with timer.stage("pack"):
        ranked = lift_linked(retrieved.candidates, linked, provisional, gate)
        packed = pack(ranked, call.budget_tokens, gate, dedupe=True, stand_ins=retrieved.stand_ins)
    return retrieved, packed


# --- the facts_first profile (docs/spec/context-assembler.md) ----------------------------------------


async def fetch_episodes(conn: Conn, call: ContextCall, probe: Probe) -> list[Candidate]:
    """The EPISODE_TOP_K events closest to the query (HNSW), none without episodes or a vector."""
    if not call.include_episodes or probe.embedding is None:
        return []
    return await repo.episode_candidates(conn, probe, top_k=EPISODE_TOP_K)


async def assemble_facts_first(
    conn: Conn, call: ContextCall, probe: Probe, timer: StageTimer
) -> tuple[Retrieved, Packed]:
    gate = call.recall_max_distance
    with timer.stage("episodes"):
        episodes = await fetch_episodes(conn, call, probe)
    with timer.stage("candidates"):
        retrieved = await retrieve_facts_first(conn, probe)
    with timer.stage("pack"):
        packed = pack(retrieved.facts, call.budget_tokens, gate, dedupe=False)
    with timer.stage("multi_hop"):
        # "After the main pack, if budget remains": one hop from the packed facts.
        entities = entities_of(packed.kept, call.query, MULTI_HOP_MAX_ENTITIES)
        if packed.remaining > 0 and entities:
            # A candidate the gate left out may come back linked: multi-hop rows are never gated,
            # so one in the vector top-K is served as one beyond it would be, and decided once.
            gated = {d.item_id for d in packed.decisions if d.reason_code == "below_relevance_floor"}
            exclude = [c.item_id for c in retrieved.facts if c.item_id not in gated]
            # Decided blocked already: a set resolved since the call read it must not serve one.
            exclude += [b.fact_id for b in retrieved.blocked]
            expansion = await repo.multi_hop_facts(conn, probe, entities=entities, exclude_ids=exclude)
            hops = pack(expansion, packed.remaining, gate, dedupe=False, first_rank=len(retrieved.facts) + 1)
            packed = packed.without(gated & {d.item_id for d in hops.decisions}).then(hops)
    with timer.stage("episodes"):
        # "Facts first, episodes with what's left."
        packed = packed.then(pack(episodes, packed.remaining, gate, dedupe=False))
    return retrieved, packed


# --- the call --------------------------------------------------------------------------------

# A profile's steps: the call's probe (probe_of) is the same for both, so the call builds it once.
Steps = Callable[[Conn, ContextCall, Probe, StageTimer], Awaitable[tuple[Retrieved, Packed]]]
PROFILES: dict[ContextProfile, Steps] = {"unified": assemble_unified, "facts_first": assemble_facts_first}


async def assemble(
    conn: Conn, call: ContextCall, qvec: np.ndarray | None, timer: StageTimer | None = None
) -> Assembled:
    """The packet of one call and the trace of its decisions, under the call's profile, at its
    instant; `qvec` is its query's vector, None when the embedder failed (a degraded packet).
    Runs on `conn` inside the transaction the caller opened (open_context_call) and writes
    nothing: the call runner (service/db/call_runner.py) writes the trace."""
    timer = timer or StageTimer()
    probe = probe_of(call, qvec)
    retrieved, packed = await PROFILES[call.profile](conn, call, probe, timer)
    packet = build_packet(call, warnings_of(qvec, retrieved), packed)
    return Assembled(packet=packet, decisions=trace_of(packed, retrieved))


__all__ = [
    "EF_SEARCH",
    "PROFILES",
    "RETRIEVERS",
    "assemble",
    "open_context_call",
    "retrieve_facts_first",
    "retrieve_unified",
    "timed_embedding",
]
