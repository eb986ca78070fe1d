"""Repository of the Context Assembler: the only code that runs its named queries.

Rows become the frozen Structs of service/context/model.py here.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID

import msgspec
import numpy as np
from pgvector import Vector

from service.constants import (
    CANDIDATE_LIMIT,
    ENTITY_SAMPLE_DOCS,
    EXACT_SCAN_MIN_FACTS,
    FACTS_FIRST_QUERY_MAX_WORDS,
    IDF_SAMPLE_DOCS,
    MULTI_HOP_MAX_ENTITIES,
    MULTI_HOP_MAX_MATCHES_PER_ENTITY,
    MULTI_HOP_MAX_PER_ENTITY,
    RETRIEVAL_TOP_K,
    TEXT_MATCH_MAX_WORDS,
    TEXT_MATCHES_PER_WORD,
    TEXT_PROBE_MAX_ROWS,
    TEXT_PROBE_MIN_COST,
    TEXT_PROBE_MIN_POSTINGS,
    TEXT_QUERY_MAX_WORDS,
)
from service.context.call import ContextCall
from service.context.model import Blocked, Candidate, Probe, Retrieved, Weights
from service.repository.base import Conn, collect, one_row, q
from service.structs import (
    ContextPacket,
    Decision,
    FactStats,
    FactStatsOrder,
    FactUsage,
    Inspection,
    StatsOverview,
)


def _vec(embedding: np.ndarray | None) -> Vector | None:
    return None if embedding is None else Vector(embedding)


def _scoring(weights: Weights, tau_seconds: float) -> dict[str, float]:
    """The hybrid score's parameters, as every candidate statement names them."""
    return {
        "w_similarity": weights[0],
        "w_text_rank": weights[1],
        "w_recency": weights[2],
        "tau_seconds": tau_seconds,
    }


# The text probe's cost rule (migration 0013), as both text-side statements name it (and the
# tests that read their plans pass it too).
TEXT_PROBE: dict[str, Any] = {
    "probe_rows": TEXT_PROBE_MAX_ROWS,
    "probe_min_cost": TEXT_PROBE_MIN_COST,
    "probe_min_postings": TEXT_PROBE_MIN_POSTINGS,
}


def _candidate(row: Any, item_type: str, item_id: UUID, *, expansion: bool = False) -> Candidate:
    return Candidate(
        item_type="fact" if item_type == "fact" else "episode",
        item_id=item_id,
        content=row["content"],
        tokens=row["tokens"],
        score=row["score"],
        similarity=row["similarity"],
        text_rank=row["text_rank"],
        recency=row["recency"],
        cosine_distance=row["cosine_distance"],
        valid_from=row.get("valid_from"),
        valid_to=row.get("valid_to"),
        recorded_from=row.get("recorded_from"),
        source_event_id=row.get("source_event_id"),
        occurred_at=row.get("occurred_at"),
        expansion=expansion,
    )


# The candidate arrays of fact_candidates and unified_candidates, in Candidate's field order.
_CANDIDATE_ARRAYS = (
    "contents", "tokens", "scores", "similarities", "text_ranks", "recencies", "cosine_distances",
    "valid_froms", "valid_tos", "recorded_froms", "source_event_ids", "occurred_ats",
)  # fmt: skip


def _retrieved(row: Any) -> Retrieved:
    """One row of parallel arrays (null when empty): the candidates in score order, the blocked
    facts of the scope, and (unified) the query's words with their idf."""
    ids = row["item_ids"] or []
    kinds = row.get("item_types") or ["fact"] * len(ids)
    arrays = [row.get(name) or [None] * len(ids) for name in _CANDIDATE_ARRAYS]
    candidates = [
        Candidate("fact" if kind == "fact" else "episode", item_id, *values)
        for kind, item_id, *values in zip(kinds, ids, *arrays, strict=True)
    ]
    reasons = row["blocked_reasons"] or []
    per_reason = Counter(reasons)
    blocked = [
        Blocked(fact_id=fact_id, reason_code=reason, tokens=tokens, total=per_reason[reason])
        for fact_id, reason, tokens in zip(
            row["blocked_ids"] or [], reasons, row["blocked_tokens"] or [], strict=True
        )
    ]
    idf = dict(zip(row.get("words") or [], row.get("idfs") or [], strict=True))
    return Retrieved(candidates=candidates, blocked=blocked, idf=idf, stand_ins=_stand_ins(row))


