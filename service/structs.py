"""Request and response shapes of the HTTP contract (spec/API.md).

Request Structs forbid unknown fields and carry their bounds in `Meta`, so the OpenAPI schema
tells agents the limits. Response Structs are frozen and keyword-only; their field names are the
SQL aliases of the queries that fill them and the JSON keys of the contract.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec
from msgspec import Meta

from service.constants import MAX_BATCH, MAX_CONTENT_CHARS, MAX_QUERY_CHARS, MAX_SCOPE_CHARS

# PostgreSQL text cannot hold NUL; refusing it here names the field instead of failing in SQL.
_NO_NUL = r"^[^\x00]*$"

ProjectId = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_SCOPE_CHARS,
        pattern=_NO_NUL,
        description="Project (tenant) id; the API key must belong to this project.",
    ),
]
SubjectId = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_SCOPE_CHARS,
        pattern=_NO_NUL,
        description="Subject the memory is about (a user, a customer, a repository).",
    ),
]
Content = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        pattern=_NO_NUL,
        description="The memory text, 1..8000 characters.",
    ),
]
Timestamp = Annotated[datetime, Meta(tz=True, description="RFC 3339 timestamp with an offset.")]
FactStatus = Literal["active", "superseded", "retracted"]
Volatility = Literal["stable", "volatile"]


class Request(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body."""


