"""Request and response shapes of the HTTP contract (docs/spec/api.md).

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

from service.constants import (
    EXTRACT_MAX_MESSAGES,
    MAX_BATCH,
    MAX_CONTENT_CHARS,
    MAX_QUERY_CHARS,
    MAX_SPAN_SECONDS,
)
from service.scope_id import NO_NUL, ScopeId
from service.settings import ContextProfile, TextSearchConfig

# The call log stores budget_tokens as a bigint.
MAX_BUDGET_TOKENS = 2**63 - 1

# A scope id's bounds are ScopeId's (service/scope_id.py); each field gives its own description.
# Examples (Swagger UI's "Try it out" fills bodies from them): the project of the README's
# quick start (`haki keys create demo`), its subject, and one id.
EXAMPLE_ID = "0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f"
ProjectId = Annotated[
    ScopeId,
    Meta(description="Project (tenant) id; the API key must belong to this project.", examples=["demo"]),
]
# The body's `project_id` may be omitted: the key already names its project. Omitted, it decodes
# as KEY_PROJECT ("", by `default_factory=str`: a factory, so that the OpenAPI shows no default
# "" that the server would refuse) and the handler puts the key's project there
# (service/api/deps.py in_key_project); an explicit "" is still refused by min_length.
KEY_PROJECT = ""
ProjectIdOrKey = Annotated[
    ScopeId,
    Meta(
        description="Project (tenant) id. Optional: omitted, it is the API key's project; another "
        "project than the key's is a 403 `forbidden`.",
        examples=["demo"],
    ),
]
SubjectId = Annotated[
    ScopeId,
    Meta(description="Subject the memory is about (a user, a customer, a repository).", examples=["alice"]),
]
Content = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        pattern=NO_NUL,
        description="The memory text, 1..8000 characters.",
        examples=["Alice works at Acme as a data engineer."],
    ),
]
Timestamp = Annotated[
    datetime,
    Meta(tz=True, description="RFC 3339 timestamp with an offset.", examples=["2026-11-20T10:00:00Z"]),
]
FactStatus = Literal["active", "superseded", "retracted"]
Profile = Annotated[
    ContextProfile,
    Meta(
        description="`unified` (one ranking and one budget for facts and episodes) or `facts_first` "
        "(docs/spec/context-assembler.md exactly: facts first, episodes with what is left)."
    ),
]
Volatility = Literal["stable", "volatile"]

# Field types shared by several Structs: one description each, so the schema reads the same
# wherever the field appears.
# What a fact is worth (docs/time-travel.md), counted from the stored traces of context calls
# made at the current instant (as-of calls and replays are not counted).
ServedCount = Annotated[int, Meta(description="Context calls that served the fact.")]
LastServedAt = Annotated[
    datetime | None, Meta(description="When a context call last served the fact; null: never.")
]
ExcludedCount = Annotated[
    int,
    Meta(
        description="Context calls that ranked the fact as a candidate but left it out: "
        "`over_budget` or `below_relevance_floor`."
    ),
]
AsOf = (
    Annotated[
        datetime,
        Meta(
            tz=True,
            description="RFC 3339 instant, not in the future: build the packet the memory would have "
            "given then (facts believed then, validity, staleness and recency at that instant, the "
            "conflicts open then, the events held then). Data erased since cannot come back. Absent "
            "or null: now.",
            examples=[None],
        ),
    ]
    | None
)
FactId = Annotated[
    UUID, Meta(description="Fact id (UUIDv7: ids sort by creation time).", examples=[EXAMPLE_ID])
]
EventId = Annotated[
    UUID, Meta(description="Event id (UUIDv7: ids sort by creation time).", examples=[EXAMPLE_ID])
]
ConflictSetId = Annotated[UUID, Meta(description="Conflict set id.", examples=[EXAMPLE_ID])]
TraceId = Annotated[
    UUID,
    Meta(
        description="Id of the context call; GET /v1/inspect/{trace_id} explains it.", examples=[EXAMPLE_ID]
    ),
]
ScopeProject = Annotated[str, Meta(description="Project (tenant) id.", examples=["demo"])]
ScopeSubject = Annotated[str, Meta(description="Subject id the memory is about.", examples=["alice"])]
MemoryText = Annotated[
    str,
    Meta(description="The memory text, as written.", examples=["Alice works at Acme as a data engineer."]),
]
Metadata = Annotated[
    dict[str, Any],
    Meta(description="Free-form JSON object, returned as written.", examples=[{"source": "crm"}]),
]
MetadataIn = Annotated[
    dict[str, Any] | None,
    Meta(description="Free-form JSON object, returned as written.", examples=[{"source": "crm"}]),
]
SourceEventId = Annotated[UUID | None, Meta(description="The event this fact was extracted from, if any.")]
ValidFrom = Annotated[
    datetime | None,
    Meta(description="Start of business validity (when the fact became true); null: unknown."),
]
ValidTo = Annotated[
    datetime | None, Meta(description="End of business validity; null: still valid (open-ended).")
]
RecordedFrom = Annotated[
    datetime, Meta(description="Transaction time: when the service recorded the fact (set by the server).")
]
Tokens = Annotated[int, Meta(description="Estimated tokens of the content: max(1, len(content) // 4).")]
Score = Annotated[
    float,
    Meta(description="Hybrid score (similarity, full-text rank and recency; the weights may change)."),
]
BudgetTokens = Annotated[int, Meta(description="Token ceiling the call asked for.")]
UsedTokens = Annotated[int, Meta(description="Tokens taken by the served facts and episodes.")]
PacketStatus = Annotated[
    Literal["ok", "degraded"], Meta(description="`degraded` whenever `warnings` is not empty.")
]
NextCursor = Annotated[
    str | None, Meta(description="Pass as `cursor` for the next page; null on the last page.")
]
Warnings = Annotated[
    list[str],
    Meta(
        description="Machine-readable prefix, a colon, then prose: `open_conflict: ...`, "
        "`volatility_expired: ...`, `embedding_unavailable: ...`."
    ),
]


ErasedAt = Annotated[datetime, Meta(description="When the erasure committed.")]


# The window of the figures counted from traces.
TraceRetentionDays = Annotated[
    int,
    Meta(
        description="HAKI_TRACE_RETENTION_DAYS: the figures counted from context traces cover the "
        "calls of the last this many days (older traces are purged, within one purge interval); "
        "0: traces are kept for ever and every call logged counts."
    ),
]


class Request(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body."""


