"""Liveness/readiness: 200 once the database answers."""

from __future__ import annotations

from litestar import Router, get, head

from service.handlers.deps import ERRORS, ConnDep, EmbedderDep
from service.repository import health as health_repo
from service.structs import Health


# `security=[{}]` overrides the schema-wide bearer requirement: the probe needs no key.
@get(
    "/healthz",
    tags=["health"],
    responses={503: ERRORS[503]},
    summary="Readiness probe (no key needed)",
    security=[{}],
)
async def healthz_get(conn: ConnDep, embedder: EmbedderDep) -> Health:
    await health_repo.ping(conn)
    return Health(status="ok", database="ok", embedder=embedder.name)


# Load balancers and `curl -I` probe with HEAD; Litestar serves HEAD only from a handler of its
# own (a HEAD response has no body), so the same check is declared twice.
@head(
    "/healthz",
    tags=["health"],
    responses={503: ERRORS[503]},
    summary="Readiness probe without a body (no key needed)",
    security=[{}],
)
async def healthz_head(conn: ConnDep) -> None:
    await health_repo.ping(conn)


# One name for both, so the app registers them as it registered the GET alone.
healthz = Router(path="/", route_handlers=[healthz_get, healthz_head])
