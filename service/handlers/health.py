"""Liveness/readiness: 200 once the database answers."""

from __future__ import annotations

from litestar import get

from service import repository as repo
from service.handlers.deps import ERRORS, Conn, EmbedderDep
from service.structs import Health


# `security=[{}]` overrides the schema-wide bearer requirement: the probe needs no key.
@get(
    "/healthz",
    tags=["health"],
    responses={503: ERRORS[503]},
    summary="Readiness probe (no key needed)",
    security=[{}],
)
async def healthz(conn: Conn, embedder: EmbedderDep) -> Health:
    await repo.ping(conn)
    return Health(status="ok", database="ok", embedder=embedder.name)
