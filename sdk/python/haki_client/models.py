"""Typed shapes of the Haki HTTP contract (v1), decoded and encoded by msgspec.

Enumerated values (statuses, reason codes) are typed `str`, not `Literal`: a server may add a
value in a minor version, and a client must keep decoding the rest of the packet when it does.
Unknown response fields are ignored for the same reason.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import msgspec

# Documentation aliases: what values the contract defines today.
FactStatus = str  # "active" | "superseded" | "retracted"
Volatility = str  # "stable" | "volatile"
ConflictStatus = str  # "open" | "resolved"
PacketStatus = str  # "ok" | "degraded"
Decision = str  # "included" | "excluded" | "blocked"
ReasonCode = str  # packed | multi_hop_expansion | over_budget | below_relevance_floor | conflict_open |
#                   already_served | ...
# The context profiles a call may ask for. Only the request side is a Literal: a packet's
# `profile` is read as `str`, like the other enumerated values.
ContextProfile = Literal["unified", "facts_first"]
# A warning that counts held-back facts: "open_conflict: 2 fact(s) hidden pending conflict
# resolution", "volatility_expired: 1 fact(s) hidden because ..." (docs/spec/api.md, inspect).
_HIDDEN = re.compile(r"^(?P<reason>\w+): (?P<n>\d+) fact\(s\) hidden\b")


class _In(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Request items: unset optional fields are left out of the body, so server defaults apply."""


class _Out(msgspec.Struct, frozen=True, kw_only=True):
    """Response shapes: immutable values."""


# --- write side ------------------------------------------------------------------------------


class FactIn(_In, kw_only=True, omit_defaults=True):
    """One fact to write. Only `content` is required."""

    content: str
    key: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    volatility: Volatility | None = None
    stale_after_seconds: int | None = None
    supersedes: UUID | None = None
    source_event_id: UUID | None = None
    metadata: dict[str, Any] | None = None


class EventIn(_In, kw_only=True, omit_defaults=True):
    """One dated event (episodic memory) to write."""

    content: str
    occurred_at: datetime
    metadata: dict[str, Any] | None = None


class FactWriteResult(_Out, frozen=True, kw_only=True):
    fact_id: UUID
    status: FactStatus
    conflict_set_id: UUID | None = None


class WriteFactsResponse(_Out, frozen=True, kw_only=True):
    facts: list[FactWriteResult]


class EventWriteResult(_Out, frozen=True, kw_only=True):
    event_id: UUID


class WriteEventsResponse(_Out, frozen=True, kw_only=True):
    events: list[EventWriteResult]


class Fact(_Out, frozen=True, kw_only=True):
    fact_id: UUID
    project_id: str
    subject_id: str
    content: str
    status: FactStatus
    recorded_from: datetime
    key: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    volatility: Volatility = "stable"
    stale_after_seconds: int | None = None
    supersedes: UUID | None = None
    source_event_id: UUID | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    conflict_set_id: UUID | None = None
    # Time travel (docs/time-travel.md): when the fact stopped being believed, and what it is
    # worth, counted from the server's traces. Defaults from a server that predates them.
    recorded_to: datetime | None = None
    served_count: int = 0
    last_served_at: datetime | None = None
    excluded_count: int = 0


class FactPage(_Out, frozen=True, kw_only=True):
    facts: list[Fact]
    next_cursor: str | None = None


class ConflictMember(_Out, frozen=True, kw_only=True):
    fact_id: UUID
    content: str
    status: FactStatus
    recorded_from: datetime
    valid_from: datetime | None = None


class ConflictSet(_Out, frozen=True, kw_only=True):
    conflict_set_id: UUID
    project_id: str
    subject_id: str
    key: str
    status: ConflictStatus
    created_at: datetime
    members: list[ConflictMember]
    resolved_at: datetime | None = None


class ConflictList(_Out, frozen=True, kw_only=True):
    conflicts: list[ConflictSet]
    # Pass it back as `cursor` for the next page; None on the last (or from a server before pages).
    next_cursor: str | None = None


# --- read side -------------------------------------------------------------------------------


class PacketFact(_Out, frozen=True, kw_only=True):
    fact_id: UUID
    content: str
    score: float
    tokens: int
    reason_code: ReasonCode
    recorded_from: datetime
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    source_event_id: UUID | None = None


class PacketEpisode(_Out, frozen=True, kw_only=True):
    event_id: UUID
    content: str
    occurred_at: datetime
    score: float
    tokens: int


