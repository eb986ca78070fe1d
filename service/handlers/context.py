"""Read-side routes: context packets, their traces, and usage stats."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from litestar import Controller, Response, get, post
from litestar.datastructures import State
from litestar.params import Parameter

from service.context import assembler
from service.handlers.deps import ERRORS, Caller, Conn, EmbedderDep, SettingsDep, in_key_project
from service.handlers.memory import ProjectQuery
from service.observability.metrics import observe_context
from service.structs import ContextPacket, ContextRequest, Inspection, StatsOverview


def server_timing(timer: assembler.StageTimer) -> str:
    return ", ".join(f"{name};dur={ms:.2f}" for name, ms in timer.ms.items())


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
    )
    async def context(
        self,
        data: ContextRequest,
        conn: Conn,
        principal: Caller,
        embedder: EmbedderDep,
        settings: SettingsDep,
        state: State,
    ) -> Response[ContextPacket]:
        data = in_key_project(data, principal)
        timer = assembler.StageTimer()
        packet = await assembler.assemble(conn, embedder, settings, principal, data, timer=timer)
        observe_context(state, timer, packet)
        return Response(packet, status_code=200, headers={"Server-Timing": server_timing(timer)})

    @get(
        "/v1/inspect/{trace_id:uuid}",
        responses=ERRORS,
        summary="Every decision of one context call",
    )
    async def inspect(
        self,
        conn: Conn,
        principal: Caller,
        trace_id: Annotated[UUID, Parameter(description="The trace_id of a ContextPacket.")],
    ) -> Inspection:
        return await assembler.inspect(conn, principal, trace_id)

    @get("/v1/stats/overview", responses=ERRORS, summary="Usage overview of a project")
    async def stats(self, conn: Conn, principal: Caller, project_id: ProjectQuery) -> StatsOverview:
        return await assembler.stats(conn, principal, project_id)
