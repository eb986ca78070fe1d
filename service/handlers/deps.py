"""Per-request dependencies: one pooled connection lent per request, and the caller's key."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from typing import Annotated, Any, Protocol, TypeVar

import asyncpg
from litestar import Request
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Dependency
from litestar.types import Scope

from service.auth import Principal, authenticate
from service.embedder import Embedder, WorkLimitedEmbedder
from service.errors import CONNECTION_LOST, openapi_responses
from service.ratelimit import RateLimiter, WorkRateLimiter
from service.settings import Settings
from service.strict_body import check_body
from service.structs import KEY_PROJECT

# Injected objects are ours, not client input: Litestar must not try to validate them.
ConnDep = Annotated[asyncpg.Connection, Dependency(skip_validation=True)]
Caller = Annotated[Principal, Dependency(skip_validation=True)]
EmbedderDep = Annotated[Embedder, Dependency(skip_validation=True)]
SettingsDep = Annotated[Settings, Dependency(skip_validation=True)]


# Where a request's connection lease is kept in its ASGI scope (see provide_conn).
LEASE = "haki.connection_lease"


class Lease:
    """A pooled connection lent to one request, given back exactly once, by whoever is first."""

    def __init__(self) -> None:
        self._stack = AsyncExitStack()

    async def open(self, pool: Any, acquire_timeout_seconds: float) -> asyncpg.Connection:
        acquiring = pool.acquire(timeout=acquire_timeout_seconds)
        conn: asyncpg.Connection = await self._stack.enter_async_context(acquiring)
        return conn

    async def close(self) -> None:
        await self._stack.aclose()  # a no-op the second time


async def provide_conn(
    request: Request[Any, Any, Any], state: State
) -> AsyncGenerator[asyncpg.Connection, None]:
    settings: Settings = state.settings
    lease = Lease()
    # Litestar never closes this generator when a later dependency of the same request fails (the
    # key lookup, the rate limit): the connection would wait for the garbage collector, or for
    # ever while anything holds the exception. `release_after_exception` closes the lease then.
    request.scope.setdefault("state", {})[LEASE] = lease
    conn = await lease.open(state.pool, settings.pool_acquire_timeout_seconds)
    try:
        yield conn
    finally:
        await lease.close()


async def release_after_exception(exc: Exception, scope: Scope) -> None:
    """After-exception hook: gives the request's connection back, and when the failure means the
    connection was dead (server restarted, host or network gone) expires the pool's idle ones too,
    as dead as it: they are replaced now rather than fail one more request each."""
    lease = scope.get("state", {}).get(LEASE)
    if isinstance(lease, Lease):
        await lease.close()
    if not isinstance(exc, CONNECTION_LOST):
        return
    expire = getattr(scope["litestar_app"].state.get("pool"), "expire_connections", None)
    if expire is not None:
        await expire()


async def provide_principal(request: Request[Any, Any, Any], conn: ConnDep, state: State) -> Principal:
    principal = await authenticate(conn, request.headers.get("authorization"))
    limiter: RateLimiter = state.rate_limiter
    limiter.take(principal.key_id)
    # Every authenticated route resolves the caller, so the strict body check sits here: after the
    # key and rate checks (401 and 429 come first), before the handler sees a lax-converted body.
    await check_body(request)
    return principal


class _ScopedBody(Protocol):
    project_id: str


B = TypeVar("B", bound=_ScopedBody)


def in_key_project(data: B, principal: Principal) -> B:
    """A body that omitted `project_id` is about the key's own project (structs.KEY_PROJECT)."""
    if data.project_id == KEY_PROJECT:
        data.project_id = principal.project_id
    return data


def provide_embedder(state: State) -> Embedder:
    # Writes are charged to their project's embedding budget where they are accepted (429 with
    # Retry-After through service/errors.py), before any of their texts is queued.
    work_limiter: WorkRateLimiter = state.work_limiter
    embedder: Embedder = state.embedder
    return WorkLimitedEmbedder(embedder, work_limiter) if work_limiter.enabled else embedder


def provide_settings(state: State) -> Settings:
    settings: Settings = state.settings
    return settings


# Every route's documented error responses, from the one error table (service/errors.py).
ERRORS: dict[int, ResponseSpec] = openapi_responses()
