"""GET /v1/inspect/{trace_id}: every decision of one traced context call."""

from __future__ import annotations

from uuid import UUID

from service.api.auth import Principal
from service.errors import NotFound
from service.repository import Conn
from service.repository import context as repo
from service.structs import Inspection


async def inspect(conn: Conn, principal: Principal, trace_id: UUID) -> Inspection:
    """The trace of a call of the key's own project; 404 for any other (or none)."""
    found = await repo.get_inspection(conn, principal.project_id, trace_id)
    if found is None:
        raise NotFound("No context trace with this id in the key's project.", trace_id=str(trace_id))
    return found