class Response(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every response body."""


class ItemResponse(Response, frozen=True, kw_only=True, gc=False):
    """Base of a response Struct that a context call makes one of per item (a packet's fact or
    episode, a trace decision): it holds no container, so the garbage collector need not track
    it (service/context/model.py, Candidate)."""


class ScopedRequest(Request, kw_only=True):
    """Base of a request body about one subject's memory: its scope's two fields come first."""

    project_id: ProjectIdOrKey = msgspec.field(default_factory=str)
    subject_id: SubjectId


# --- facts -----------------------------------------------------------------------------------


class FactIn(Request):
    content: Content
    key: (
        Annotated[
            ScopeId,
            Meta(
                description="Optional slot name (employer, city...). Two active facts of one scope with "
                "the same key and different content open a ConflictSet.",
                examples=["employer"],
            ),
        ]
        | None
    ) = None
    valid_from: Annotated[
        Timestamp | None,
        Meta(
            description="Start of business validity (when the fact became true); omit if unknown.",
            examples=["2026-03-01T00:00:00Z"],
        ),
    ] = None
    valid_to: Annotated[
        Timestamp | None,
        Meta(
            description="End of business validity; must be after valid_from. Omit: open-ended.",
            examples=[None],
        ),
    ] = None
    volatility: Annotated[
        Volatility, Meta(description="A volatile fact goes stale after stale_after_seconds.")
    ] = "stable"
    stale_after_seconds: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_SPAN_SECONDS,
                description="Volatile facts only: seconds after coalesce(valid_from, recorded_from) "
                "at which the fact is stale. Default from HAKI_VOLATILE_STALE_AFTER_SECONDS.",
                examples=[None],
            ),
        ]
        | None
    ) = None
    supersedes: Annotated[
        UUID | None,
        Meta(description="An active fact of the same scope that this fact replaces.", examples=[None]),
    ] = None
    source_event_id: Annotated[
        UUID | None,
        Meta(description="The event of the same scope this fact was extracted from.", examples=[None]),
    ] = None
    metadata: MetadataIn = None


class WriteFactsRequest(ScopedRequest, kw_only=True):
    facts: Annotated[
        list[FactIn],
        Meta(min_length=1, max_length=MAX_BATCH, description="1..1000 facts, written atomically."),
    ]


class FactWriteResult(Response, frozen=True, kw_only=True):
    fact_id: FactId
    status: Annotated[FactStatus, Meta(description="Status of the new fact (always `active`).")]
    conflict_set_id: Annotated[
        UUID | None,
        Meta(description="The open ConflictSet this fact landed in (same key, other content); else null."),
    ] = None


class WriteFactsResponse(Response, frozen=True, kw_only=True):
    facts: Annotated[list[FactWriteResult], Meta(description="One result per written fact, in input order.")]


class Fact(Response, frozen=True, kw_only=True):
    fact_id: FactId
    project_id: ScopeProject
    subject_id: ScopeSubject
    content: MemoryText
    key: Annotated[str | None, Meta(description="Slot name used for conflict detection, if any.")]
    status: Annotated[
        FactStatus,
        Meta(description="`active`, `superseded` (replaced or lost a conflict) or `retracted`."),
    ]
    valid_from: ValidFrom
    valid_to: ValidTo
    recorded_from: RecordedFrom
    volatility: Annotated[Volatility, Meta(description="`volatile` facts go stale after a while.")]
    stale_after_seconds: Annotated[
        int | None, Meta(description="Volatile facts: seconds until stale; null for stable facts.")
    ]
    supersedes: Annotated[UUID | None, Meta(description="The fact this one replaced, if any.")]
    source_event_id: SourceEventId
    metadata: Metadata
    conflict_set_id: Annotated[
        UUID | None, Meta(description="The open ConflictSet holding this fact; null when none.")
    ]
    recorded_to: Annotated[
        datetime | None,
        Meta(
            description="Transaction time: when the fact stopped being believed (superseded, "
            "retracted, or lost a conflict resolution); null while active."
        ),
    ] = None
    served_count: ServedCount = 0
    last_served_at: LastServedAt = None
    excluded_count: ExcludedCount = 0


class FactPage(Response, frozen=True, kw_only=True):
    facts: Annotated[list[Fact], Meta(description="One page of facts in id (creation) order.")]
    next_cursor: NextCursor = None


class PatchFactRequest(Request):
    status: Annotated[
        Literal["retracted"] | None,
        Meta(
            description="Only `retracted`: the fact is kept, no longer served (DELETE erases it).",
            examples=["retracted"],
        ),
    ] = None
    valid_to: Annotated[
        Timestamp | None,
        Meta(description="End of business validity; must be after valid_from.", examples=[None]),
    ] = None


# --- events ----------------------------------------------------------------------------------


class EventIn(Request):
    content: Content
    occurred_at: Annotated[
        Timestamp,
        Meta(description="When it happened (RFC 3339 with an offset).", examples=["2026-11-20T10:00:00Z"]),
    ]
    metadata: MetadataIn = None


class WriteEventsRequest(ScopedRequest, kw_only=True):
    events: Annotated[
        list[EventIn],
        Meta(min_length=1, max_length=MAX_BATCH, description="1..1000 events, written atomically."),
    ]


class EventWriteResult(Response, frozen=True, kw_only=True):
    event_id: EventId


class WriteEventsResponse(Response, frozen=True, kw_only=True):
    events: Annotated[
        list[EventWriteResult], Meta(description="One result per written event, in input order.")
    ]


# --- conflicts -------------------------------------------------------------------------------


class ConflictMember(Response, frozen=True, kw_only=True):
    fact_id: FactId
    content: MemoryText
    status: Annotated[FactStatus, Meta(description="The member fact's current status.")]
    valid_from: ValidFrom
    recorded_from: RecordedFrom


class ConflictSet(Response, frozen=True, kw_only=True):
    conflict_set_id: ConflictSetId
    project_id: ScopeProject
    subject_id: ScopeSubject
    key: Annotated[str, Meta(description="The slot name the member facts disagree on.")]
    status: Annotated[
        Literal["open", "resolved"],
        Meta(description="`open`: members are blocked from context until resolved."),
    ]
    created_at: Annotated[datetime, Meta(description="When the conflict was detected.")]
    resolved_at: Annotated[datetime | None, Meta(description="When it was resolved; null while open.")]
    members: Annotated[list[ConflictMember], Meta(description="The facts in disagreement.")]


class ConflictList(Response, frozen=True, kw_only=True):
    conflicts: Annotated[list[ConflictSet], Meta(description="Conflict sets, newest first.")]
    next_cursor: NextCursor = None


class ResolveConflictRequest(Request):
    keep: Annotated[
        list[UUID],
        Meta(
            min_length=1,
            max_length=MAX_BATCH,
            description="Members that stay active; every other member becomes superseded.",
            examples=[[EXAMPLE_ID]],
        ),
    ]


# --- context ---------------------------------------------------------------------------------


class ContextRequest(ScopedRequest, kw_only=True):
    query: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=MAX_QUERY_CHARS,
            pattern=NO_NUL,
            description="What the agent is about to answer, 1..4000 characters.",
            examples=["Where does Alice work?"],
        ),
    ]
    budget_tokens: Annotated[
        int,
        Meta(
            ge=1,
            # The call log stores it as a bigint: a larger "positive integer" used to be a 500.
            le=MAX_BUDGET_TOKENS,
            # Litestar publishes `le`/`ge` as floats (float(2^63-1) is 2^63, which the server
            # refuses): the schema gets the exact integers through `schema_extra`.
            extra_json_schema={"extra": {"maximum": MAX_BUDGET_TOKENS, "minimum": 1}},
            description="Token ceiling of the packet (estimated as len(text)//4, at least 1 per item). "
            "Anything but a positive integer (up to 2^63-1) is a 400 budget_exceeded.",
        ),
    ] = 900
    include_episodes: Annotated[
        bool, Meta(description="Serve dated events (episodes) too; false serves and traces facts only.")
    ] = True
    profile: Annotated[
        ContextProfile | None,
        Meta(
            description="The rules that build the packet: `unified` (one ranking and one budget for "
            "facts and episodes) or `facts_first` (facts first, episodes with what is left). "
            "Absent or null: the deployment's HAKI_CONTEXT_PROFILE (default `unified`)."
        ),
    ] = None
    as_of: AsOf = None


class PacketFact(ItemResponse, frozen=True, kw_only=True):
    fact_id: FactId
    content: MemoryText
    score: Score
    tokens: Tokens
    reason_code: Annotated[
        Literal["packed", "multi_hop_expansion"],
        Meta(
            description="`packed` (ranked by score; under `unified`, also a fact served in place of "
            "its turn's episode, at the episode's score) or `multi_hop_expansion` (linked by an entity)."
        ),
    ]
    valid_from: ValidFrom
    valid_to: ValidTo
    recorded_from: RecordedFrom
    source_event_id: SourceEventId


class PacketEpisode(ItemResponse, frozen=True, kw_only=True):
    event_id: EventId
    content: MemoryText
    occurred_at: Annotated[datetime, Meta(description="When the event happened.")]
    score: Annotated[
        float,
        Meta(
            description="`unified`: the hybrid score, as for facts (recency from occurred_at); "
            "`facts_first`: the cosine similarity of the event to the query."
        ),
    ]
    tokens: Tokens


class ContextPacket(Response, frozen=True, kw_only=True):
    trace_id: TraceId
    profile: Profile
    status: PacketStatus
    warnings: Warnings
    empty_reason: Annotated[
        Literal["no_relevant_memory"] | None,
        Meta(
            description="`no_relevant_memory` when the recall gate excluded every candidate; "
            "null otherwise (an empty packet is not a warning)."
        ),
    ]
    budget_tokens: BudgetTokens
    used_tokens: UsedTokens
    facts: Annotated[list[PacketFact], Meta(description="Served facts, in pack order.")]
    episodes: Annotated[list[PacketEpisode], Meta(description="Served dated events, in pack order.")]


class Decision(ItemResponse, frozen=True, kw_only=True):
    item_type: Annotated[Literal["fact", "episode"], Meta(description="What the decision is about.")]
    item_id: Annotated[UUID, Meta(description="The fact_id or event_id.")]
    decision: Annotated[
        Literal["included", "excluded", "blocked"],
        Meta(description="`included` (served), `excluded` (ranked out) or `blocked` (a hard rule)."),
    ]
    reason_code: Annotated[
        str,
        Meta(
            description="`packed`, `multi_hop_expansion` (included; `stand_in` in traces made before "
            "2026-12-07); `over_budget`, "
            "`below_relevance_floor`, `already_served` (excluded: `unified` only, the item's event "
            "or the same text is already in the packet), `replaced_by_stand_in` (excluded: "
            "`unified` only, a cheaper fact of the episode's turn was packed at its rank); "
            "`conflict_open`, `volatility_expired` (blocked)."
        ),
    ]
    rank: Annotated[int | None, Meta(description="1-based position in score order; null when blocked.")]
    score: Annotated[
        float | None,
        Meta(
            description="The hybrid score that ranked the item; null when blocked. A `unified` "
            "multi_hop_expansion ranks at the score of the best kept item naming its entity when "
            "that is higher than its own (similarity, text_rank and recency stay its own); one that "
            "is not served keeps the reason it was left out for. A fact packed in place of an episode "
            "carries that episode's score (the `replaced_by_stand_in` decision beside it, at the same "
            "rank); its other parts stay its own."
        ),
    ]
    similarity: Annotated[
        float | None, Meta(description="1 - cosine distance to the query; null without an embedding.")
    ]
    text_rank: Annotated[
        float | None,
        Meta(
            description="Full-text rank in [0, 1]: `unified`, the share of the query's idf the text "
            "matches; `facts_first`, normalised ts_rank_cd, and null for episodes."
        ),
    ]
    recency: Annotated[
        float | None,
        Meta(description="exp(-age / 30 days), in (0, 1]; null for `facts_first` episodes."),
    ]
    cosine_distance: Annotated[
        float | None, Meta(description="Cosine distance to the query (what the recall gate checks).")
    ]
    tokens: Tokens


class Inspection(Response, frozen=True, kw_only=True):
    trace_id: TraceId
    profile: Profile
    project_id: ScopeProject
    subject_id: ScopeSubject
    query: Annotated[str, Meta(description="The query of the call.")]
    created_at: Annotated[datetime, Meta(description="When the call was made.")]
    budget_tokens: BudgetTokens
    used_tokens: UsedTokens
    status: PacketStatus
    warnings: Warnings
    empty_reason: Annotated[str | None, Meta(description="The packet's empty_reason.")]
    decisions: Annotated[
        list[Decision], Meta(description="Every decision, in the order the assembler made them.")
    ]
    include_episodes: Annotated[
        bool | None,
        Meta(description="The request's include_episodes; null for calls logged before migration 0012."),
    ] = None
    recall_max_distance: Annotated[
        float | None,
        Meta(description="The recall floor in force (0: none); null for calls logged before migration 0012."),
    ] = None
    text_search_config: Annotated[
        TextSearchConfig | None,
        Meta(
            description="The text search configuration the call ranked with (HAKI_TEXT_SEARCH_CONFIG; "
            "the `unified` text side); null for calls logged before migration 0019."
        ),
    ] = None
    weights: Annotated[
        list[float] | None,
        Meta(
            description="The hybrid score's weights the call ranked with: similarity, text rank, "
            "recency; null for calls logged before migration 0019."
        ),
    ] = None
    as_of: Annotated[
        datetime | None,
        Meta(description="The instant the packet was built for; null: created_at (a call at now)."),
    ] = None
    replay_of: Annotated[
        UUID | None, Meta(description="The trace this call replayed (POST /v1/inspect/{id}/replay).")
    ] = None


class StatsOverview(Response, frozen=True, kw_only=True):
    project_id: ScopeProject
    context_calls: Annotated[int, Meta(description="Context calls logged for the project.")]
    injection_rate: Annotated[
        float, Meta(description="Share of context calls that served at least one fact.")
    ]
    hit_rate: Annotated[float, Meta(description="Same value as injection_rate (kept for old clients).")]
    avg_used_tokens: Annotated[float, Meta(description="Mean used_tokens per context call.")]
    degraded_rate: Annotated[float, Meta(description="Share of context calls answered `degraded`.")]
    facts_active: Annotated[int, Meta(description="Facts with status `active`.")]
    facts_total: Annotated[int, Meta(description="Facts of any status.")]
    events_total: Annotated[int, Meta(description="Events written.")]
    open_conflicts: Annotated[int, Meta(description="Conflict sets still open.")]
    trace_retention_days: TraceRetentionDays = 0


class Health(Response, frozen=True, kw_only=True, omit_defaults=True):
    status: Annotated[Literal["ok"], Meta(description="`ok` once the service can answer.")]
    database: Annotated[Literal["ok"], Meta(description="`ok` once the database answers.")]
    embedder: Annotated[str, Meta(description="The embedder in use (`local:...`, `openai:...`, `hash`).")]
    replica: Annotated[
        ReplicaHealth | None,
        Meta(description="The read replica (HAKI_DATABASE_READ_URL); absent when none is configured."),
    ] = None


class ReplicaHealth(Response, frozen=True, kw_only=True):
    """The read replica as the last check found it (service/db/replica.py). Its state never fails
    the probe: the primary serves every read the replica cannot."""

    status: Annotated[
        Literal["ok", "lagging", "down", "starting", "not_standby"],
        Meta(
            description="`ok`: serving reads; `lagging`: behind the primary by more than "
            "HAKI_READ_MAX_LAG_MS; `down`: not reachable; `starting`: not checked yet; "
            "`not_standby`: the server is not in recovery (promoted), so not used."
        ),
    ]
    serving_reads: Annotated[bool, Meta(description="Reads go to the replica now.")]
    lag_ms: Annotated[
        float | None,
        Meta(
            description="Replay lag behind the primary's WAL at the last check (0.2 s resolution); "
            "null unless `status` is `ok` or `lagging`."
        ),
    ]
    max_lag_ms: Annotated[int, Meta(description="HAKI_READ_MAX_LAG_MS.")]


# --- time travel (docs/time-travel.md) --------------------------------------------------------


class ReplayRequest(Request):
    """Overrides of a replay; every field absent or null keeps the original call's value."""

    budget_tokens: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=2**63 - 1,
                description="Token ceiling of the replayed packet (default: the original's).",
            ),
        ]
        | None
    ) = None
    profile: Annotated[
        ContextProfile | None,
        Meta(description="`unified` or `facts_first` (default: the original call's profile)."),
    ] = None
    recall_max_distance: (
        Annotated[
            float,
            Meta(
                ge=0.0,
                le=2.0,
                # Litestar drops a falsy bound from the schema: `minimum` 0 comes through `schema_extra`.
                extra_json_schema={"extra": {"minimum": 0.0}},
                description="Recall floor: candidates farther than this cosine distance are excluded "
                "`below_relevance_floor`; 0 turns the floor off (default: the original call's).",
            ),
        ]
        | None
    ) = None
    as_of: (
        Annotated[
            datetime,
            Meta(
                tz=True,
                description="The instant to rebuild the packet for, not in the future (default: the "
                "original call's own instant, its as_of or created_at; send the current time to see "
                "what the memory gives now).",
            ),
        ]
        | None
    ) = None


