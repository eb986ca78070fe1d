"""Reads on a PostgreSQL streaming standby (docs/scaling.md, "Read replicas").

With HAKI_DATABASE_READ_URL set, the routes marked `opt={READS: True}` (the context retrieval,
GET /v1/inspect, the lists, the stats and /ui) lease their connection from a second pool on the
standby; writes, migrations and the context call's trace stay on the primary. Unset, nothing
here runs: no second pool, no monitor, no middleware, and `Reads` is a no-op.

Three rules keep the standby's answers those the primary would give:

- **Read-your-writes per scope.** After each write this process commits, the primary's WAL
  insert position is remembered for the write's (project, subject) and its project. A read of a
  scope whose last remembered position the standby has not replayed yet runs on the primary (a
  ConflictSet opened a moment ago is never served from a lagging standby: the spec forbids it).
  A context call's trace is remembered apart: only the reads of traces wait for it, not the next
  retrieval of the scope. A trace read by id is checked for its own scope once read (an erasure
  of it, or of a fact it names, sends the read to the primary). The standby's replay position is
  the monitor's, refreshed every HAKI_READ_CHECK_INTERVAL_MS.
- **Bounded lag for everything else.** Writes of *other* processes are not known here; the
  monitor measures the standby's lag against the primary's WAL position, and beyond
  HAKI_READ_MAX_LAG_MS every read goes to the primary. That bound is the only guarantee for
  another process's writes (docs/scaling.md says what to do when it is not enough).
- **The primary answers whatever the standby could not.** A standby that is down, lagging or
  promoted is not used; a read whose standby connection died or hung mid-request, or whose
  answer was a 404 / 401 that lag can explain (a trace or a key written a moment ago), or which
  was cancelled by a recovery conflict, or a context call that served a memory erased before its
  trace was written (service/db/call_runner.py), is run again on the primary before anything
  reaches the client, charged once to the key's rate limit and counted once, by that pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, Literal, TypeVar

import asyncpg
from litestar import Request
from litestar.datastructures import State
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send
from litestar.utils.scope.state import CONNECTION_STATE_KEY, ScopeState
from prometheus_client import CollectorRegistry, Counter, Gauge

from service.db import Acquire, connect, database_url
from service.db.call_runner import ErasedSinceRetrieval, NoteTrace
from service.errors import CONNECTION_LOST, NotFound, Unauthorized, Unavailable
from service.repository import replica as rrepo
from service.repository.base import Conn
from service.settings import Settings
from service.structs import ReplicaHealth

log = logging.getLogger("haki.replica")
T = TypeVar("T")

# The route handler's `opt` key that marks a read route (served by the standby when it may).
READS: Final = "haki_reads"
# Keys of a request's scope["state"]: its connection is the standby's; its answer is to be
# discarded and the request run again on the primary (the value is the reason).
ON_REPLICA: Final = "haki.on_replica"
RERUN: Final = "haki.rerun_on_primary"
# Key of the scope of such a second run: every connection of it comes from the primary.
PRIMARY_ONLY: Final = "haki.primary_only"
# Key of a request's scope["state"]: the key's rate limit was charged for it (once a request,
# whichever run did it: service/api/deps.py provide_key).
RATE_CHARGED: Final = "haki.rate_charged"

# One check's wait for either server; a standby that does not answer within it is down.
CHECK_TIMEOUT_SECONDS: Final = 2.0
# A standby not checked successfully for this long is not used (the monitor is stuck): at least
# this many check intervals, never less than UNCHECKED_AFTER_SECONDS (a check may take up to two
# CHECK_TIMEOUT_SECONDS without failing).
UNCHECKED_AFTER_CHECKS: Final = 3
UNCHECKED_AFTER_SECONDS: Final = 5.0
# pg_current_wal_insert_lsn() of an idle primary may point past the page header that follows
# the last record (SizeOfXLogLongPHD = 40 bytes), where no standby's replay position can be:
# the lag sample treats that much as replayed. Never used for a write's own position.
PAGE_HEADER_SLACK: Final = 40
# Samples of the primary's WAL position kept while the standby has not replayed them: at most
# one per check, so a day of a stopped replay at the default check interval (200 ms).
MAX_SAMPLES: Final = 432_000
# Scopes whose last write the standby has not replayed, remembered one by one up to this many
# (about 20 MB); past it, one position for all (ReadRouter.note_write).
MAX_WRITTEN_SCOPES: Final = 100_000

ReplicaState = Literal["ok", "lagging", "down", "starting", "not_standby"]  # structs.ReplicaHealth
# What a remembered write changed: memories (every read of the scope waits for it), a context
# call's trace (only the reads of traces do: the next retrieval of the scope stays on the standby)
# or a UI session ended (the UI pages read on the standby wait for it: a logout holds at once).
WriteKind = Literal["memory", "trace", "session"]


class ReadOnPrimary(Unavailable, status=503, code="unavailable"):
    """Internal control flow: this read's scope has a write the standby has not replayed yet.
    Never reaches a client (the request runs again on the primary); a 503 `unavailable` if it
    ever did, and no "unhandled error" in the log for each fallback."""


class ReplicaMetrics:
    """Registered on the app's own registry (service/observability/metrics.py) only when a read
    pool is configured."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.up = Gauge(
            "haki_read_replica_up",
            "1 when the last check reached the read replica and found it a standby, else 0.",
            registry=registry,
        )
        self.lag = Gauge(
            "haki_read_replica_lag_seconds",
            "How far the read replica's replay is behind the primary's WAL, in seconds, at the "
            "last check (resolution: one check interval, 0.2 s).",
            registry=registry,
        )
        self.reads = Counter(
            "haki_read_requests",
            "Requests of the read routes by the pool that answered them (replica or primary).",
            ["pool"],
            registry=registry,
        )
        self.fallbacks = Counter(
            "haki_read_replica_fallbacks",
            "Read requests sent to the primary instead of the replica, by reason: down, lagging, "
            "starting, not_standby, unchecked, connection_lost, pool_timeout, timeout, unreplayed_write, "
            "not_found, unknown_key, recovery_conflict, read_only, schema_behind, erased_meanwhile.",
            ["reason"],
            registry=registry,
        )


