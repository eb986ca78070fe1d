"""Write-side routes: facts, events, conflicts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

from litestar import Controller, Response, delete, get, patch, post
from litestar.exceptions import ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Dependency, Parameter

from service.api.deps import ERRORS, IDEMPOTENT_REPLAYED, Deps, RouteDeps, in_key_project
from service.constants import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT
from service.db.replica import READS
from service.embedding.embedder import uncharged
from service.memory import erasure, event_context, idempotency
from service.memory import writes as memory
from service.repository.maintenance import MemoryTable
from service.scope_id import SCOPE_ID_BOUNDS, SCOPE_ID_JSON_SCHEMA, scope_id_problem
from service.structs import (
    ConflictList,
    ConflictSet,
    Event,
    EventErasure,
    EventPage,
    ExtractRequest,
    Fact,
    FactErasure,
    FactPage,
    PatchFactRequest,
    ResolveConflictRequest,
    WriteEventsRequest,
    WriteEventsResponse,
    WriteFactsRequest,
    WriteFactsResponse,
)

# `?project_id=` is optional on every route: the key already names its project. A dependency (not
# a plain query parameter) so that the default and the 403 live in one place for every handler
# that declares `project_id: ProjectQuery`; registered app-wide in service/app.py. A route of one
# item by id declares it unused: naming another project is a 403 there too, never ignored.
ProjectQuery = Annotated[str, Dependency(skip_validation=True)]


async def provide_project_id(
    deps: Deps,
    project_id_param: Annotated[
        str | None,
        Parameter(
            query="project_id",
            # Checked below rather than by Litestar, whose error would name the Python argument
            # (`project_id_param`, the dependency itself being `project_id`); published as is.
            schema_extra=SCOPE_ID_JSON_SCHEMA,
            description="Project id. Optional: omitted, it is the key's project; another project "
            "is a 403 `forbidden`.",
        ),
    ] = None,
) -> str:
    # On `deps` rather than the key alone: a dependency of its own batch, resolved after `deps`
    # instead of beside it (tests/test_dependency_order.py).
    principal = deps.principal
    if project_id_param is None:
        return principal.project_id
    project_id = query_scope_id("project_id", project_id_param)
    principal.require(project_id)
    return project_id


def query_scope_id(name: str, value: str) -> str:
    """`value`, the query parameter `name`, if it is a scope id; else a 400 that names `name`."""
    if (problem := scope_id_problem(value)) is not None:
        message = f"{name}: {problem}"
        raise ValidationException(
            detail=message, extra=[{"key": name, "message": message, "source": "query"}]
        )
    return value


def subject_id_parameter(description: str, *, query: str | None = None) -> Any:
    """A subject id (a scope id, service/scope_id.py), in the path, or in the query parameter
    named `query`."""
    return Parameter(query=query, description=description, **SCOPE_ID_BOUNDS)


SubjectQuery = Annotated[str | None, subject_id_parameter("Only this subject.", query="subject_id")]


# The keyset pagination of GET /v1/facts and /v1/events (GET /v1/subjects takes the same limit;
# GET /v1/conflicts the cursor, its pages bounded by members).
PageLimit = Annotated[
    int, Parameter(query="limit", ge=1, le=MAX_PAGE_LIMIT, description="Page size, 1..500.")
]
PageCursor = Annotated[
    str | None,
    Parameter(query="cursor", max_length=64, description="`next_cursor` of the previous page."),
]


FactIdPath = Annotated[UUID, Parameter(description="A fact_id of the key's project.")]
EventIdPath = Annotated[UUID, Parameter(description="An event_id of the key's project.")]
ConflictSetIdPath = Annotated[UUID, Parameter(description="A conflict_set_id of the key's project.")]


IdempotencyKey = Annotated[
    str | None,
    Parameter(
        header="Idempotency-Key",
        min_length=1,
        max_length=idempotency.MAX_KEY_CHARS,
        pattern=r"^[\x21-\x7e]+$",
        description="Optional, 1..255 visible ASCII characters (a UUID is a good choice). A retry with "
        "the same key and the same body returns the first response (same ids, same status code, "
        "header `Idempotent-Replayed: true`) and writes nothing; the same key with another body is a "
        "409 `conflict`. Keys are scoped per project and expire HAKI_IDEMPOTENCY_TTL_SECONDS "
        "(default 86400) after the first write. Only successful writes are recorded: the retry of a "
        "failed request runs again.",
    ),
]


# A batch write's body: one scope, checked against the key's project by idempotency.run_once.
ScopedWrite = WriteFactsRequest | WriteEventsRequest | ExtractRequest
P = TypeVar("P")


async def run_batch(
    deps: RouteDeps,
    data: ScopedWrite,
    idempotency_key: str | None,
    *,
    route: str,
    response_type: type[idempotency.T],
    prepare: Callable[[], Awaitable[P]],
    write: Callable[[P], Awaitable[idempotency.T]],
    adds: tuple[MemoryTable, int] | None = None,
) -> idempotency.Outcome[idempotency.T]:
    """A batch write of one scope (POST /v1/facts, /v1/events, /v1/extract): run at most once per
    Idempotency-Key, noted for read-your-writes on a standby, and counted (`adds`: the table and
    its new rows) for the planner statistics keeper. `data` is in the key's project already
    (in_key_project). A server on another model than the project's is refused before `prepare`
    calls a provider; a replay is still answered."""

    async def checked() -> P:
        await memory.refuse_other_model(deps.conn, deps.embedder, data.project_id)
        return await prepare()

    outcome = await idempotency.run_once(
        deps.lease,
        deps.settings,
        deps.principal,
        project_id=data.project_id,
        subject_id=data.subject_id,
        key=idempotency_key,
        route=route,
        request=data,
        status_code=201,
        response_type=response_type,
        prepare=checked,
        write=write,
    )
    await deps.noted(data)
    if adds is not None and deps.statistics is not None and not outcome.replayed:
        deps.statistics.note(*adds)
    return outcome


def batch_write(
    summary: str, description: str | None = None, responses: dict[int, ResponseSpec] = ERRORS
) -> post:
    """The route of a batch write under an Idempotency-Key: POST at its controller's path, a
    201, the replay's header documented."""
    return post(
        "/",
        status_code=201,
        responses=responses,
        summary=summary,
        description=description,
        response_headers=[IDEMPOTENT_REPLAYED],
    )


