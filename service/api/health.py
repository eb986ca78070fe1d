"""Liveness/readiness: 200 once the database answers."""

from __future__ import annotations

from litestar import Router, get, head
from litestar.datastructures import State

from service.api.deps import ERRORS, ConnDep, provide_embedder
from service.db.replica import router_of
from service.repository import health as health_repo
from service.structs import Health

# The probe's two handlers share their path, tag and (no) key through the Router below.
# A 400 too: a URL whose percent-escapes are not UTF-8 is refused before any route (strict_body).
NOT_READY = {400: ERRORS[400], 503: ERRORS[503]}


@get(responses=NOT_READY, summary="Readiness probe (no key needed)")
async def healthz_get(conn: ConnDep, state: State) -> Health:
    await health_repo.ping(conn)
    router = router_of(state)  # the replica's state as its monitor last saw it: no query
    replica = None if router is None else router.health()
    return Health(status="ok", database="ok", embedder=provide_embedder(state).name, replica=replica)


# Load balancers and `curl -I` probe with HEAD; Litestar serves HEAD only from a handler of its
# own (a HEAD response has no body), so the same check is declared twice.
@head(responses=NOT_READY, summary="Readiness probe without a body (no key needed)")
async def healthz_head(conn: ConnDep) -> None:
    await health_repo.ping(conn)


# One name for both, so the app registers them as it registered the GET alone. `security=[{}]`
# overrides the schema-wide bearer requirement: the probe needs no key.
healthz = Router(path="/healthz", route_handlers=[healthz_get, healthz_head], tags=["health"], security=[{}])