# The stand-in arrays of unified_candidates (migration 0031) in Candidate's field order, up to
# source_event_id: the event each stands in for.
_STAND_IN_ARRAYS = (
    "stand_in_contents", "stand_in_tokens", "stand_in_scores", "stand_in_similarities",
    "stand_in_text_ranks", "stand_in_recencies", "stand_in_cosine_distances",
    "stand_in_valid_froms", "stand_in_valid_tos", "stand_in_recorded_froms", "stand_in_events",
)  # fmt: skip


def _stand_ins(row: Any) -> dict[UUID, Candidate]:
    """Event id -> the fact that may stand in for its episode (none outside `unified`)."""
    if not row.get("stand_in_events"):
        return {}
    arrays = [row[name] for name in _STAND_IN_ARRAYS]
    return {
        values[-1]: Candidate("fact", fact_id, *values)
        for fact_id, *values in zip(row["stand_in_ids"], *arrays, strict=True)
    }


async def open_context_call(
    conn: Conn, ef_search: int, project_id: str | None = None, subject_id: str | None = None
) -> str | None:
    """Sets the call's terms, and with `subject_id` holds the scope's erasure lock, shared;
    returns the embedding model recorded for `project_id`, if any."""
    model: str | None = await q().open_context_call(
        conn, ef_search=ef_search, project_id=project_id, subject_id=subject_id
    )
    return model


def _probe_args(probe: Probe, *, text: bool = True, scoring: bool = True) -> dict[str, Any]:
    """The parameters every retrieval statement names the same way, from the call's probe."""
    args: dict[str, Any] = {
        "project_id": probe.project_id,
        "subject_id": probe.subject_id,
        "query_embedding": _vec(probe.embedding),
        "as_of": probe.as_of,
    }
    if text:
        args["query_text"] = probe.query
    if scoring:
        args.update(_scoring(probe.weights, probe.tau_seconds))
    return args


def _facts_first_args(probe: Probe) -> dict[str, Any]:
    """_probe_args with the query's text bounded as `facts_first` ranks it
    (FACTS_FIRST_QUERY_MAX_WORDS)."""
    args = _probe_args(probe)
    args["query_text"] = " ".join(probe.query.split()[:FACTS_FIRST_QUERY_MAX_WORDS])
    return args


async def fact_candidates(conn: Conn, probe: Probe) -> Retrieved:
    """`facts_first` phases 1 (the fact walk and the text side) and 2, and the blocked facts."""
    row = one_row(
        await q().fact_candidates(
            conn,
            **_facts_first_args(probe),
            top_k=RETRIEVAL_TOP_K,
            candidate_limit=CANDIDATE_LIMIT,
            exact_scan_min=EXACT_SCAN_MIN_FACTS,
        ),
        "fact_candidates",
    )
    return _retrieved(row)


class TextBounds(msgspec.Struct, frozen=True, kw_only=True):
    """How much the text side of unified_candidates reads: the spec's constants; a test narrows them
    to watch a bound hold."""

    max_words: int = TEXT_QUERY_MAX_WORDS
    match_words: int = TEXT_MATCH_MAX_WORDS
    per_word: int = TEXT_MATCHES_PER_WORD
    sample_docs: int = IDF_SAMPLE_DOCS
    probe_min_cost: float = TEXT_PROBE_MIN_COST
    probe_min_postings: float = TEXT_PROBE_MIN_POSTINGS


SPEC_TEXT_BOUNDS = TextBounds()