class Response(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every response body."""


# --- facts -----------------------------------------------------------------------------------


class FactIn(Request):
    content: Content
    key: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=MAX_SCOPE_CHARS,
                pattern=_NO_NUL,
                description="Optional slot name (employer, city...). Two active facts of one scope with "
                "the same key and different content open a ConflictSet.",
            ),
        ]
        | None
    ) = None
    valid_from: Timestamp | None = None
    valid_to: Timestamp | None = None
    volatility: Annotated[
        Volatility, Meta(description="A volatile fact goes stale after stale_after_seconds.")
    ] = "stable"
    stale_after_seconds: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=100 * 365 * 24 * 3600,
                description="Volatile facts only: seconds after coalesce(valid_from, recorded_from) "
                "at which the fact is stale. Default from HAKI_VOLATILE_STALE_AFTER_SECONDS.",
            ),
        ]
        | None
    ) = None
    supersedes: Annotated[
        UUID | None, Meta(description="An active fact of the same scope that this fact replaces.")
    ] = None
    source_event_id: Annotated[
        UUID | None, Meta(description="The event of the same scope this fact was extracted from.")
    ] = None
    metadata: Annotated[
        dict[str, Any] | None, Meta(description="Free-form JSON object, returned as written.")
    ] = None


class WriteFactsRequest(Request):
    project_id: ProjectId
    subject_id: SubjectId
    facts: Annotated[
        list[FactIn],
        Meta(min_length=1, max_length=MAX_BATCH, description="1..1000 facts, written atomically."),
    ]


class FactWriteResult(Response, frozen=True, kw_only=True):
    fact_id: UUID
    status: FactStatus
    conflict_set_id: UUID | None = None


class WriteFactsResponse(Response, frozen=True, kw_only=True):
    facts: list[FactWriteResult]


class Fact(Response, frozen=True, kw_only=True):
    fact_id: UUID
    project_id: str
    subject_id: str
    content: str
    key: str | None
    status: FactStatus
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_from: datetime
    volatility: Volatility
    stale_after_seconds: int | None
    supersedes: UUID | None
    source_event_id: UUID | None
    metadata: dict[str, Any]
    conflict_set_id: UUID | None


class FactPage(Response, frozen=True, kw_only=True):
    facts: list[Fact]
    next_cursor: str | None = None


class PatchFactRequest(Request):
    status: Annotated[
        Literal["retracted"] | None, Meta(description="Only `retracted`: facts are never deleted.")
    ] = None
    valid_to: Annotated[
        Timestamp | None, Meta(description="End of business validity; must be after valid_from.")
    ] = None


# --- events ----------------------------------------------------------------------------------


class EventIn(Request):
    content: Content
    occurred_at: Timestamp
    metadata: dict[str, Any] | None = None


class WriteEventsRequest(Request):
    project_id: ProjectId
    subject_id: SubjectId
    events: Annotated[
        list[EventIn],
        Meta(min_length=1, max_length=MAX_BATCH, description="1..1000 events, written atomically."),
    ]


class EventWriteResult(Response, frozen=True, kw_only=True):
    event_id: UUID


class WriteEventsResponse(Response, frozen=True, kw_only=True):
    events: list[EventWriteResult]


# --- conflicts -------------------------------------------------------------------------------


class ConflictMember(Response, frozen=True, kw_only=True):
    fact_id: UUID
    content: str
    status: FactStatus
    valid_from: datetime | None
    recorded_from: datetime


class ConflictSet(Response, frozen=True, kw_only=True):
    conflict_set_id: UUID
    project_id: str
    subject_id: str
    key: str
    status: Literal["open", "resolved"]
    created_at: datetime
    resolved_at: datetime | None
    members: list[ConflictMember]


class ConflictList(Response, frozen=True, kw_only=True):
    conflicts: list[ConflictSet]


class ResolveConflictRequest(Request):
    keep: Annotated[
        list[UUID],
        Meta(
            min_length=1,
            max_length=MAX_BATCH,
            description="Members that stay active; every other member becomes superseded.",
        ),
    ]


# --- context ---------------------------------------------------------------------------------


class ContextRequest(Request):
    project_id: ProjectId
    subject_id: SubjectId
    query: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=MAX_QUERY_CHARS,
            pattern=_NO_NUL,
            description="What the agent is about to answer, 1..4000 characters.",
        ),
    ]
    budget_tokens: Annotated[
        int,
        Meta(
            ge=1,
            description="Token ceiling of the packet (estimated as len(text)//4, at least 1 per item). "
            "Anything but a positive integer is a 400 budget_exceeded.",
        ),
    ] = 900
    include_episodes: Annotated[bool, Meta(description="Pack the closest dated events after the facts.")] = (
        True
    )


class PacketFact(Response, frozen=True, kw_only=True):
    fact_id: UUID
    content: str
    score: float
    tokens: int
    reason_code: Literal["packed", "multi_hop_expansion"]
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_from: datetime
    source_event_id: UUID | None


class PacketEpisode(Response, frozen=True, kw_only=True):
    event_id: UUID
    content: str
    occurred_at: datetime
    score: float
    tokens: int


class ContextPacket(Response, frozen=True, kw_only=True):
    trace_id: UUID
    status: Literal["ok", "degraded"]
    warnings: list[str]
    empty_reason: Literal["no_relevant_memory"] | None
    budget_tokens: int
    used_tokens: int
    facts: list[PacketFact]
    episodes: list[PacketEpisode]


class Decision(Response, frozen=True, kw_only=True):
    item_type: Literal["fact", "episode"]
    item_id: UUID
    decision: Literal["included", "excluded", "blocked"]
    reason_code: str
    rank: int | None
    score: float | None
    similarity: float | None
    text_rank: float | None
    recency: float | None
    cosine_distance: float | None
    tokens: int


class Inspection(Response, frozen=True, kw_only=True):
    trace_id: UUID
    project_id: str
    subject_id: str
    query: str
    created_at: datetime
    budget_tokens: int
    used_tokens: int
    status: Literal["ok", "degraded"]
    warnings: list[str]
    empty_reason: str | None
    decisions: list[Decision]


class StatsOverview(Response, frozen=True, kw_only=True):
    project_id: str
    context_calls: int
    injection_rate: float
    hit_rate: float
    avg_used_tokens: float
    degraded_rate: float
    facts_active: int
    facts_total: int
    events_total: int
    open_conflicts: int


class Health(Response, frozen=True, kw_only=True):
    status: Literal["ok"]
    database: Literal["ok"]
    embedder: str