def batch_response(outcome: idempotency.Outcome[idempotency.T]) -> Response[idempotency.T]:
    """A batch write's answer; a replay says so with `Idempotent-Replayed: true`."""
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else None
    return Response(outcome.body, status_code=outcome.status_code, headers=headers)


# The work of the routes below, one function each, for the route and for the MCP tool or the /ui
# action that does the same (service/api/mcp_server.py, service/api/ui.py).


async def post_facts(
    deps: RouteDeps, data: WriteFactsRequest, idempotency_key: str | None = None
) -> idempotency.Outcome[WriteFactsResponse]:
    data = in_key_project(data, deps.principal)
    return await run_batch(
        deps,
        data,
        idempotency_key,
        route="POST /v1/facts",
        response_type=WriteFactsResponse,
        prepare=lambda: deps.without_connection(
            memory.prepare_facts(deps.embedder, deps.settings, deps.principal, data)
        ),
        write=lambda prepared: memory.store_facts(deps.conn, prepared),
        adds=("facts", len(data.facts)),
    )


async def post_events(
    deps: RouteDeps, data: WriteEventsRequest, idempotency_key: str | None = None
) -> idempotency.Outcome[WriteEventsResponse]:
    data = in_key_project(data, deps.principal)
    outcome = await run_batch(
        deps,
        data,
        idempotency_key,
        route="POST /v1/events",
        response_type=WriteEventsResponse,
        prepare=lambda: deps.without_connection(
            memory.prepare_events(deps.embedder, deps.settings, deps.principal, data)
        ),
        write=lambda prepared: memory.store_events(deps.conn, prepared),
        adds=("events", len(data.events)),
    )
    if deps.settings.event_context and deps.settings.event_context_inline:
        written = [e.event_id for e in outcome.body.events]
        await event_context.make_written(deps, uncharged(deps.embedder), data.project_id, written)
    return outcome


async def get_conflicts(
    deps: RouteDeps,
    project_id: str,
    subject_id: str | None,
    status: Literal["open", "resolved"] | None,
    cursor: str | None = None,
    page_members: int | None = None,
) -> ConflictList:
    deps.reads.fresh(project_id, subject_id)
    return await memory.list_conflicts(
        deps.conn, deps.principal, project_id, subject_id, status, cursor, page_members
    )


async def post_resolve(deps: RouteDeps, conflict_set_id: UUID, data: ResolveConflictRequest) -> ConflictSet:
    return await deps.noted(
        await memory.resolve_conflict(deps.conn, deps.principal, conflict_set_id, data, deps.settings)
    )


async def update_fact(deps: RouteDeps, fact_id: UUID, data: PatchFactRequest) -> Fact:
    return await deps.noted(await memory.patch_fact(deps.conn, deps.principal, fact_id, data))


