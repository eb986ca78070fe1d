"""What the stored traces say about a project: its usage overview (GET /v1/stats/overview) and
what each fact is worth (GET /v1/stats/facts)."""

from __future__ import annotations

from service.api.auth import Principal
from service.constants import DEFAULT_PAGE_LIMIT
from service.repository import Conn
from service.repository import context as repo
from service.structs import FactStats, FactStatsOrder, StatsOverview


async def overview(conn: Conn, principal: Principal, project_id: str) -> StatsOverview:
    """The project's context calls (how many served a fact, how many degraded) and its memory."""
    principal.require(project_id)
    return await repo.stats_overview(conn, project_id)


async def facts(
    conn: Conn,
    principal: Principal,
    project_id: str,
    subject_id: str | None,
    order: FactStatsOrder,
    limit: int = DEFAULT_PAGE_LIMIT,
) -> FactStats:
    """The active facts of a project or subject by what they are worth."""
    principal.require(project_id)
    return await repo.stats_facts(conn, project_id, subject_id, order, limit)