class ReplayChange(Response, frozen=True, kw_only=True):
    item_type: Annotated[Literal["fact", "episode"], Meta(description="What changed.")]
    item_id: Annotated[UUID, Meta(description="The fact_id or event_id.")]
    before: Annotated[
        Decision | None, Meta(description="The original call's decision; null: not a candidate then.")
    ]
    after: Annotated[
        Decision | None, Meta(description="The replay's decision; null: not a candidate any more.")
    ]


class ReplayDiff(Response, frozen=True, kw_only=True):
    added: Annotated[list[ReplayChange], Meta(description="Served by the replay, not by the original call.")]
    removed: Annotated[
        list[ReplayChange], Meta(description="Served by the original call, not by the replay.")
    ]
    moved: Annotated[
        list[ReplayChange],
        Meta(description="Decided by both, served by both or by neither, with another rank or reason_code."),
    ]


class ReplayResponse(Response, frozen=True, kw_only=True):
    origin_trace_id: Annotated[UUID, Meta(description="The trace that was replayed.")]
    as_of: Annotated[datetime, Meta(description="The instant the replay rebuilt the packet for.")]
    packet: Annotated[
        ContextPacket,
        Meta(description="The rebuilt packet; its trace_id is the replay's own trace (replay_of set)."),
    ]
    diff: Annotated[ReplayDiff, Meta(description="The replay's decisions against the original's.")]


