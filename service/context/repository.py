"""Repository of the Context Assembler: the only code that runs its named queries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import msgspec
import numpy as np
from pgvector import Vector

from service.constants import EXACT_SCAN_MIN_FACTS
from service.repository import Conn, collect, q
from service.structs import Decision, Inspection, StatsOverview

# Decision objects as the JSON array insert_context_trace unpacks (field names = column names).
_DECISIONS = msgspec.json.Encoder()


def _vec(embedding: np.ndarray | None) -> Vector | None:
    return None if embedding is None else Vector(embedding)


async def configure_vector_scan(conn: Conn, ef_search: int) -> None:
    await q().configure_vector_scan(conn, ef_search=ef_search)


async def end_custom_plans(conn: Conn) -> None:
    await q().end_custom_plans(conn)


async def fact_candidates(
    conn: Conn,
    *,
    project_id: str,
    subject_id: str,
    query_embedding: np.ndarray | None,
    query_text: str,
    top_k: int,
    candidate_limit: int,
    weights: tuple[float, float, float],
    tau_seconds: float,
    exact_scan_min: int = EXACT_SCAN_MIN_FACTS,
) -> list[Any]:
    """Phases 1 and 2 and the blocked facts: the vector side (vector_walk), planned for its own
    parameters, then everything else under generic plans for the rest of the transaction
    (end_custom_plans): after this call only statements with one right plan for every scope
    may run."""
    vec = _vec(query_embedding)
    walked_ids = await q().vector_walk(
        conn,
        project_id=project_id,
        subject_id=subject_id,
        query_embedding=vec,
        top_k=top_k,
        exact_scan_min=exact_scan_min,
    )
    await end_custom_plans(conn)
    return await collect(
        q().fact_candidates(
            conn,
            project_id=project_id,
            subject_id=subject_id,
            query_embedding=vec,
            query_text=query_text,
            top_k=top_k,
            candidate_limit=candidate_limit,
            walked_ids=walked_ids,
            w_similarity=weights[0],
            w_text_rank=weights[1],
            w_recency=weights[2],
            tau_seconds=tau_seconds,
        )
    )


async def multi_hop_facts(
    conn: Conn,
    *,
    project_id: str,
    subject_id: str,
    entities: Sequence[str],
    exclude_ids: Sequence[UUID],
    per_entity: int,
    query_embedding: np.ndarray | None,
    query_text: str,
    weights: tuple[float, float, float],
    tau_seconds: float,
) -> list[Any]:
    return await collect(
        q().multi_hop_facts(
            conn,
            project_id=project_id,
            subject_id=subject_id,
            entities=list(entities),
            exclude_ids=list(exclude_ids),
            per_entity=per_entity,
            query_embedding=_vec(query_embedding),
            query_text=query_text,
            w_similarity=weights[0],
            w_text_rank=weights[1],
            w_recency=weights[2],
            tau_seconds=tau_seconds,
        )
    )


async def episode_candidates(
    conn: Conn, *, project_id: str, subject_id: str, query_embedding: np.ndarray, top_k: int
) -> list[Any]:
    return await collect(
        q().episode_candidates(
            conn,
            project_id=project_id,
            subject_id=subject_id,
            query_embedding=_vec(query_embedding),
            top_k=top_k,
        )
    )


async def insert_context_trace(conn: Conn, call: dict[str, Any], decisions: Sequence[Decision]) -> None:
    await q().insert_context_trace(conn, **call, decisions=_DECISIONS.encode(list(decisions)).decode())


async def get_inspection(conn: Conn, project_id: str, trace_id: UUID) -> Inspection | None:
    call = await q().get_context_call(conn, project_id=project_id, trace_id=trace_id)
    if call is None:
        return None
    rows = await collect(q().list_context_decisions(conn, project_id=project_id, trace_id=trace_id))
    return Inspection(
        **{**dict(call), "warnings": list(call["warnings"])},
        decisions=[Decision(**dict(r)) for r in rows],
    )


async def stats_overview(conn: Conn, project_id: str) -> StatsOverview:
    row = await q().stats_overview(conn, project_id=project_id)
    return StatsOverview(**dict(row))


async def proposal_candidates(
    conn: Conn,
    *,
    project_id: str,
    subject_id: str,
    query_embedding: np.ndarray | None,
    query_text: str,
    text_mode: str,
    with_episodes: bool,
    episode_text: bool,
    top_k: int,
    candidate_limit: int,
    weights: tuple[float, float, float],
    tau_seconds: float,
) -> list[Any]:
    """Evaluation only (docs/quality.md proposals): see service/context/proposals.py."""
    return await collect(
        q().proposal_candidates(
            conn,
            project_id=project_id,
            subject_id=subject_id,
            query_embedding=_vec(query_embedding),
            query_text=query_text,
            text_mode=text_mode,
            with_episodes=with_episodes,
            episode_text=episode_text,
            top_k=top_k,
            candidate_limit=candidate_limit,
            w_similarity=weights[0],
            w_text_rank=weights[1],
            w_recency=weights[2],
            tau_seconds=tau_seconds,
        )
    )
