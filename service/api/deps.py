"""Per-request dependencies: one pooled connection lent per request, and the caller's key."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar

import asyncpg
from litestar import Litestar, Request
from litestar.datastructures import ResponseHeader, State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Dependency
from litestar.types import Scope

from service.api.auth import Principal, authenticate
from service.api.ratelimit import RateLimiter, WorkRateLimiter
from service.api.strict_body import check_body
from service.db.replica import (
    ON_REPLICA,
    PRIMARY_ONLY,
    RATE_CHARGED,
    READS,
    RERUN,
    Reads,
    provide_reads,
    rerun_after_replica_error,
    router_of,
)
from service.embedding.embedder import Embedder, WorkLimitedEmbedder
from service.errors import CONNECTION_LOST, openapi_responses
from service.memory.statistics import StatisticsKeeper
from service.settings import Settings
from service.structs import KEY_PROJECT

# Injected objects are ours, not client input: Litestar must not try to validate them.
ConnDep = Annotated[asyncpg.Connection, Dependency(skip_validation=True)]
Caller = Annotated[Principal, Dependency(skip_validation=True)]


# Where a request's connection lease is kept in its ASGI scope (see provide_conn).
LEASE = "haki.connection_lease"


class Lease:
    """A pooled connection lent to one request, given back exactly once, by whoever is first.

    A request that waits on something slow outside the database (the embedder behind the
    queries, a chat model) sets its connection aside meanwhile (`set_aside`): the connection goes
    back to the pool and another is lent afterwards. Held, a pool of 10 was 10 such waits: an
    extraction whose model takes seconds, or a bulk write queued behind the queries' embeddings,
    kept every other request waiting for a connection (tests/test_embed_outside_transaction.py).
    """

    def __init__(self) -> None:
        self._stack = AsyncExitStack()
        self._pool: Any = None
        self._acquire_timeout_seconds = 0.0
        self._conn: asyncpg.Connection | None = None

    async def open(self, pool: Any, acquire_timeout_seconds: float) -> asyncpg.Connection:
        acquiring = pool.acquire(timeout=acquire_timeout_seconds)
        conn: asyncpg.Connection = await self._stack.enter_async_context(acquiring)
        self._pool, self._acquire_timeout_seconds, self._conn = pool, acquire_timeout_seconds, conn
        return conn

    @property
    def conn(self) -> asyncpg.Connection:
        """The connection lent now (another one after `set_aside`: read it again after a wait)."""
        if self._conn is None:
            raise RuntimeError("the request's connection is set aside or given back")
        return self._conn

    @asynccontextmanager
    async def set_aside(self) -> AsyncIterator[None]:
        """No connection while the block runs; one from the same pool after it (none if it failed:
        the request ends there)."""
        pool, timeout = self._pool, self._acquire_timeout_seconds
        await self.close()
        yield
        await self.open(pool, timeout)

    def discard(self) -> None:
        """Closes the lent connection at once, without a word to its server: given back after a
        timeout, asyncpg would first wait for the server to confirm the statement's cancel, and a
        hung server never does (the release then fails, and so would the hooks after it)."""
        if self._conn is not None:
            # A dead connection may have gone back to its pool already (asyncpg's own clean-up).
            with suppress(asyncpg.InterfaceError):
                self._conn.terminate()

    async def close(self) -> None:
        self._conn = None
        stack, self._stack = self._stack, AsyncExitStack()
        await stack.aclose()  # a no-op the second time


async def provide_conn(
    request: Request[Any, Any, Any], state: State
) -> AsyncGenerator[asyncpg.Connection, None]:
    settings: Settings = state.settings
    lease = Lease()
    # Litestar never closes this generator when a later dependency of the same request fails (the
    # key lookup, the rate limit): the connection would wait for the garbage collector, or for
    # ever while anything holds the exception. `release_after_exception` closes the lease then.
    request.scope.setdefault("state", {})[LEASE] = lease
    router = router_of(state)  # None without HAKI_DATABASE_READ_URL: one pool, as before
    if router is not None and request.route_handler.opt.get(READS):
        conn = await router.lease(lease, request.scope)
    else:
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
    on_replica = scope.get("state", {}).get(ON_REPLICA)
    if isinstance(lease, Lease):
        if on_replica and isinstance(exc, CONNECTION_LOST):  # TimeoutError included (an OSError)
            lease.discard()  # the standby may be hung: its read runs again on the primary
        await lease.close()
    if not isinstance(exc, CONNECTION_LOST) or on_replica:
        return  # a standby's lost connection says nothing of the primary's (service/db/replica.py)
    expire = getattr(scope["litestar_app"].state.get("pool"), "expire_connections", None)
    if expire is not None:
        await expire()


async def provide_key(request: Request[Any, Any, Any], conn: ConnDep, state: State) -> Principal:
    """The request's key: 401 without a live one (looked up on every request, so a revoked key is
    refused at once), then 429 over its rate: once a request, not again when a read of the standby
    runs again on the primary (service/db/replica.py rerun_on_primary)."""
    principal = await authenticate(conn, request.headers.get("authorization"))
    scope_state = request.scope.setdefault("state", {})
    if not scope_state.get(RATE_CHARGED):
        limiter: RateLimiter = state.rate_limiter
        limiter.take(principal.key_id)
        scope_state[RATE_CHARGED] = True
    return principal


KeyDep = Annotated[Principal, Dependency(skip_validation=True)]


async def after_strict_body(request: Request[Any, Any, Any], key: KeyDep) -> Principal:
    """`principal`, what every authenticated route takes: the key, once the request's body passed
    the strict decoding (service/api/strict_body.py). A step of its own, after the key's: 401 and 429
    come before a 400 about the body, and the handler never sees a body only lax mode let in."""
    await check_body(request)
    return key


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


class _OfSubject(Protocol):
    @property
    def subject_id(self) -> str: ...


W = TypeVar("W", bound=_OfSubject)
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class RouteDeps:
    """What a JSON route's handler works with, as one dependency rather than the same five
    parameters on every handler: the lent connection, the caller, the settings, the request's
    standby bookkeeping (service/db/replica.py) and the embedder charged to the caller's project."""

    lease: Lease
    principal: Principal
    settings: Settings
    reads: Reads
    embedder: Embedder
    # The planner statistics keeper of an app that owns its pool (service/memory/statistics.py).
    statistics: StatisticsKeeper | None = None

    @property
    def conn(self) -> asyncpg.Connection:
        """The request's connection, as lent now (see `without_connection`)."""
        return self.lease.conn

    async def without_connection(self, work: Awaitable[R]) -> R:
        """`work`, which needs no database (the embedder, a chat model), awaited with the request's
        connection back in the pool; `conn` is another connection afterwards."""
        async with self.lease.set_aside():
            return await work

    async def noted(self, written: W) -> W:
        """`written` (one object, or a batch's body, of the key's project), once noted for
        read-your-writes: the scope's next reads go to the primary until the standby has it."""
        await self.reads.note_write(self.conn, self.principal.project_id, written.subject_id)
        return written