FactStatsOrder = Literal["never_served", "most_served", "most_dropped"]


class FactUsage(Response, frozen=True, kw_only=True):
    fact_id: FactId
    subject_id: ScopeSubject
    content: MemoryText
    key: Annotated[str | None, Meta(description="Slot name, if any.")]
    served_count: ServedCount
    last_served_at: LastServedAt
    excluded_count: ExcludedCount
    over_budget_count: Annotated[
        int, Meta(description="Context calls that left the fact out for the budget (`over_budget`).")
    ]


class FactStats(Response, frozen=True, kw_only=True):
    project_id: ScopeProject
    subject_id: Annotated[str | None, Meta(description="The subject asked for; null: the whole project.")]
    order: Annotated[FactStatsOrder, Meta(description="The order asked for.")]
    facts: Annotated[list[FactUsage], Meta(description="Active facts, in that order.")]
    trace_retention_days: TraceRetentionDays = 0


# --- extraction (POST /v1/extract) ---------------------------------------------------

MessageRole = Literal["user", "assistant", "system", "tool", "developer"]
# A message is stored as the event `role: content`; the longest prefix ("assistant: ", 11
# characters) must still fit the event's MAX_CONTENT_CHARS.
MAX_MESSAGE_CHARS = MAX_CONTENT_CHARS - 16