def unified_candidates_args(
    probe: Probe,
    *,
    with_episodes: bool = True,
    top_k: int = RETRIEVAL_TOP_K,
    candidate_limit: int = CANDIDATE_LIMIT,
    text: TextBounds = SPEC_TEXT_BOUNDS,
) -> dict[str, Any]:
    """unified_candidates' parameters, by name (what the repository runs and a plan test explains)."""
    return {
        **_probe_args(probe),
        "text_config": probe.text_config,
        "event_top_k": top_k if with_episodes else 0,
        "exact_scan_min": EXACT_SCAN_MIN_FACTS,
        "top_k": top_k,
        "candidate_limit": candidate_limit,
        "max_words": text.max_words,
        "match_words": text.match_words,
        "text_per_word": text.per_word,
        "event_text_per_word": text.per_word if with_episodes else 0,
        "idf_sample_docs": text.sample_docs,
        "probe_rows": TEXT_PROBE_MAX_ROWS,
        "probe_min_cost": text.probe_min_cost,
        "probe_min_postings": text.probe_min_postings,
    }


async def unified_candidates(
    conn: Conn,
    probe: Probe,
    *,
    with_episodes: bool = True,
    top_k: int = RETRIEVAL_TOP_K,
    candidate_limit: int = CANDIDATE_LIMIT,
    text: TextBounds = SPEC_TEXT_BOUNDS,
) -> Retrieved:
    """`unified` phases 1 (the walks of facts and events, and the text side) and 2, facts and
    episodes in one ranking, and the blocked facts."""
    args = unified_candidates_args(
        probe, with_episodes=with_episodes, top_k=top_k, candidate_limit=candidate_limit, text=text
    )
    return _retrieved(one_row(await q().unified_candidates(conn, **args), "unified_candidates"))


async def multi_hop_facts(
    conn: Conn,
    probe: Probe,
    *,
    entities: Sequence[str],
    exclude_ids: Sequence[UUID],
    per_entity: int = MULTI_HOP_MAX_PER_ENTITY,
    match_limit: int = MULTI_HOP_MAX_MATCHES_PER_ENTITY,
    text_probe: dict[str, Any] = TEXT_PROBE,
) -> list[Candidate]:
    """`facts_first` expansion facts, entity by entity (in rank order), each entity's best
    full-text matches first. `text_probe`: the probe's thresholds (a test narrows them)."""
    rows = await collect(
        q().multi_hop_facts(
            conn,
            **_facts_first_args(probe),
            entities=list(entities),
            exclude_ids=list(exclude_ids),
            per_entity=per_entity,
            match_limit=match_limit,
            entity_sample_docs=ENTITY_SAMPLE_DOCS,
            **text_probe,
        )
    )
    return [_candidate(r, "fact", r["fact_id"], expansion=True) for r in rows]


async def linked_facts(
    conn: Conn,
    probe: Probe,
    *,
    entities: Sequence[str],
    idf: dict[str, float],
    open_members: Sequence[UUID],
    max_entities: int = MULTI_HOP_MAX_ENTITIES,
    per_entity: int = MULTI_HOP_MAX_PER_ENTITY,
    match_limit: int = MULTI_HOP_MAX_MATCHES_PER_ENTITY,
) -> list[tuple[str, Candidate]]:
    """`unified` expansion facts with the entity that links each, informative entities only,
    none of `open_members` (the call's open-conflict facts, as unified_candidates saw them)."""
    rows = await collect(
        q().linked_facts(
            conn,
            **_probe_args(probe, text=False),
            entities=list(entities),
            max_entities=max_entities,
            per_entity=per_entity,
            match_limit=match_limit,
            entity_sample_docs=ENTITY_SAMPLE_DOCS,
            words=list(idf),
            idfs=list(idf.values()),
            open_member_ids=list(open_members),
            text_config=probe.text_config,
            **TEXT_PROBE,
        )
    )
    return [(r["entity"], _candidate(r, "fact", r["fact_id"], expansion=True)) for r in rows]


