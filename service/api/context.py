"""Read-side routes: context packets, their traces, and usage stats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from uuid import UUID

from litestar import Controller, Response, get, post
from litestar.datastructures import State
from litestar.openapi.spec import Operation, RequestBody
from litestar.params import Parameter

from service.api.deps import ERRORS, SERVER_TIMING, Deps, RouteDeps, in_key_project
from service.api.memory import ProjectQuery, SubjectQuery
from service.constants import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT
from service.context import inspection, replay
from service.context import stats as usage
from service.context.call import ContextCall
from service.db.call_runner import run_context_call
from service.db.replica import READS
from service.memory import retention
from service.observability.metrics import observe_context
from service.observability.timing import StageTimer
from service.structs import (
    ContextPacket,
    ContextRequest,
    FactStats,
    FactStatsOrder,
    Inspection,
    ReplayRequest,
    ReplayResponse,
    StatsOverview,
)


@dataclass
class OptionalBodyOperation(Operation):
    """An operation whose JSON body may be left out: Litestar marks every body `required`, and
    the replay's overrides are all optional (no body: no override)."""

    def __post_init__(self) -> None:
        if isinstance(self.request_body, RequestBody):
            self.request_body.required = False


TraceIdPath = Annotated[UUID, Parameter(description="The trace_id of a ContextPacket.")]


def server_timing(timer: StageTimer) -> str:
    return ", ".join(f"{name};dur={ms:.2f}" for name, ms in timer.ms.items())


async def post_context(
    deps: RouteDeps, data: ContextRequest, state: State, timer: StageTimer | None = None
) -> ContextPacket:
    """The route's work, for the route and the `recall` MCP tool: the packet, counted in the
    app's metrics."""
    data = in_key_project(data, deps.principal)
    deps.reads.fresh(data.project_id, data.subject_id)
    deps.principal.require(data.project_id)
    call = ContextCall.of(data, deps.settings)
    timer = StageTimer() if timer is None else timer
    packet = await run_context_call(
        deps.lease,
        deps.embedder,
        call,
        timer=timer,
        primary=deps.reads.trace_on,
        noted=deps.reads.trace_noted,
    )
    observe_context(state, timer, packet)
    return packet


async def inspect_trace(deps: RouteDeps, trace_id: UUID) -> Inspection:
    """The route's work, for the route and the `inspect` MCP tool. A trace is found by id: its
    scope is known once read, and a scope this process wrote since the standby's replay (an
    erasure of the subject or of a fact the trace names) is read again on the primary."""
    found = await inspection.inspect(deps.conn, deps.principal, trace_id)
    deps.reads.fresh(found.project_id, found.subject_id)
    return found


class ContextController(Controller):
    tags = ["context"]

    @post(
        "/v1/context",
        status_code=200,
        responses=ERRORS,
        summary="Assemble a ContextPacket under a token budget",
        description="Hybrid retrieval over the facts and dated events of one scope (cosine + full "
        "text + recency) under a token budget, by the request's `profile` or the deployment's "
        "HAKI_CONTEXT_PROFILE: `unified` (the default) ranks facts and episodes together and packs "
        "them into one budget, no turn twice, multi-hop expansion inside it; `facts_first` packs "
        "facts by decreasing score, then multi-hop expansion and the closest episodes into what is "
        "left. Every decision is traced: see GET /v1/inspect/{trace_id}. The Server-Timing header "
        "gives the time per stage.",
        response_headers=[SERVER_TIMING],
        opt={READS: True},
    )
    async def context(self, data: ContextRequest, deps: Deps, state: State) -> Response[ContextPacket]:
        timer = StageTimer()
        packet = await post_context(deps, data, state, timer)
        return Response(packet, status_code=200, headers={"Server-Timing": server_timing(timer)})

    @get(
        "/v1/inspect/{trace_id:uuid}",
        responses=ERRORS,
        summary="Every decision of one context call",
        opt={READS: True},
    )
    async def inspect(self, deps: Deps, trace_id: TraceIdPath, project_id: ProjectQuery) -> Inspection:
        return await inspect_trace(deps, trace_id)

    @get("/v1/stats/overview", responses=ERRORS, summary="Usage overview of a project", opt={READS: True})
    async def stats(self, deps: Deps, project_id: ProjectQuery) -> StatsOverview:
        deps.reads.fresh(project_id, traces=True)
        return retention.windowed(await usage.overview(deps.conn, deps.principal, project_id), deps.settings)

    @post(
        "/v1/inspect/{trace_id:uuid}/replay",
        status_code=200,
        responses=ERRORS,
        operation_class=OptionalBodyOperation,
        summary="Rebuild a traced context call, optionally with other settings, and diff it",
        description="Rebuilds the packet of a logged call from its stored query, by default as of "
        "the call's own instant with its budget, profile and recall floor; a JSON body may "
        "override `budget_tokens`, `profile`, `recall_max_distance` and `as_of` (no body: no "
        "override). Answers with the new packet and the diff against the original decisions: "
        "items added to the packet, removed from it, and moved in rank, each with both decisions. "
        "The replay is traced (its trace's `replay_of` is the origin) and not counted in the fact "
        "stats. It may differ without any change where the vector side walked an approximate HNSW "
        "index, or when the embedder changed (docs/time-travel.md).",
    )
    async def replay(
        self,
        deps: Deps,
        trace_id: TraceIdPath,
        project_id: ProjectQuery,
        data: ReplayRequest | None = None,
    ) -> ReplayResponse:
        overrides = data or ReplayRequest()
        return await replay.replay(
            deps.lease,
            deps.embedder,
            deps.settings,
            deps.principal,
            trace_id,
            overrides,
            noted=deps.reads.trace_noted,
        )

    @get(
        "/v1/stats/facts",
        responses=ERRORS,
        summary="What each fact is worth: served, left out, never served",
        description="The active facts of a project (or one subject) with how often context calls "
        "served them, when last, and how often they were candidates left out (`over_budget`, "
        "`below_relevance_floor`), counted from the stored traces of calls made at the current "
        "instant (as-of calls and replays are not counted). `order`: `never_served` (only facts "
        "never served, the most often left out first), `most_served`, or `most_dropped` (most "
        "often left out for the budget first).",
        opt={READS: True},
    )
    async def fact_stats(
        self,
        deps: Deps,
        project_id: ProjectQuery,
        subject_id: SubjectQuery = None,
        order: Annotated[
            FactStatsOrder,
            Parameter(query="order", description="`never_served`, `most_served` or `most_dropped`."),
        ] = "most_served",
        limit: Annotated[
            int,
            Parameter(query="limit", ge=1, le=MAX_PAGE_LIMIT, description="At most this many facts, 1..500."),
        ] = DEFAULT_PAGE_LIMIT,
    ) -> FactStats:
        deps.reads.fresh(project_id, subject_id, traces=True)
        worth = await usage.facts(deps.conn, deps.principal, project_id, subject_id, order, limit)
        return retention.windowed(worth, deps.settings)