class ExtractMessage(Request):
    role: Annotated[MessageRole, Meta(description="Who said it: `user`, `assistant`, `system`, `tool`...")]
    content: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=MAX_MESSAGE_CHARS,
            pattern=NO_NUL,
            description=f"The message text, 1..{MAX_MESSAGE_CHARS} characters; stored as the event "
            "`role: content`.",
            examples=["I left Acme, I'm a data engineer at Globex now."],
        ),
    ]
    occurred_at: Annotated[
        Timestamp | None,
        Meta(
            description="When it was said (RFC 3339 with an offset). Omitted: the time of the request "
            "(plus i microseconds for the i-th message, so the conversation keeps its order).",
            examples=[None],
        ),
    ] = None


class ExtractRequest(ScopedRequest, kw_only=True):
    messages: Annotated[
        list[ExtractMessage],
        Meta(
            min_length=1,
            max_length=EXTRACT_MAX_MESSAGES,
            description=f"1..{EXTRACT_MAX_MESSAGES} chat messages, oldest first.",
        ),
    ]
    write: Annotated[
        bool,
        Meta(
            description="false: a dry run; the model is asked, the answer is checked, and nothing "
            "is written, not even the events."
        ),
    ] = True


class ExtractedFact(Response, frozen=True, kw_only=True):
    fact_id: Annotated[UUID | None, Meta(description="The written fact; null on a dry run.")]
    content: MemoryText
    key: Annotated[str | None, Meta(description="Slot name the model gave, if any.")]
    volatility: Annotated[Volatility, Meta(description="`stable` or `volatile`, as the model judged.")]
    source_message: Annotated[int, Meta(description="0-based index of the message it came from.")]
    source_event_id: Annotated[
        UUID | None, Meta(description="The event written for that message; null on a dry run.")
    ]
    supersedes: Annotated[UUID | None, Meta(description="The known fact it replaces, if any.")]
    conflict_set_id: Annotated[
        UUID | None,
        Meta(description="The open ConflictSet the fact landed in (same key, other content); else null."),
    ] = None