async def episode_candidates(conn: Conn, probe: Probe, *, top_k: int) -> list[Candidate]:
    """`facts_first` episodes: the top_k closest events, scored by their cosine similarity."""
    rows = await collect(
        q().episode_candidates(
            conn,
            **_probe_args(probe, text=False, scoring=False),
            top_k=top_k,
            exact_scan_min=EXACT_SCAN_MIN_FACTS,
        )
    )
    return [
        Candidate(
            item_type="episode",
            item_id=r["event_id"],
            content=r["content"],
            tokens=r["tokens"],
            score=1.0 - r["cosine_distance"],
            similarity=1.0 - r["cosine_distance"],
            text_rank=None,
            recency=None,
            cosine_distance=r["cosine_distance"],
            occurred_at=r["occurred_at"],
        )
        for r in rows
    ]


# A decision's (item_type, decision, reason_code) -> (code, part), as haki_trace_codes maps them
# (migration 0026: a code never changes once stored), read once per process.
_TRACE_CODES: dict[tuple[str, str, str], tuple[int, int]] = {}
# The last part of the arrays: the decisions that count in no fact's statistics.
_UNCOUNTED_PART = 4


async def trace_codes(conn: Conn) -> dict[tuple[str, str, str], tuple[int, int]]:
    if not _TRACE_CODES:
        # Filled in one step: a concurrent call never sees half the mapping.
        rows = await collect(q().list_trace_codes(conn))
        _TRACE_CODES.update(
            {(r["item_type"], r["decision"], r["reason_code"]): (r["code"], r["part"]) for r in rows}
        )
    return _TRACE_CODES


# The largest value of PostgreSQL's smallint, the type of a trace's small arrays.
SMALLINT_MAX: Final = 32_767


def trace_columns(
    decisions: Sequence[Decision], codes: dict[tuple[str, str, str], tuple[int, int]]
) -> dict[str, Any]:
    """The decisions as insert_context_trace's parallel arrays: grouped by part (served facts,
    over budget, below the floor, the rest), in the assembler's order within each; `positions`
    is each one's 1-based place in that order. An unknown decision gets a NULL code, which the
    table refuses."""
    parts: defaultdict[int, list[tuple[int, int | None, Decision]]] = defaultdict(list)
    for position, d in enumerate(decisions, 1):
        code, part = codes.get((d.item_type, d.decision, d.reason_code), (None, _UNCOUNTED_PART))
        parts[part].append((position, code, d))
    rows = [row for part in sorted(parts) for row in parts[part]]
    kept = [d for _, _, d in rows]
    positions = [position for position, _, _ in rows]
    # smallint[] holds the positions of nearly every call; one of more decisions (a scope of
    # 40,000 stale facts, each traced blocked) keeps them in integer[] (migration 0043).
    wide = len(positions) > SMALLINT_MAX
    return {
        "item_ids": [d.item_id for d in kept],
        "positions": None if wide else positions,
        "positions_wide": positions if wide else None,
        "codes": [code for _, code, _ in rows],
        "ranks": [d.rank for d in kept],
        "tokens": [d.tokens for d in kept],
        "cosine_distances": [d.cosine_distance for d in kept],
        "text_ranks": [d.text_rank for d in kept],
        "recencies": [d.recency for d in kept],
        "scores": [d.score for d in kept],
        "similarities": [d.similarity for d in kept],
        "served": len(parts[1]),
        "over_budget": len(parts[2]),
        "below_floor": len(parts[3]),
    }


def trace_call_columns(call: ContextCall, packet: ContextPacket) -> dict[str, Any]:
    """The call's own columns of its trace row (insert_context_trace's parameters besides the
    decisions' arrays)."""
    return {
        "project_id": call.project_id,
        "trace_id": packet.trace_id,
        "subject_id": call.subject_id,
        "query": call.query,
        "profile": packet.profile,
        "budget_tokens": packet.budget_tokens,
        "used_tokens": packet.used_tokens,
        "status": packet.status,
        "warnings": packet.warnings,
        "empty_reason": packet.empty_reason,
        "facts_served": len(packet.facts),
        "episodes_served": len(packet.episodes),
        "include_episodes": call.include_episodes,
        "recall_max_distance": call.recall_max_distance,
        "text_search_config": call.text_search_config,
        "weights": list(call.weights),
        "as_of": call.as_of,
        "replay_of": call.replay_of,
    }


