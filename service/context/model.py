"""The values the assembler's steps pass to each other, and the packing rule they share.

Rows of queries/context.sql become these small frozen Structs at the repository boundary
(service/repository/context.py); `pack` is the one packing loop of both profiles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from itertools import accumulate
from typing import Literal
from uuid import UUID

import msgspec
import numpy as np

from service.constants import RECENCY_TAU_SECONDS
from service.settings import TextSearchConfig
from service.structs import ContextPacket, Decision, PacketEpisode, PacketFact

Weights = tuple[float, float, float]
ItemType = Literal["fact", "episode"]


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """What every retrieval statement of one call shares: the scope, the query (its text and
    vector, None when the embedder failed), the hybrid score's weights and recency constant, the
    text search configuration and the instant (None: now)."""

    project_id: str
    subject_id: str
    query: str
    embedding: np.ndarray | None
    weights: Weights
    text_config: TextSearchConfig = "english"
    tau_seconds: float = RECENCY_TAU_SECONDS
    as_of: datetime | None = None


# gc=False: the Structs a call makes one of per item (Candidate, Blocked, Outcome here; Decision,
# PacketFact and PacketEpisode, service/structs.py's ItemResponse) hold no container and never form
# a reference cycle; tracked, they set off garbage collections on every call (docs/performance.md).
class Candidate(msgspec.Struct, frozen=True, gc=False):
    """A fact or an episode that may be served, with the parts of its score. Positional too, in the
    order of the candidate statements' arrays (repository/context.py `_retrieved`)."""

    item_type: ItemType
    item_id: UUID
    content: str
    tokens: int
    score: float
    similarity: float | None
    text_rank: float | None
    recency: float | None
    cosine_distance: float | None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    recorded_from: datetime | None = None
    source_event_id: UUID | None = None
    occurred_at: datetime | None = None
    # A multi-hop expansion fact: served as `multi_hop_expansion`, never gated.
    expansion: bool = False
    # A fact served in place of its turn's episode, at the episode's score (unified rule 7).
    stands_in: bool = False

    @property
    def event_id(self) -> UUID | None:
        """The dialog turn this item stands for: an episode's event, a fact's source event."""
        return self.item_id if self.item_type == "episode" else self.source_event_id