RefusalReason = Literal[
    "duplicate",
    "unknown_source_message",
    "unknown_supersedes",
    "supersedes_taken",
    "supersedes_future",
    "invalid_content",
    "invalid_key",
    "batch_full",
]


class RefusedFact(Response, frozen=True, kw_only=True):
    content: Annotated[
        str,
        Meta(description="What the model proposed (cut to 200 characters; a NUL shown as U+FFFD)."),
    ]
    key: Annotated[str | None, Meta(description="The key it proposed, if any (cut as `content`).")]
    reason: Annotated[
        RefusalReason,
        Meta(
            description="`duplicate` (an active fact of the scope says the same, word for word; or "
            "a fact shown to the model or an earlier proposal, ignoring case and spacing), "
            "`unknown_source_message` / `unknown_supersedes` (an index out of range), "
            "`supersedes_taken` (an earlier proposal already replaces that fact), "
            "`supersedes_future` (that fact's `valid_from` is not before now, when the new fact "
            "starts), `invalid_content` / `invalid_key` (empty, too long, or NUL), `batch_full` "
            f"(the proposals before it already make {MAX_BATCH} facts, the most one write takes)."
        ),
    ]
    message: Annotated[str, Meta(description="Why, for humans.")]


class ExtractResponse(Response, frozen=True, kw_only=True):
    written: Annotated[bool, Meta(description="false on a dry run (`write: false`).")]
    model: Annotated[str, Meta(description="The model that answered (HAKI_EXTRACT_MODEL).")]
    prompt_version: Annotated[str, Meta(description="Version of the extraction prompt used.")]
    events: Annotated[
        list[EventWriteResult],
        Meta(description="One event per message, in input order; empty on a dry run."),
    ]
    facts: Annotated[
        list[ExtractedFact],
        Meta(description="Facts written (or, on a dry run, that would be), in the model's order."),
    ]
    refused: Annotated[
        list[RefusedFact], Meta(description="Facts the model proposed that Haki refused, and why.")
    ]