async def insert_context_trace(
    conn: Conn, call: ContextCall, packet: ContextPacket, decisions: Sequence[Decision]
) -> None:
    await q().insert_context_trace(
        conn, **trace_call_columns(call, packet), **trace_columns(decisions, await trace_codes(conn))
    )


async def recheck_context_call(
    conn: Conn, call: ContextCall, packet: ContextPacket
) -> tuple[int, str | None]:
    """How many of the facts `packet` serves the hard filters would hide in a snapshot taken now,
    and the project's embedding model then."""
    row = one_row(
        await q().recheck_context_call(
            conn,
            project_id=call.project_id,
            subject_id=call.subject_id,
            fact_ids=[f.fact_id for f in packet.facts],
            as_of=call.as_of,
        ),
        "recheck_context_call",
    )
    return row["unservable"], row["embedding_model"]


async def count_erased_items(conn: Conn, call: ContextCall, decisions: Sequence[Decision]) -> int:
    """How many of the items `decisions` name are no longer a fact or an event of the call's scope."""
    if not decisions:
        return 0
    erased: int = await q().count_erased_trace_items(
        conn,
        project_id=call.project_id,
        subject_id=call.subject_id,
        item_ids=list({d.item_id for d in decisions}),
    )
    return erased


# The call's own columns of get_inspection's row (the rest are its decisions' arrays).
_CALL_FIELDS = tuple(f for f in Inspection.__struct_fields__ if f not in ("warnings", "decisions"))


def _compact_decisions(row: Any) -> list[Decision]:
    """A compact trace's decisions in the assembler's order: the stored arrays zipped, each code
    named by the mapping the statement read (haki_trace_codes)."""
    named = dict(
        zip(
            row["known_codes"],
            zip(row["known_item_types"], row["known_decisions"], row["known_reason_codes"], strict=True),
            strict=True,
        )
    )
    columns = zip(
        row["positions"], row["codes"], row["item_ids"], row["ranks"], row["scores"], row["similarities"],
        row["text_ranks"], row["recencies"], row["cosine_distances"], row["tokens"], strict=True,
    )  # fmt: skip
    decisions = []
    for _, code, item_id, rank, score, similarity, text_rank, recency, distance, tokens in sorted(columns):
        item_type, decision, reason_code = named[code]
        kept = Decision(
            item_type=item_type, item_id=item_id, decision=decision, reason_code=reason_code, rank=rank,
            score=score, similarity=similarity, text_rank=text_rank, recency=recency,
            cosine_distance=distance, tokens=tokens,
        )  # fmt: skip
        decisions.append(kept)
    return decisions


async def get_inspection(conn: Conn, project_id: str, trace_id: UUID) -> Inspection | None:
    row = await q().get_inspection(conn, project_id=project_id, trace_id=trace_id)
    if row is None:
        return None
    if row["item_ids"] is not None:
        decisions = _compact_decisions(row)
    else:  # traced before the compact form (migration 0026)
        rows = await collect(q().list_context_decisions(conn, project_id=project_id, trace_id=trace_id))
        decisions = [Decision(**dict(r)) for r in rows]
    return Inspection(
        **{f: row[f] for f in _CALL_FIELDS}, warnings=list(row["warnings"]), decisions=decisions
    )


async def stats_overview(conn: Conn, project_id: str) -> StatsOverview:
    row = await q().stats_overview(conn, project_id=project_id)
    return StatsOverview(**dict(one_row(row, "stats_overview")))


async def stats_facts(
    conn: Conn, project_id: str, subject_id: str | None, order: FactStatsOrder, limit: int
) -> FactStats:
    rows = await collect(
        q().stats_facts(conn, project_id=project_id, subject_id=subject_id, order_by=order, page_size=limit)
    )
    return FactStats(
        project_id=project_id,
        subject_id=subject_id,
        order=order,
        facts=[FactUsage(**dict(r)) for r in rows],
    )
