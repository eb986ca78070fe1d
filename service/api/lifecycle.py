"""Memory lifecycle routes: erasure, listing and export."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, delete, get
from litestar.datastructures import State
from litestar.params import Parameter
from litestar.response import Stream

from service.api.deps import ERRORS, Deps, RouteDeps
from service.api.memory import PageLimit, ProjectQuery, subject_id_parameter
from service.constants import DEFAULT_PAGE_LIMIT
from service.db.replica import READS
from service.memory import erasure, export
from service.memory.cursors import SUBJECT_CURSOR_MAX_CHARS
from service.structs import SubjectErasure, SubjectPage

SubjectPath = Annotated[
    str,
    subject_id_parameter(
        "Subject id, URL-encoded; one holding a `/` goes in `?subject_id=` instead "
        "(DELETE /v1/subjects, GET /v1/subjects/export)."
    ),
]
SubjectParam = Annotated[
    str, subject_id_parameter("Subject id (any characters, `/` included).", query="subject_id")
]
Cursor = Annotated[
    str | None,
    Parameter(
        query="cursor",
        max_length=SUBJECT_CURSOR_MAX_CHARS,
        description="`next_cursor` of the previous page.",
    ),
]


class LifecycleController(Controller):
    tags = ["lifecycle"]

    @delete(
        "/v1/subjects/{subject_id:str}",
        status_code=200,
        responses=ERRORS,
        summary="Erase a subject: every fact, event, conflict set and trace of the scope",
        description="Erases, in one transaction, the facts (any status), events, conflict sets, "
        "context calls with their decisions, and the Idempotency-Key records naming them, of one "
        "(project_id, subject_id); answers with the count of each kind. The erasure is audited "
        "(counts, time, key id; no content). Afterwards no route returns anything of the subject, "
        "its traces are 404, and a new write to the same subject id starts empty. Erasing a "
        "subject that holds nothing answers zeros.",
    )
    async def erase_subject(
        self, deps: Deps, project_id: ProjectQuery, subject_id: SubjectPath
    ) -> SubjectErasure:
        return await delete_subject(deps, project_id, subject_id)

    @delete(
        "/v1/subjects",
        status_code=200,
        responses=ERRORS,
        summary="Erase a subject named in the query (for subject ids holding a `/`)",
        description="DELETE /v1/subjects/{subject_id} with the subject id in `?subject_id=`: a "
        "path segment cannot carry a `/`, a query parameter can.",
    )
    async def erase_subject_by_query(
        self, deps: Deps, project_id: ProjectQuery, subject_id: SubjectParam
    ) -> SubjectErasure:
        return await delete_subject(deps, project_id, subject_id)

    @get(
        "/v1/subjects/export",
        responses=ERRORS,
        media_type=export.MEDIA_TYPE,
        summary="Export a subject named in the query (for subject ids holding a `/`)",
        description="GET /v1/subjects/{subject_id}/export with the subject id in `?subject_id=`.",
    )
    async def export_subject_by_query(
        self, deps: Deps, state: State, project_id: ProjectQuery, subject_id: SubjectParam
    ) -> Stream:
        return await _export(deps, state, project_id, subject_id)

    @get(
        "/v1/subjects",
        responses=ERRORS,
        summary="List the subjects of a project, with their fact and event counts",
        opt={READS: True},
    )
    async def list_subjects(
        self,
        deps: Deps,
        project_id: ProjectQuery,
        limit: PageLimit = DEFAULT_PAGE_LIMIT,
        cursor: Cursor = None,
    ) -> SubjectPage:
        deps.reads.fresh(project_id)
        return await erasure.list_subjects(deps.conn, deps.principal, project_id, limit, cursor)

    @get(
        "/v1/subjects/{subject_id:str}/export",
        responses=ERRORS,
        media_type=export.MEDIA_TYPE,
        summary="Export a subject as JSON Lines (what `haki import` reads back)",
        description="A streamed JSON Lines document: a header line (`haki_export`: 2, project_id, "
        'subject_id, exported_at), then every event (`"kind": "event"`), every fact of any '
        'status (`"kind": "fact"`) and every conflict set of either status (`"kind": '
        '"conflict_set"`, with its member fact ids) of the scope, each in id order, from one '
        'snapshot, and last an end line counting them (`"kind": "end"`: events, facts, '
        "conflict_sets). `haki import FILE --project P --subject S` writes it into a scope as it was. "
        "404 when the subject holds nothing.",
    )
    async def export_subject(
        self, deps: Deps, state: State, project_id: ProjectQuery, subject_id: SubjectPath
    ) -> Stream:
        return await _export(deps, state, project_id, subject_id)


# Each of the two routes below serves a subject named in the path and one named in the query;
# `delete_subject` is the `forget` MCP tool's work too.


async def delete_subject(deps: RouteDeps, project_id: str, subject_id: str) -> SubjectErasure:
    return await deps.noted(
        await erasure.erase_subject(deps.conn, deps.principal, deps.settings, project_id, subject_id)
    )


async def _export(deps: RouteDeps, state: State, project_id: str, subject_id: str) -> Stream:
    await export.check_exportable(deps.conn, deps.principal, project_id, subject_id)
    return Stream(
        export.stream_export(state.pool, project_id, subject_id),
        media_type=export.MEDIA_TYPE,
        headers={"Content-Disposition": 'attachment; filename="haki-export.jsonl"'},
    )