# --- memory lifecycle (erasure, listing, export) -------------------------------------


class Event(Response, frozen=True, kw_only=True):
    event_id: EventId
    project_id: ScopeProject
    subject_id: ScopeSubject
    content: MemoryText
    occurred_at: Annotated[datetime, Meta(description="When it happened.")]
    recorded_at: Annotated[datetime, Meta(description="When the service recorded it (set by the server).")]
    metadata: Metadata


class EventPage(Response, frozen=True, kw_only=True):
    events: Annotated[list[Event], Meta(description="One page of events in id (creation) order.")]
    next_cursor: NextCursor = None


class SubjectSummary(Response, frozen=True, kw_only=True):
    subject_id: ScopeSubject
    facts: Annotated[int, Meta(description="Facts of the subject, any status.")]
    events: Annotated[int, Meta(description="Events of the subject.")]
    last_write_at: Annotated[
        datetime, Meta(description="When a fact or an event of the subject was last written.")
    ]


class SubjectPage(Response, frozen=True, kw_only=True):
    subjects: Annotated[
        list[SubjectSummary], Meta(description="One page of the project's subjects, in id order.")
    ]
    next_cursor: NextCursor = None


class SubjectErasure(Response, frozen=True, kw_only=True):
    project_id: ScopeProject
    subject_id: ScopeSubject
    erased_at: ErasedAt
    facts: Annotated[int, Meta(description="Facts erased, any status.")]
    events: Annotated[int, Meta(description="Events erased.")]
    conflict_sets: Annotated[int, Meta(description="Conflict sets erased.")]
    conflict_members: Annotated[int, Meta(description="Conflict memberships erased.")]
    context_calls: Annotated[int, Meta(description="Context calls (traces) erased.")]
    decisions: Annotated[int, Meta(description="Decisions of those traces erased.")]
    idempotency_keys: Annotated[
        int, Meta(description="Idempotency-Key records whose stored response named the subject's memories.")
    ]


class FactErasure(Response, frozen=True, kw_only=True):
    fact_id: FactId
    subject_id: ScopeSubject
    erased_at: ErasedAt
    conflict_members: Annotated[int, Meta(description="Conflict memberships removed.")]
    conflict_sets_resolved: Annotated[
        int, Meta(description="Open conflict sets left with fewer than two active members, now resolved.")
    ]
    conflict_sets: Annotated[int, Meta(description="Conflict sets left empty, erased.")]
    supersedes_unlinked: Annotated[int, Meta(description="Facts whose `supersedes` named it, now null.")]
    decisions: Annotated[int, Meta(description="Trace decisions that named it, erased.")]
    idempotency_keys: Annotated[
        int, Meta(description="Idempotency-Key records whose stored response named it, erased.")
    ]


class EventErasure(Response, frozen=True, kw_only=True):
    event_id: EventId
    subject_id: ScopeSubject
    erased_at: ErasedAt
    facts_unlinked: Annotated[int, Meta(description="Facts whose `source_event_id` named it, now null.")]
    decisions: Annotated[int, Meta(description="Trace decisions that named it, erased.")]
    idempotency_keys: Annotated[
        int, Meta(description="Idempotency-Key records whose stored response named it, erased.")
    ]


# --- the memory browser (/ui, service/api/ui.py): rows of its pages, not JSON bodies -----------


class UiSession(msgspec.Struct, frozen=True, kw_only=True):
    """A live /ui session: the key it was opened with and the token its forms carry."""

    project_id: str
    key_id: UUID
    csrf_token: str
    expires_at: datetime


