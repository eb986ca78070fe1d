"""EVALUATION ONLY: the retrieval proposals of docs/quality.md, as an alternative assembler path.

`assemble(..., proposal=Proposal(...))` routes here; it is a keyword of the Python function
only, like `weights`: nothing in the HTTP API reaches it, and with `proposal=None` (always, in
the service) the shipped path follows spec/context-assembler.md exactly. Each switch changes a
rule of the spec, which is why it is a proposal measured by benchmarks/locomo.py and not the
shipped behaviour:

- `text_query` (P1): "websearch" is the spec's `websearch_to_tsquery('simple', query)`, which
  ANDs every word of a question and so almost never matches; "any" ORs the query's words minus
  English stop words (ranked by ts_rank_cd); "idf" matches the same way and ranks a text by the
  share of the query's IDF it contains.
- `shared_budget` (P2): facts and episodes (top-K events by cosine) are ranked together by the
  same hybrid score and packed into one budget, instead of "facts first, episodes with what's
  left"; an item whose event is already in the packet (an episode, or the `source_event_id` of a
  served fact) is not packed twice (`reason_code = already_served`).
- `episode_text` (P3, with P2): events get a full-text side too (top-K by the text rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

import numpy as np

from service.auth import Principal
from service.constants import CANDIDATE_LIMIT, RECENCY_TAU_SECONDS, RETRIEVAL_TOP_K
from service.context import repository as repo
from service.context.assembler import (
    EF_SEARCH,
    Assembly,
    StageTimer,
    Weights,
    _gated,
    _served_fact,
    build_packet,
    embed_query,
    expand_multi_hop,
    pack_episodes,
    pack_facts,
    record_blocked,
    warn_blocked,
    write_trace,
)
from service.embedder import Embedder
from service.repository import Conn
from service.settings import Settings
from service.structs import ContextPacket, ContextRequest, PacketEpisode

TextQuery = Literal["websearch", "any", "idf"]


@dataclass(frozen=True)
class Proposal:
    text_query: TextQuery = "websearch"
    shared_budget: bool = False
    episode_text: bool = False


async def retrieve(
    conn: Conn,
    req: ContextRequest,
    qvec: np.ndarray | None,
    weights: Weights,
    proposal: Proposal,
    out: Assembly,
) -> list[dict[str, Any]]:
    """Fact candidates into `out.candidates` (as the shipped step does); returns episode candidates."""
    rows = await repo.proposal_candidates(
        conn,
        project_id=req.project_id,
        subject_id=req.subject_id,
        query_embedding=qvec,
        query_text=req.query,
        text_mode=proposal.text_query,
        with_episodes=proposal.shared_budget,
        episode_text=proposal.shared_budget and proposal.episode_text,
        top_k=RETRIEVAL_TOP_K,
        candidate_limit=CANDIDATE_LIMIT,
        weights=weights,
        tau_seconds=RECENCY_TAU_SECONDS,
    )
    episodes: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for raw in rows:
        row = dict(raw)
        if row["kind"] == "candidate":
            if row["item_type"] == "fact":
                out.candidates.append({**row, "fact_id": row["item_id"]})
            else:
                episodes.append({**row, "event_id": row["item_id"]})
            continue
        record_blocked(out, counts, row["item_id"], row)
    out.candidates.sort(key=lambda r: -r["score"])
    warn_blocked(out, counts)
    return episodes


def pack_shared(settings: Settings, out: Assembly, episodes: list[dict[str, Any]]) -> None:
    """P2: facts and episodes by one decreasing score into one budget, each event at most once."""
    items = sorted(out.candidates + episodes, key=lambda r: -r["score"])
    out.considered += len(items)
    in_packet: set[UUID] = set()
    for rank, row in enumerate(items, start=1):
        is_fact = row["item_type"] == "fact"
        kind: Literal["fact", "episode"] = "fact" if is_fact else "episode"
        event_id = row["source_event_id"] if is_fact else row["event_id"]
        if _gated(row, settings.recall_max_distance):
            out.gated += 1
            out.decide(kind, row, row["item_id"], "excluded", "below_relevance_floor", rank, row["score"])
        elif event_id is not None and event_id in in_packet:
            out.decide(kind, row, row["item_id"], "excluded", "already_served", rank, row["score"])
        elif out.budget.take(row["tokens"]):
            if event_id is not None:
                in_packet.add(event_id)
            if is_fact:
                out.facts.append(_served_fact(row, "packed"))
            else:
                out.episodes.append(
                    PacketEpisode(
                        event_id=row["event_id"],
                        content=row["content"],
                        occurred_at=row["occurred_at"],
                        score=row["score"],
                        tokens=row["tokens"],
                    )
                )
            out.decide(kind, row, row["item_id"], "included", "packed", rank, row["score"])
        else:
            out.decide(kind, row, row["item_id"], "excluded", "over_budget", rank, row["score"])


async def assemble(
    conn: Conn,
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    req: ContextRequest,
    *,
    weights: Weights,
    timer: StageTimer,
    proposal: Proposal,
) -> ContextPacket:
    """The assembler's sequence with the proposal's steps swapped in."""
    principal.require(req.project_id)
    out = Assembly(req.budget_tokens)
    with timer.stage("embed"):
        qvec = await embed_query(embedder, settings, req.query, out)
    async with conn.transaction():
        with timer.stage("candidates"):
            await repo.configure_vector_scan(conn, EF_SEARCH)
            episodes = await retrieve(conn, req, qvec, weights, proposal, out)
        with timer.stage("pack"):
            if proposal.shared_budget:
                pack_shared(settings, out, episodes if req.include_episodes else [])
            else:
                pack_facts(settings, out)
        with timer.stage("multi_hop"):
            await expand_multi_hop(conn, req, qvec, weights, out)
        if not proposal.shared_budget:
            with timer.stage("episodes"):
                await pack_episodes(conn, req, qvec, settings, out)
        packet = build_packet(req, out)
        with timer.stage("trace"):
            await write_trace(conn, req, packet, out)
    return packet