class FactsController(Controller):
    path = "/v1/facts"
    tags = ["facts"]

    @batch_write(
        "Write a batch of facts",
        "1..1000 facts of one scope, written atomically: a failed batch writes nothing. "
        "Conflict detection by `key`, replacement by `supersedes`.",
    )
    async def write_facts(
        self, data: WriteFactsRequest, deps: Deps, idempotency_key: IdempotencyKey = None
    ) -> Response[WriteFactsResponse]:
        return batch_response(await post_facts(deps, data, idempotency_key))

    @get("/", responses=ERRORS, summary="List facts (keyset pagination)", opt={READS: True})
    async def list_facts(
        self,
        deps: Deps,
        project_id: ProjectQuery,
        subject_id: SubjectQuery = None,
        status: Annotated[
            Literal["active", "superseded", "retracted"] | None,
            Parameter(query="status", description="Only facts with this status."),
        ] = None,
        limit: PageLimit = DEFAULT_PAGE_LIMIT,
        cursor: PageCursor = None,
    ) -> FactPage:
        deps.reads.fresh(project_id, subject_id)
        return await memory.list_facts(
            deps.conn, deps.principal, project_id, subject_id, status, limit, cursor
        )

    @get("/{fact_id:uuid}", responses=ERRORS, summary="Read one fact", opt={READS: True})
    async def get_fact(self, deps: Deps, fact_id: FactIdPath, project_id: ProjectQuery) -> Fact:
        deps.reads.fresh(deps.principal.project_id)
        return await memory.get_fact(deps.conn, deps.principal, fact_id)

    @patch("/{fact_id:uuid}", responses=ERRORS, summary="Retract a fact or set its valid_to")
    async def patch_fact(
        self, data: PatchFactRequest, deps: Deps, fact_id: FactIdPath, project_id: ProjectQuery
    ) -> Fact:
        return await update_fact(deps, fact_id, data)

    @delete(
        "/{fact_id:uuid}",
        status_code=200,
        responses=ERRORS,
        summary="Erase one fact",
        description="Removes the fact, its conflict memberships (an open set left with fewer than two "
        "active members is resolved) and the trace decisions that name it; `supersedes` links that "
        "pointed at it become null. To stop serving a fact while keeping it, PATCH it `retracted`.",
    )
    async def erase_fact(self, deps: Deps, fact_id: FactIdPath, project_id: ProjectQuery) -> FactErasure:
        return await deps.noted(await erasure.erase_fact(deps.conn, deps.principal, fact_id))


class EventsController(Controller):
    path = "/v1/events"
    tags = ["events"]

    @batch_write("Write a batch of dated events")
    async def write_events(
        self, data: WriteEventsRequest, deps: Deps, idempotency_key: IdempotencyKey = None
    ) -> Response[WriteEventsResponse]:
        return batch_response(await post_events(deps, data, idempotency_key))

    @get("/", responses=ERRORS, summary="List events (keyset pagination)", opt={READS: True})
    async def list_events(
        self,
        deps: Deps,
        project_id: ProjectQuery,
        subject_id: SubjectQuery = None,
        limit: PageLimit = DEFAULT_PAGE_LIMIT,
        cursor: PageCursor = None,
    ) -> EventPage:
        deps.reads.fresh(project_id, subject_id)
        return await erasure.list_events(deps.conn, deps.principal, project_id, subject_id, limit, cursor)

    @get("/{event_id:uuid}", responses=ERRORS, summary="Read one event", opt={READS: True})
    async def get_event(self, deps: Deps, event_id: EventIdPath, project_id: ProjectQuery) -> Event:
        deps.reads.fresh(deps.principal.project_id)
        return await erasure.get_event(deps.conn, deps.principal, event_id)

    @delete(
        "/{event_id:uuid}",
        status_code=200,
        responses=ERRORS,
        summary="Erase one event",
        description="Removes the event and the trace decisions that name it; facts extracted from "
        "it keep their text and their `source_event_id` becomes null.",
    )
    async def erase_event(self, deps: Deps, event_id: EventIdPath, project_id: ProjectQuery) -> EventErasure:
        return await deps.noted(await erasure.erase_event(deps.conn, deps.principal, event_id))


class ConflictsController(Controller):
    path = "/v1/conflicts"
    tags = ["conflicts"]

    @get("/", responses=ERRORS, summary="List conflict sets", opt={READS: True})
    async def list_conflicts(
        self,
        deps: Deps,
        project_id: ProjectQuery,
        subject_id: SubjectQuery = None,
        status: Annotated[
            Literal["open", "resolved"] | None, Parameter(query="status", description="Only this status.")
        ] = None,
        cursor: PageCursor = None,
    ) -> ConflictList:
        return await get_conflicts(deps, project_id, subject_id, status, cursor)

    @post(
        "/{conflict_set_id:uuid}/resolve",
        status_code=200,
        responses=ERRORS,
        summary="Resolve a conflict set: kept facts stay active, the others become superseded",
    )
    async def resolve_conflict(
        self,
        data: ResolveConflictRequest,
        deps: Deps,
        conflict_set_id: ConflictSetIdPath,
        project_id: ProjectQuery,
    ) -> ConflictSet:
        return await post_resolve(deps, conflict_set_id, data)