class MonitorConnection:
    """One connection of the monitor to one server, opened again after any failure."""

    def __init__(self, settings: Settings, url: str) -> None:
        self.settings = settings
        self.url = url
        self.conn: asyncpg.Connection | None = None

    async def run(self, query: Callable[[Conn], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
                if self.conn is None or self.conn.is_closed():
                    self.conn = await connect(self.settings, self.url)
                return await query(self.conn)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()


class ReadRouter:
    """Which pool serves a read, and the monitor that keeps the standby's state."""

    def __init__(
        self, settings: Settings, registry: CollectorRegistry, *, max_written_scopes: int = MAX_WRITTEN_SCOPES
    ) -> None:
        self.max_lag_ms = settings.read_max_lag_ms
        # How often the monitor reads the primary's WAL position and the standby's replay
        # position: two one-row queries without a table (0.1 ms each here, benchmarks/replica.py).
        # It bounds how long a scope written by this process keeps reading from the primary after
        # the standby replayed the write (8.4 % of the context calls of a 20 %-write load on 20
        # subjects went to the primary at 200 ms, docs/scaling.md), and it is the resolution of
        # the measured lag.
        self.check_interval = settings.read_check_interval_ms / 1000.0
        self.unchecked_after = max(UNCHECKED_AFTER_SECONDS, UNCHECKED_AFTER_CHECKS * self.check_interval)
        self.max_written_scopes = max_written_scopes
        self.acquire_timeout = settings.pool_acquire_timeout_seconds
        self.read_pool: Any = None
        self.primary_pool: Any = None
        self.metrics = ReplicaMetrics(registry)
        # The monitor's own connections: from the pools, a check waited behind the requests of
        # a saturated pool (16 clients, 10 connections) past its timeout, and a busy standby
        # was taken for a dead one.
        self._monitor_primary = MonitorConnection(settings, database_url(settings))
        self._monitor_standby = MonitorConnection(settings, settings.database_read_url or "")
        self.state: ReplicaState = "starting"
        self.lag_ms: float | None = None
        self.replayed = -1
        self.last_ok = 0.0
        self._samples: deque[tuple[float, int]] = deque(maxlen=MAX_SAMPLES)
        # (kind, project, subject) and (kind, project, None) -> the WAL insert position after its
        # last write of that kind.
        self._written: dict[tuple[WriteKind, str, str | None], int] = {}
        self._floor = -1  # a position every scope waits for (see note_write)

    # --- routing ------------------------------------------------------------------------------

    def unusable(self) -> str | None:
        """Why the standby may not serve reads now, or None."""
        if self.state != "ok":
            return self.state
        if time.monotonic() - self.last_ok > self.unchecked_after:
            return "unchecked"
        return None

    def stale(
        self, project_id: str, subject_id: str | None, kinds: tuple[WriteKind, ...] = ("memory",)
    ) -> bool:
        """A write of one of `kinds` of this scope (subject None: of the project) not yet replayed
        by the standby."""
        written = max(self._written.get((kind, project_id, subject_id), -1) for kind in kinds)
        return max(self._floor, written) > self.replayed

    async def note_write(
        self, conn: Conn, project_id: str, subject_id: str | None, kind: WriteKind = "memory"
    ) -> None:
        """After a write committed on `conn` (the primary): one round trip (docs/scaling.md)."""
        lsn = await rrepo.wal_insert_lsn(conn)
        keys: list[tuple[WriteKind, str, str | None]] = [(kind, project_id, None)]
        if subject_id is not None:
            keys.append((kind, project_id, subject_id))
        for key in keys:
            if lsn > self._written.get(key, -1):
                self._written[key] = lsn
        if len(self._written) > self.max_written_scopes:
            # A standby that replays nothing (down, paused) while many scopes are written: one
            # position for all of them, so every read waits for it (safe, and bounded memory).
            self._floor = max(self._floor, *self._written.values())
            self._written.clear()

    def fallback(self, reason: str) -> None:
        self.metrics.fallbacks.labels(reason=reason).inc()

    def answered(self, scope: Scope) -> None:
        """After a request's first run: counts the standby's answer, unless the request runs again
        on the primary (which counts its own lease): one pool per request."""
        state = scope.get("state", {})
        if state.get(ON_REPLICA) and not state.get(RERUN):
            self.metrics.reads.labels(pool="replica").inc()

    def mark_down(self) -> None:
        self.state = "down"
        self.metrics.up.set(0)

    async def lease(self, stack: Any, scope: Scope) -> asyncpg.Connection:
        """The connection of a read route: the standby's when it may serve, else the primary's."""
        state = scope.setdefault("state", {})
        if not scope.get(PRIMARY_ONLY):
            reason = self.unusable()
            if reason is None:
                try:
                    conn: asyncpg.Connection = await stack.open(self.read_pool, self.acquire_timeout)
                except TimeoutError:  # every standby connection busy: not a sign it is down
                    self.fallback("pool_timeout")
                except CONNECTION_LOST as exc:
                    log.warning("read replica: no connection (%r); reading from the primary", exc)
                    self.mark_down()
                    self.fallback("connection_lost")
                else:
                    state[ON_REPLICA] = True  # counted once it answered (`answered`)
                    return conn
            else:
                self.fallback(reason)
        self.metrics.reads.labels(pool="primary").inc()
        primary: asyncpg.Connection = await stack.open(self.primary_pool, self.acquire_timeout)
        return primary

    # --- the monitor --------------------------------------------------------------------------

    async def check(self) -> None:
        """One look at both servers: the primary's WAL position (a lag sample), then the
        standby's replay position, from which the lag and the replayed writes follow."""
        now = time.monotonic()
        try:
            primary = await self._monitor_primary.run(rrepo.wal_insert_lsn)
            if not self._samples or self._samples[-1][1] != primary:
                self._samples.append((now, primary))
        except Exception as exc:  # the primary down: the lag is measured on the samples taken
            log.debug("read replica monitor: primary position not read: %r", exc)
        try:
            in_recovery, replayed = await self._monitor_standby.run(rrepo.standby_position)
        except Exception as exc:
            if self.state != "down":
                log.warning("read replica: down (%r); reads go to the primary", exc)
            self.mark_down()
            expire = getattr(self.read_pool, "expire_connections", None)
            if expire is not None:
                await expire()
            return
        if not in_recovery or replayed is None:
            if self.state != "not_standby":
                log.error("read replica: the server of HAKI_DATABASE_READ_URL is not a standby; not used")
            self.state = "not_standby"
            self.metrics.up.set(0)
            return
        self.replayed = replayed
        while self._samples and self._samples[0][1] <= replayed + PAGE_HEADER_SLACK:
            self._samples.popleft()
        self.lag_ms = (now - self._samples[0][0]) * 1000.0 if self._samples else 0.0
        if self._written:
            self._written = {k: v for k, v in self._written.items() if v > replayed}
        state: ReplicaState = "lagging" if self.lag_ms > self.max_lag_ms else "ok"
        if state != self.state:
            log.warning("read replica: %s (lag %.0f ms, limit %d ms)", state, self.lag_ms, self.max_lag_ms)
        self.state = state
        self.last_ok = now
        self.metrics.up.set(1)
        self.metrics.lag.set(self.lag_ms / 1000.0)

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.check_interval)
                try:
                    await self.check()
                except Exception as exc:  # the monitor must outlive any one failure
                    log.error("read replica monitor: check failed: %r", exc)
        finally:
            await self._monitor_primary.close()
            await self._monitor_standby.close()

    def health(self) -> ReplicaHealth:
        # A standby down or promoted has no lag: the last one measured says nothing of it now.
        lag = self.lag_ms if self.state in ("ok", "lagging") else None
        return ReplicaHealth(
            status=self.state,
            serving_reads=self.unusable() is None,
            lag_ms=None if lag is None else round(lag, 1),
            max_lag_ms=self.max_lag_ms,
        )


def router_of(state: State) -> ReadRouter | None:
    found: Any = state.get("read_router")
    return found if isinstance(found, ReadRouter) else None


# --- per request ---------------------------------------------------------------------------------


class Reads:
    """A request's view of the routing (`provide_reads`, which `provide_deps` and the trace pages
    call); without a read pool, no-ops."""

    def __init__(self, router: ReadRouter | None, scope: Scope) -> None:
        self.router = router
        self.scope = scope

    @property
    def on_replica(self) -> bool:
        """Read when used, not when built: the connection's lease decides it (service/api/deps.py)."""
        return bool(self.scope.get("state", {}).get(ON_REPLICA))

    def fresh(self, project_id: str, subject_id: str | None = None, *, traces: bool = False) -> None:
        """Raises ReadOnPrimary (the request runs again on the primary) when this request reads
        the standby and the scope has a write of this process the standby has not replayed (with
        `traces`, for a read of traces: a context call's trace too)."""
        self._fresh(project_id, subject_id, ("memory", "trace") if traces else ("memory",))

    def fresh_session(self, project_id: str) -> None:
        """A UI page read on the standby, once its session was found there: a session of the
        project this process ended since the standby's replay (a logout) runs it on the primary."""
        self._fresh(project_id, None, ("session",))

    def _fresh(self, project_id: str, subject_id: str | None, kinds: tuple[WriteKind, ...]) -> None:
        if self.on_replica and self.router is not None and self.router.stale(project_id, subject_id, kinds):
            raise ReadOnPrimary(project_id)

    def missing(self, what: str) -> None:
        """A page that found nothing on the standby asks the primary (written a moment ago?)."""
        if self.on_replica:
            raise NotFound(f"No {what} found on the read replica.")

    @property
    def trace_on(self) -> Acquire | None:
        """Where the trace of a context call whose retrieval ran on the standby is written: a
        connection of the primary (service/db/call_runner.py). None: on the call's own."""
        if not self.on_replica or self.router is None:
            return None
        return partial(self.router.primary_pool.acquire, timeout=self.router.acquire_timeout)

    async def note_write(self, conn: Conn, project_id: str, subject_id: str | None = None) -> None:
        if self.router is not None:
            await self.router.note_write(conn, project_id, subject_id)

    async def note_session_end(self, conn: Conn, project_id: str) -> None:
        if self.router is not None:
            await self.router.note_write(conn, project_id, None, kind="session")

    @property
    def trace_noted(self) -> NoteTrace | None:
        """What a context call calls once its trace committed (service/db/call_runner.py): the
        trace's scope noted for the reads of traces. None without a read pool."""
        if self.router is None:
            return None
        return partial(self.router.note_write, kind="trace")


def provide_reads(request: Request[Any, Any, Any], state: State) -> Reads:
    return Reads(router_of(state), request.scope)


# --- running a read again on the primary -----------------------------------------------------------


def rerun_reason(exc: BaseException) -> str | None:
    """Why an error answered on the standby is worth running again on the primary."""
    if isinstance(exc, ReadOnPrimary):
        return "unreplayed_write"
    if isinstance(exc, ErasedSinceRetrieval):
        return "erased_meanwhile"  # a context call read a memory erased before its trace
    if isinstance(exc, NotFound):
        return "not_found"  # e.g. the trace of a context call made a moment ago
    if isinstance(exc, Unauthorized):
        return "unknown_key"  # a key created a moment ago
    if isinstance(exc, asyncpg.ReadOnlySQLTransactionError):
        return "read_only"
    if isinstance(
        exc, asyncpg.UndefinedTableError | asyncpg.UndefinedColumnError | asyncpg.UndefinedFunctionError
    ):
        return "schema_behind"  # a migration the standby has not replayed yet
    if isinstance(exc, asyncpg.TransactionRollbackError):
        return "recovery_conflict"  # "canceling statement due to conflict with recovery"
    if isinstance(exc, TimeoutError):  # an OSError: before CONNECTION_LOST
        return "timeout"  # the client's wait ran out: a hung standby (or one out of reach)
    if isinstance(exc, CONNECTION_LOST):
        return "connection_lost"
    return None


async def rerun_after_replica_error(exc: Exception, scope: Scope) -> None:
    """After-exception hook: marks a failed read of the standby for a second run on the primary
    (the middleware below discards the error response and runs it)."""
    state = scope.get("state", {})
    if not state.get(ON_REPLICA):
        return
    reason = rerun_reason(exc)
    if reason is None:
        return
    state[RERUN] = reason
    router = router_of(scope["litestar_app"].state)
    if router is not None:
        router.fallback(reason)
        if reason in ("connection_lost", "timeout"):
            router.mark_down()  # until the monitor's next check finds it well


def fresh_scope(scope: Scope, **extra: Any) -> Any:
    """The request's scope with a new Litestar per-connection cache (it keeps only the exception
    handlers the router resolved): each run resolves its own dependencies (its own connection)
    and reads the body it is given."""
    state = {k: v for k, v in scope.get("state", {}).items() if k != CONNECTION_STATE_KEY}
    fresh: Any = {**scope, "state": state, **extra}
    ScopeState.from_scope(fresh).exception_handlers = ScopeState.from_scope(scope).exception_handlers
    return fresh


def rerun_on_primary(app: ASGIApp) -> ASGIApp:
    """ASGI middleware of the read routes: when the hook above marked the request, its response
    is dropped and the request runs again with every connection from the primary. Nothing has
    been sent then (the mark is set before the error response starts), and a read route wrote
    nothing on the standby; POST /v1/context writes its trace only after the retrieval."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        handler = scope.get("route_handler")
        read_route = handler is not None and handler.opt.get(READS)
        if scope["type"] != ScopeType.HTTP or scope.get(PRIMARY_ONLY) or not read_route:
            await app(scope, receive, send)
            return
        received: list[ReceiveMessage] = []
        first = fresh_scope(scope)
        dropped = False

        async def recording_receive() -> ReceiveMessage:
            message = await receive()
            received.append(message)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal dropped
            if message["type"] == "http.response.start" and first["state"].get(RERUN):
                dropped = True
            if not dropped:
                await send(message)

        await app(first, recording_receive, guarded_send)
        router = router_of(scope["litestar_app"].state)
        if router is not None:
            router.answered(first)
        if not dropped:
            return
        replay = iter(list(received))

        async def replayed_receive() -> ReceiveMessage:
            return next(replay, None) or await receive()

        second = fresh_scope(scope, **{PRIMARY_ONLY: True})
        if first["state"].get(RATE_CHARGED):  # the first run spent the request's token
            second["state"][RATE_CHARGED] = True
        await app(second, replayed_receive, send)

    return middleware