class UiSubject(msgspec.Struct, frozen=True, kw_only=True):
    """A subject as the browser lists it: counts, last write, open conflicts, last context call."""

    subject_id: str
    facts: int
    events: int
    last_write_at: datetime | None
    open_conflicts: int
    last_call_at: datetime | None


class UiSubjectPage(msgspec.Struct, frozen=True, kw_only=True):
    subjects: list[UiSubject]
    next_cursor: str | None


# --- webhooks (docs/webhooks.md) ---------------------------------------------------------------

WebhookEventKind = Literal[
    "conflict.opened",
    "conflict.resolved",
    "fact.superseded",
    "fact.retracted",
    "subject.erased",
    "extraction.completed",
]
WebhookId = Annotated[UUID, Meta(description="Webhook subscription id.")]
WebhookUrl = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=2048,
        # No control character (C0, DEL, C1): PostgreSQL text cannot hold NUL, and URL parsers
        # drop or refuse the others, so the URL called would not be the URL shown. `(?!\n)`: Python's
        # `$` also matches before a final newline.
        pattern=r"^[^\x00-\x1f\x7f-\x9f]*$(?!\n)",
        description="The receiver: an http(s) URL without control characters whose host resolves to "
        "public addresses only, or a host listed in HAKI_WEBHOOK_ALLOWED_HOSTS.",
        examples=["https://hooks.example.com/haki"],
    ),
]
WebhookEvents = Annotated[
    list[WebhookEventKind],
    Meta(min_length=1, max_length=6, description="The event kinds to deliver (1..6, each once)."),
]
DeliveryStatus = Literal["pending", "delivered", "dead"]


class CreateWebhookRequest(Request, kw_only=True):
    project_id: ProjectIdOrKey = msgspec.field(default_factory=str)
    url: WebhookUrl
    events: WebhookEvents
    include_content: Annotated[
        bool,
        Meta(
            description="Whether payloads carry memory content (the facts' texts); false: ids, keys "
            "and counts only."
        ),
    ] = False


class Webhook(Response, frozen=True, kw_only=True):
    webhook_id: WebhookId
    project_id: ScopeProject
    url: Annotated[str, Meta(description="The receiver's URL.")]
    events: Annotated[list[str], Meta(description="The event kinds delivered.")]
    include_content: Annotated[bool, Meta(description="Whether payloads carry memory content.")]
    created_at: Annotated[datetime, Meta(description="When the subscription was made.")]


class WebhookCreated(Webhook, frozen=True, kw_only=True):
    secret: Annotated[
        str,
        Meta(
            description="The signing secret (`whsec_...`), shown this once: verify each delivery's "
            "`Haki-Signature` with it (the SDKs' verify function)."
        ),
    ]


class WebhookSummary(Webhook, frozen=True, kw_only=True):
    pending: Annotated[int, Meta(description="Deliveries waiting for their first or next attempt.")]
    delivered: Annotated[int, Meta(description="Deliveries the receiver accepted (2xx), still on record.")]
    dead: Annotated[
        int, Meta(description="Dead letters: deliveries that failed HAKI_WEBHOOK_MAX_ATTEMPTS times.")
    ]
    last_attempt_at: Annotated[datetime | None, Meta(description="The last attempt; null: none yet.")]
    last_status: Annotated[
        int | None, Meta(description="The receiver's HTTP status at the last attempt; null: no answer.")
    ]


class WebhookList(Response, frozen=True, kw_only=True):
    webhooks: Annotated[list[WebhookSummary], Meta(description="The project's webhooks, oldest first.")]


class WebhookDeleted(Response, frozen=True, kw_only=True):
    webhook_id: WebhookId
    deleted: Annotated[bool, Meta(description="Always true: the webhook and its deliveries are gone.")]


class WebhookDelivery(Response, frozen=True, kw_only=True):
    event_id: Annotated[UUID, Meta(description="The event's id, the same at every attempt.")]
    type: Annotated[str, Meta(description="The event kind.")]
    subject_id: ScopeSubject
    status: Annotated[
        DeliveryStatus,
        Meta(description="`pending` (waiting), `delivered` (a 2xx answer) or `dead` (a dead letter)."),
    ]
    attempts: Annotated[int, Meta(description="Attempts made.")]
    created_at: Annotated[datetime, Meta(description="When the change committed.")]
    next_attempt_at: Annotated[datetime, Meta(description="When a pending delivery is tried next.")]
    last_attempt_at: Annotated[datetime | None, Meta(description="The last attempt; null: none yet.")]
    last_status: Annotated[
        int | None, Meta(description="The receiver's HTTP status at the last attempt; null: no answer.")
    ]
    last_error: Annotated[
        str | None, Meta(description="Why the last attempt failed (never the receiver's body).")
    ]
    delivered_at: Annotated[datetime | None, Meta(description="When the receiver accepted it.")]


class WebhookDeliveryList(Response, frozen=True, kw_only=True):
    deliveries: Annotated[
        list[WebhookDelivery], Meta(description="The webhook's deliveries, newest event first.")
    ]