class Blocked(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A fact of the scope that a hard filter hides; `total` counts its reason in the scope."""

    fact_id: UUID
    reason_code: str
    tokens: int
    total: int


class Retrieved(msgspec.Struct, frozen=True, kw_only=True):
    """Candidates in decreasing score order, the blocked facts of the scope, and (unified) the
    query's words with their idf and the stand-ins of the episode candidates (event id -> fact)."""

    candidates: list[Candidate]
    blocked: list[Blocked]
    idf: dict[str, float] = msgspec.field(default_factory=dict)
    stand_ins: dict[UUID, Candidate] = msgspec.field(default_factory=dict)

    @property
    def facts(self) -> list[Candidate]:
        return [c for c in self.candidates if c.item_type == "fact"]


class Packed(msgspec.Struct, frozen=True, kw_only=True):
    """What a pack served, every decision it made, and how much of its budget it used."""

    budget_tokens: int
    used_tokens: int
    facts: list[PacketFact]
    episodes: list[PacketEpisode]
    kept: list[Candidate]
    decisions: list[Decision]
    gated: int
    considered: int

    @property
    def remaining(self) -> int:
        return self.budget_tokens - self.used_tokens

    def without(self, item_ids: set[UUID]) -> Packed:
        """This pack less its decisions about these items, which were gated: they are decided
        again later in the call (facts_first's multi-hop, which is never gated)."""
        kept = [d for d in self.decisions if d.item_id not in item_ids]
        return msgspec.structs.replace(
            self, decisions=kept, gated=self.gated - (len(self.decisions) - len(kept))
        )

    def then(self, later: Packed) -> Packed:
        """This pack followed by one made with what it left of the budget."""
        return Packed(
            budget_tokens=self.budget_tokens,
            used_tokens=self.used_tokens + later.used_tokens,
            facts=[*self.facts, *later.facts],
            episodes=[*self.episodes, *later.episodes],
            kept=[*self.kept, *later.kept],
            decisions=[*self.decisions, *later.decisions],
            gated=self.gated + later.gated,
            considered=self.considered + later.considered,
        )


class Assembled(msgspec.Struct, frozen=True, kw_only=True):
    """What the assembler built for one call: the packet, and the trace of every decision in the
    order it made them (blocked facts last), which the call runner writes where it belongs."""

    packet: ContextPacket
    decisions: list[Decision]


@lru_cache(maxsize=1024)
def text_key(content: str) -> str:
    """Texts that differ only by surrounding space, case or inner whitespace are the same text.

    Cached: a unified call asks it of the same candidates' texts twice (`preview`, then `pack`),
    and a text's hash is kept by the string itself, so the second time is a lookup. 1,024
    entries hold a few calls' candidates (at most 16 MB at MAX_CONTENT_CHARS)."""
    return " ".join(content.split()).casefold()


def decision(
    item: Candidate | Blocked,
    outcome: Literal["included", "excluded", "blocked"],
    reason_code: str,
    rank: int | None,
) -> Decision:
    """The trace row of one decision. A blocked fact was never ranked nor scored: its rank and
    score parts are null."""
    c = item if isinstance(item, Candidate) else None
    return Decision(
        item_type=c.item_type if c else "fact",
        item_id=item.item_id if isinstance(item, Candidate) else item.fact_id,
        decision=outcome,
        reason_code=reason_code,
        rank=rank if c else None,
        score=c.score if c else None,
        similarity=c.similarity if c else None,
        text_rank=c.text_rank if c else None,
        recency=c.recency if c else None,
        cosine_distance=c.cosine_distance if c else None,
        tokens=item.tokens,
    )


def below_floor(c: Candidate, max_distance: float) -> bool:
    """The recall gate's test (`below_relevance_floor`): a cosine distance above max_distance when
    it is > 0, never for an expansion fact (multi-hop rows are never gated)."""
    return (
        not c.expansion
        and max_distance > 0
        and c.cosine_distance is not None
        and c.cosine_distance > max_distance
    )


def served_reason(c: Candidate) -> Literal["packed", "multi_hop_expansion"]:
    """Why a served item is in the packet: the contract's two reasons (docs/spec/api.md). A stand-in
    is `packed`; the `replaced_by_stand_in` decision of its episode, at the same rank, says whose
    place it took."""
    return "multi_hop_expansion" if c.expansion else "packed"


def _served_fact(c: Candidate) -> PacketFact:
    assert c.recorded_from is not None  # a fact's row always has it
    return PacketFact(
        fact_id=c.item_id,
        content=c.content,
        score=c.score,
        tokens=c.tokens,
        reason_code=served_reason(c),
        valid_from=c.valid_from,
        valid_to=c.valid_to,
        recorded_from=c.recorded_from,
        source_event_id=c.source_event_id,
    )


def _served_episode(c: Candidate) -> PacketEpisode:
    assert c.occurred_at is not None  # an episode's row always has it
    return PacketEpisode(
        event_id=c.item_id, content=c.content, occurred_at=c.occurred_at, score=c.score, tokens=c.tokens
    )


class Outcome(msgspec.Struct, frozen=True, gc=False):
    """One packing decision, before it becomes a trace row (a Struct: built once per candidate
    and call, it costs a third of a NamedTuple)."""

    item: Candidate
    decision: Literal["included", "excluded"]
    reason_code: str
    rank: int


def stand_in_for(
    c: Candidate, stand_ins: Mapping[UUID, Candidate], left: int, seen: set[UUID], served_texts: set[str]
) -> Candidate | None:
    """Unified rule 7: the fact of an episode's own turn that is served in its place, at its
    score, when it is cheaper, fits what the budget has left, and was neither decided already
    nor is its text in the packet."""
    fact = stand_ins.get(c.item_id) if c.item_type == "episode" else None
    if (
        fact is None
        or fact.tokens >= c.tokens
        or fact.tokens > left
        or fact.item_id in seen
        or text_key(fact.content) in served_texts
    ):
        return None
    return msgspec.structs.replace(fact, score=c.score, stands_in=True)


def _fewest_tokens(c: Candidate, stand_ins: Mapping[UUID, Candidate]) -> int:
    stand_in = stand_ins.get(c.item_id)
    return min(c.tokens, stand_in.tokens) if stand_in else c.tokens


def outcomes(
    items: Sequence[Candidate],
    budget_tokens: int,
    max_distance: float,
    *,
    dedupe: bool,
    first_rank: int = 1,
    until_full: bool = False,
    stand_ins: Mapping[UUID, Candidate] | None = None,
) -> list[Outcome]:
    """Greedy in the given (score) order: each item that still fits is served, the rest is
    `over_budget`. Before the budget, the recall gate (`below_relevance_floor`: cosine distance
    above max_distance when it is > 0; never an expansion fact) and, with `dedupe` (unified rule
    4), `already_served`: an item whose event, or whose text, is already in the packet. An id
    listed twice (an expansion fact found under two entities) is decided once. With `stand_ins`
    (event id -> fact, unified rule 7) an episode that passes those checks is replaced by its
    stand-in, which takes its rank and is then decided on the budget in its place. `until_full`
    stops once no item left can fit what the budget has left, so the outcomes end with the last
    item that could still be served (what `preview` needs; a trace needs them all)."""
    stand_ins = stand_ins or {}
    used = 0
    out: list[Outcome] = []
    served_events: set[UUID] = set()
    served_texts: set[str] = set()
    seen: set[UUID] = set()
    rank = first_rank - 1
    # The fewest tokens of any item from position i on (an episode's stand-in may be cheaper):
    # past the point where the budget left is below it, nothing more can be served.
    fewest: list[int] = []
    if until_full:
        tokens = [_fewest_tokens(c, stand_ins) for c in items] if stand_ins else [c.tokens for c in items]
        fewest = list(accumulate(reversed(tokens), min))[::-1]
    for i, c in enumerate(items):
        if until_full and budget_tokens - used < fewest[i]:
            break
        if c.item_id in seen:
            continue
        seen.add(c.item_id)
        rank += 1
        event = c.event_id
        text = text_key(c.content) if dedupe else ""
        if below_floor(c, max_distance):
            out.append(Outcome(c, "excluded", "below_relevance_floor", rank))
            continue
        if dedupe and ((event is not None and event in served_events) or text in served_texts):
            out.append(Outcome(c, "excluded", "already_served", rank))
            continue
        if stand_ins and (stand_in := stand_in_for(c, stand_ins, budget_tokens - used, seen, served_texts)):
            out.append(Outcome(c, "excluded", "replaced_by_stand_in", rank))
            seen.add(stand_in.item_id)
            c, text = stand_in, text_key(stand_in.content)
        if c.tokens <= budget_tokens - used:
            used += c.tokens
            if event is not None:
                served_events.add(event)
            served_texts.add(text)
            out.append(Outcome(c, "included", served_reason(c), rank))
        else:
            out.append(Outcome(c, "excluded", "over_budget", rank))
    return out


def preview(
    items: Sequence[Candidate],
    budget_tokens: int,
    max_distance: float,
    stand_ins: Mapping[UUID, Candidate] | None = None,
) -> list[Candidate]:
    """What a unified pack of these items would serve, without building its trace."""
    decided = outcomes(items, budget_tokens, max_distance, dedupe=True, until_full=True, stand_ins=stand_ins)
    return [o.item for o in decided if o.decision == "included"]


def pack(
    items: Sequence[Candidate],
    budget_tokens: int,
    max_distance: float,
    *,
    dedupe: bool,
    first_rank: int = 1,
    stand_ins: Mapping[UUID, Candidate] | None = None,
) -> Packed:
    """The packet and the trace rows of `outcomes`."""
    decided = outcomes(
        items, budget_tokens, max_distance, dedupe=dedupe, first_rank=first_rank, stand_ins=stand_ins
    )
    kept = [o.item for o in decided if o.decision == "included"]
    return Packed(
        budget_tokens=budget_tokens,
        used_tokens=sum(c.tokens for c in kept),
        facts=[_served_fact(c) for c in kept if c.item_type == "fact"],
        episodes=[_served_episode(c) for c in kept if c.item_type == "episode"],
        kept=kept,
        decisions=[decision(o.item, o.decision, o.reason_code, o.rank) for o in decided],
        gated=sum(1 for o in decided if o.reason_code == "below_relevance_floor"),
        considered=sum(1 for o in decided if not (o.item.expansion or o.item.stands_in)),
    )