class ContextPacket(_Out, frozen=True, kw_only=True):
    trace_id: UUID
    status: PacketStatus
    budget_tokens: int
    used_tokens: int
    facts: list[PacketFact]
    episodes: list[PacketEpisode]
    warnings: list[str] = msgspec.field(default_factory=list)
    empty_reason: str | None = None
    # The profile that built the packet ("unified" | "facts_first"). Required of the server;
    # None only when the server predates context profiles and does not send it.
    profile: str | None = None

    @property
    def is_empty(self) -> bool:
        """Nothing served: no fact and no episode."""
        return not self.facts and not self.episodes

    @property
    def hidden(self) -> dict[str, int]:
        """Facts held back, by reason, as the warnings count them: `{"open_conflict": 2}` when two
        facts wait for a conflict to be resolved, `{}` when nothing was held back. With
        `is_empty`, it tells "nothing known" (`{}`) from "known but held back"."""
        counts: dict[str, int] = {}
        for warning in self.warnings:
            m = _HIDDEN.match(warning)
            if m is not None:
                counts[m.group("reason")] = counts.get(m.group("reason"), 0) + int(m.group("n"))
        return counts


class TraceDecision(_Out, frozen=True, kw_only=True):
    item_type: str
    item_id: UUID
    decision: Decision
    reason_code: ReasonCode
    tokens: int
    rank: int | None = None
    score: float | None = None
    similarity: float | None = None
    text_rank: float | None = None
    recency: float | None = None
    cosine_distance: float | None = None


class Inspection(_Out, frozen=True, kw_only=True):
    trace_id: UUID
    project_id: str
    subject_id: str
    query: str
    created_at: datetime
    budget_tokens: int
    used_tokens: int
    status: PacketStatus
    decisions: list[TraceDecision]
    warnings: list[str] = msgspec.field(default_factory=list)
    empty_reason: str | None = None
    # The profile that built the traced packet; None from a server without context profiles.
    profile: str | None = None
    # Time travel: the instant the packet was built for (None: created_at) and the trace a
    # replay replayed; the request's include_episodes and the recall floor in force.
    as_of: datetime | None = None
    replay_of: UUID | None = None
    include_episodes: bool | None = None
    recall_max_distance: float | None = None
    # What the call ranked with: the text search configuration ("english" | "simple") and the
    # hybrid score's weights (similarity, text rank, recency); None for calls logged before them.
    text_search_config: str | None = None
    weights: list[float] | None = None


class StatsOverview(_Out, frozen=True, kw_only=True):
    context_calls: int
    injection_rate: float
    hit_rate: float
    avg_used_tokens: float
    facts_active: int
    open_conflicts: int
    project_id: str | None = None
    degraded_rate: float | None = None
    facts_total: int | None = None
    events_total: int | None = None
    trace_retention_days: int | None = None


class Health(_Out, frozen=True, kw_only=True):
    status: str
    database: str | None = None
    embedder: str | None = None
    # The read replica's state (HAKI_DATABASE_READ_URL); absent without one.
    replica: dict[str, Any] | None = None


class ErrorBody(_Out, frozen=True, kw_only=True):
    code: str
    message: str
    details: dict[str, Any] | None = None


# --- time travel (docs/time-travel.md) --------------------------------------------------------


class ReplayChange(_Out, frozen=True, kw_only=True):
    """One item whose fate changed: its decision in the original call and in the replay (None:
    not a candidate there)."""

    item_type: str
    item_id: UUID
    before: TraceDecision | None = None
    after: TraceDecision | None = None


class ReplayDiff(_Out, frozen=True, kw_only=True):
    added: list[ReplayChange] = msgspec.field(default_factory=list)
    removed: list[ReplayChange] = msgspec.field(default_factory=list)
    moved: list[ReplayChange] = msgspec.field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.added or self.removed or self.moved)


class ReplayResult(_Out, frozen=True, kw_only=True):
    origin_trace_id: UUID
    as_of: datetime
    packet: ContextPacket
    diff: ReplayDiff


FactStatsOrder = str  # "never_served" | "most_served" | "most_dropped"


class FactUsage(_Out, frozen=True, kw_only=True):
    fact_id: UUID
    subject_id: str
    content: str
    served_count: int
    excluded_count: int
    over_budget_count: int
    key: str | None = None
    last_served_at: datetime | None = None


class FactStats(_Out, frozen=True, kw_only=True):
    project_id: str
    order: str
    facts: list[FactUsage]
    subject_id: str | None = None
    trace_retention_days: int | None = None


# --- extraction (POST /v1/extract) -------------------------------------------------------------


