"""Per-request dependencies: one pooled connection lent per request, and the caller's key."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any

import asyncpg
from litestar import Request
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Dependency
from litestar.types import Scope

from service.auth import Principal, authenticate
from service.embedder import Embedder
from service.errors import CONNECTION_LOST, ErrorBody
from service.ratelimit import RateLimiter
from service.settings import Settings
from service.strict_body import check_body

# Injected objects are ours, not client input: Litestar must not try to validate them.
Conn = Annotated[asyncpg.Connection, Dependency(skip_validation=True)]
Caller = Annotated[Principal, Dependency(skip_validation=True)]
EmbedderDep = Annotated[Embedder, Dependency(skip_validation=True)]
SettingsDep = Annotated[Settings, Dependency(skip_validation=True)]


async def provide_conn(state: State) -> AsyncGenerator[asyncpg.Connection, None]:
    settings: Settings = state.settings
    async with state.pool.acquire(timeout=settings.pool_acquire_timeout_seconds) as conn:
        yield conn


async def expire_dead_connections(exc: Exception, scope: Scope) -> None:
    """After-exception hook: a connection found dead (server restarted, host or network gone) means
    its idle siblings in the pool are as dead; replace them all now rather than fail one more
    request per pooled connection. A hook, because a failure inside another dependency (the key
    lookup is the first query of every request) is never thrown into `provide_conn`."""
    if not isinstance(exc, CONNECTION_LOST):
        return
    expire = getattr(scope["litestar_app"].state.get("pool"), "expire_connections", None)
    if expire is not None:
        await expire()


async def provide_principal(request: Request[Any, Any, Any], conn: Conn, state: State) -> Principal:
    principal = await authenticate(conn, request.headers.get("authorization"))
    limiter: RateLimiter = state.rate_limiter
    limiter.take(principal.key_id)
    # Every authenticated route resolves the caller, so the strict body check sits here: after the
    # key and rate checks (401 and 429 come first), before the handler sees a lax-converted body.
    await check_body(request)
    return principal


def provide_embedder(state: State) -> Embedder:
    embedder: Embedder = state.embedder
    return embedder


def provide_settings(state: State) -> Settings:
    settings: Settings = state.settings
    return settings


def _spec(description: str) -> ResponseSpec:
    return ResponseSpec(data_container=ErrorBody, description=description, generate_examples=False)


ERRORS: dict[int, ResponseSpec] = {
    400: _spec("validation_error (malformed JSON, wrong type, out of range) or budget_exceeded"),
    401: _spec("unauthorized: missing, unknown or revoked API key"),
    403: _spec("forbidden: the key belongs to another project"),
    404: _spec("not_found"),
    409: _spec("conflict: e.g. an Idempotency-Key reused with another body"),
    413: _spec("payload_too_large: the body exceeds HAKI_MAX_BODY_BYTES"),
    422: _spec("validation_error: a rule only the service can check; `details.field` names the field"),
    429: _spec("rate_limited: too many requests for this API key; wait `Retry-After` seconds"),
    503: _spec("unavailable: database or embedder down, or a statement timeout; retry"),
}