def provide_deps(
    request: Request[Any, Any, Any], conn: ConnDep, principal: Caller, state: State
) -> RouteDeps:
    """The settings, the standby bookkeeping and the embedder come from the app's state here, not
    as dependencies of their own: Litestar resolves the dependencies that depend on nothing
    (the connection, and those three) as one batch in an anyio task group, 50 us a request for
    four trivial calls, where one alone is awaited in place (tests/test_dependency_order.py)."""
    return RouteDeps(
        lease_of(request, conn),
        principal,
        provide_settings(state),
        provide_reads(request, state),
        provide_embedder(state),
        state.get("statistics"),
    )


def lease_of(request: Request[Any, Any, Any], conn: asyncpg.Connection) -> Lease:
    """The lease behind a request's `conn` (provide_conn's), for a handler that may set it aside."""
    lease: Lease = request.scope["state"][LEASE]
    assert lease.conn is conn
    return lease


Deps = Annotated[RouteDeps, Dependency(skip_validation=True)]


async def in_process(
    app: Litestar, principal: Principal, work: Callable[[RouteDeps], Awaitable[R]], *, reads: bool = False
) -> R:
    """`work` given what a route's handler gets, for a caller outside Litestar's request cycle whose
    key is checked already (the /mcp tools, service/api/mcp_server.py). As for a request: the key's
    rate limit, one connection lent for the call (on the standby for `reads`, where a read route
    would be), and a failure's clean-up by the app's own hooks, which also mark a read of the
    standby to run again on the primary (service/db/replica.py)."""
    state = app.state
    limiter: RateLimiter = state.rate_limiter
    limiter.take(principal.key_id)
    router = router_of(state)
    scope: Any = {"type": "http", "litestar_app": app}
    while True:
        lease = Lease()
        scope["state"] = {LEASE: lease}
        try:
            if reads and router is not None:
                await router.lease(lease, scope)
            else:
                await lease.open(state.pool, provide_settings(state).pool_acquire_timeout_seconds)
            deps = RouteDeps(
                lease,
                principal,
                provide_settings(state),
                Reads(router, scope),
                provide_embedder(state),
                state.get("statistics"),
            )
            done = await work(deps)
            if router is not None:
                router.answered(scope)
            return done
        except Exception as exc:
            await release_after_exception(exc, scope)
            if router is not None:
                await rerun_after_replica_error(exc, scope)
                router.answered(scope)
            if RERUN not in scope["state"]:
                raise
            scope[PRIMARY_ONLY] = True
        finally:
            await lease.close()


# Every route's documented error responses, from the one error table (service/errors.py).
ERRORS: dict[int, ResponseSpec] = openapi_responses()

# The headers of a success that the document names (the routes set them on the Response); a
# value gives the header its schema, a string.
IDEMPOTENT_REPLAYED = ResponseHeader(
    name="Idempotent-Replayed",
    documentation_only=True,
    value="true",
    description="`true` when the answer is the replay of an earlier write under this Idempotency-Key: "
    "nothing was written again. Absent otherwise.",
)
SERVER_TIMING = ResponseHeader(
    name="Server-Timing",
    documentation_only=True,
    value="embed;dur=5.10, candidates;dur=3.20",
    description="`name;dur=<milliseconds>` for each stage of the call: the query's embedding, the "
    "assembler's stages, the trace.",
)