class ExtractMessage(_In, kw_only=True, omit_defaults=True):
    """One chat message to extract facts from; stored as the event `role: content`."""

    role: str  # "user" | "assistant" | "system" | "tool" | "developer"
    content: str
    occurred_at: datetime | None = None


class ExtractedFact(_Out, frozen=True, kw_only=True):
    content: str
    volatility: Volatility
    source_message: int
    fact_id: UUID | None = None  # None on a dry run
    key: str | None = None
    source_event_id: UUID | None = None
    supersedes: UUID | None = None
    conflict_set_id: UUID | None = None


class RefusedFact(_Out, frozen=True, kw_only=True):
    content: str
    reason: str  # duplicate | unknown_source_message | unknown_supersedes | supersedes_taken | ...
    message: str
    key: str | None = None


class ExtractResult(_Out, frozen=True, kw_only=True):
    written: bool
    model: str
    prompt_version: str
    events: list[EventWriteResult]
    facts: list[ExtractedFact]
    refused: list[RefusedFact]


# --- memory lifecycle: erasure, listing, export ------------------------------------------------


class Event(_Out, frozen=True, kw_only=True):
    event_id: UUID
    project_id: str
    subject_id: str
    content: str
    occurred_at: datetime
    recorded_at: datetime
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class EventPage(_Out, frozen=True, kw_only=True):
    events: list[Event]
    next_cursor: str | None = None


class SubjectSummary(_Out, frozen=True, kw_only=True):
    subject_id: str
    facts: int
    events: int
    last_write_at: datetime


class SubjectPage(_Out, frozen=True, kw_only=True):
    subjects: list[SubjectSummary]
    next_cursor: str | None = None


class SubjectErasure(_Out, frozen=True, kw_only=True):
    """What DELETE /v1/subjects/{subject_id} removed, per kind."""

    project_id: str
    subject_id: str
    erased_at: datetime
    facts: int
    events: int
    conflict_sets: int
    conflict_members: int
    context_calls: int
    decisions: int
    idempotency_keys: int


class FactErasure(_Out, frozen=True, kw_only=True):
    fact_id: UUID
    erased_at: datetime
    conflict_members: int
    conflict_sets_resolved: int
    conflict_sets: int
    supersedes_unlinked: int
    decisions: int
    # The erased item's subject. Required of the server; None only from one that predates it.
    subject_id: str | None = None
    # The Idempotency-Key records naming it that went with it (0 from a server that predates it).
    idempotency_keys: int = 0


class EventErasure(_Out, frozen=True, kw_only=True):
    event_id: UUID
    erased_at: datetime
    facts_unlinked: int
    decisions: int
    subject_id: str | None = None  # as in FactErasure
    idempotency_keys: int = 0  # as in FactErasure


# --- webhooks (docs/webhooks.md) ---------------------------------------------------------------

WebhookEventKind = str  # conflict.opened | conflict.resolved | fact.superseded | fact.retracted |
#                         subject.erased | extraction.completed
DeliveryStatus = str  # "pending" | "delivered" | "dead"


class Webhook(_Out, frozen=True, kw_only=True):
    """A subscription of a project: what `create_webhook` made, without its secret."""

    webhook_id: UUID
    project_id: str
    url: str
    events: list[WebhookEventKind]
    include_content: bool
    created_at: datetime


class WebhookCreated(Webhook, frozen=True, kw_only=True):
    """The new webhook with its signing secret (`whsec_...`), shown this once: keep it to verify
    deliveries (`haki_client.webhooks.verify_signature`)."""

    secret: str


class WebhookSummary(Webhook, frozen=True, kw_only=True):
    """A webhook with its deliveries counted by status (`dead`: the dead letters)."""

    pending: int
    delivered: int
    dead: int
    last_attempt_at: datetime | None = None
    last_status: int | None = None


class WebhookList(_Out, frozen=True, kw_only=True):
    webhooks: list[WebhookSummary]


class WebhookDeleted(_Out, frozen=True, kw_only=True):
    webhook_id: UUID
    deleted: bool


class WebhookDelivery(_Out, frozen=True, kw_only=True):
    event_id: UUID  # the same at every attempt: `Haki-Event-Id`
    type: WebhookEventKind
    subject_id: str
    status: DeliveryStatus
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    last_attempt_at: datetime | None = None
    last_status: int | None = None
    last_error: str | None = None
    delivered_at: datetime | None = None


class WebhookDeliveryList(_Out, frozen=True, kw_only=True):
    deliveries: list[WebhookDelivery]
