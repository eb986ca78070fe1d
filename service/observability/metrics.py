"""Prometheus metrics: `GET /metrics` in the text exposition format.

Each app owns its registry (not prometheus_client's global one), so several apps in one process
(tests, workers) never collide and every app reports only its own traffic.

Labels stay bounded: the route *template* (never the raw path, which holds ids; a mount's path,
`/mcp`; `<unmatched>` for a request refused while routing: 400 malformed path id, 404, 405), the
method (`<other>` outside HTTP's) and the status code. No project or subject label: tenants are
unbounded, and a scrape of per-tenant series would also leak tenant names to whoever reads it.

`/metrics` needs its own token, `Authorization: Bearer <HAKI_METRICS_TOKEN>` (never a project key:
it aggregates every project), and is closed without one. It carries no tenant data, yet tells
about traffic: expose it on an internal network only (see docs/scaling.md, "Metrics").
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Iterator
from typing import Any

from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.enums import HttpMethod, ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from service.api.auth import given_bearer
from service.errors import Unauthorized
from service.observability.timing import StageTimer
from service.repository import events as events_repo
from service.repository import traces as repo
from service.repository import webhooks as webhooks_repo
from service.structs import ContextPacket

log = logging.getLogger("haki.metrics")

# Request latencies from a cached read (~ms) to a 1,000-fact write batch on the CPU model (~s).
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Assembler stages run from sub-millisecond (pack) to tens of milliseconds (embed, candidates).
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# A scrape must answer even while the database does not: the gauge then keeps its last value.
SCRAPE_QUERY_TIMEOUT_SECONDS = 2.0
# What a webhook delivery attempt may come to (Round's fields, service/webhooks/worker.py).
WEBHOOK_OUTCOMES = ("delivered", "failed", "dead")
# The bounded labels of a request that matched no route, and of a method outside HTTP's: requests
# refused while routing are timed too, and an ASGI server other than httptools passes any method.
UNMATCHED_ROUTE = "<unmatched>"
OTHER_METHOD = "<other>"
HTTP_METHODS = frozenset(method.value for method in HttpMethod)


def route_label(scope: Scope) -> str:
    """The route template Litestar's router wrote into the scope; for a mount (`/mcp`), whose
    template Litestar leaves empty (its router returns the root node's), the mount's own path."""
    template = scope.get("path_template")
    if template:
        return str(template)
    handler = scope.get("route_handler")
    paths = sorted(getattr(handler, "paths", ()) or ())
    return paths[0] if paths else UNMATCHED_ROUTE


class EmbedderCollector:
    """The local model's scheduler, read at each scrape (service/embedding/scheduler.py keeps the
    figures for the process, whichever app serves them): by purpose, how long embeddings waited for
    their first forward pass, how long passes ran, and texts embedded. Nothing for an embedder
    without a scheduler (hash, openai)."""

    def __init__(self) -> None:
        self.embedder: Any = None  # set by Metrics.refresh before each scrape

    def collect(self) -> Iterator[Metric]:
        stats = getattr(getattr(self.embedder, "scheduler", None), "stats", None)
        if stats is None:
            return
        wait = HistogramMetricFamily(
            "haki_embed_wait_seconds",
            "Local model: how long an embedding (a context call's query, a write's texts) waited "
            "for its first forward pass, by purpose (HAKI_EMBED_WRITE_LANE).",
            labels=["purpose"],
        )
        passes = HistogramMetricFamily(
            "haki_embed_pass_seconds",
            "Local model: forward passes (a micro-batch of queries, a chunk of writes) by purpose.",
            labels=["purpose"],
        )
        texts = CounterMetricFamily(
            "haki_embed_texts", "Local model: texts embedded, by purpose.", labels=["purpose"]
        )
        for purpose, lane in stats.items():
            wait.add_metric([purpose], lane.wait.cumulative(), lane.wait.total)
            passes.add_metric([purpose], lane.passes.cumulative(), lane.passes.total)
            texts.add_metric([purpose], lane.texts)
        yield from (wait, passes, texts)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.embedder_stats = EmbedderCollector()
        self.registry.register(self.embedder_stats)
        self.request_duration = Histogram(
            "haki_http_request_duration_seconds",
            "HTTP request latency by route template, method and status code.",
            ["method", "route", "status"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.stage_duration = Histogram(
            "haki_context_stage_duration_seconds",
            "Context Assembler time per stage (embed, candidates, pack, multi_hop, episodes, trace) "
            "and profile.",
            ["stage", "profile"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.context_calls = Counter(
            "haki_context_calls",
            "POST /v1/context calls answered, by packet status and profile.",
            ["status", "profile"],
            registry=self.registry,
        )
        self.injections = Counter(
            "haki_context_injections",
            "POST /v1/context calls that served at least one fact (injection rate = this / calls).",
            registry=self.registry,
        )
        self.open_conflicts = Gauge(
            "haki_open_conflicts",
            "Open conflict sets, all projects together (refreshed at each scrape).",
            registry=self.registry,
        )
        self.event_context_pending = Gauge(
            "haki_event_context_pending",
            "Events whose vector in context is still to be made, all projects together, counted "
            "up to 100,001 (refreshed at each scrape; docs/spec/context-profiles.md, rule 8).",
            registry=self.registry,
        )
        self.database_up = Gauge(
            "haki_database_up",
            "1 when the last scrape could query the database, else 0.",
            registry=self.registry,
        )
        self.embedded_restarts = Counter(
            "haki_embedded_postgres_restarts",
            "Times this process found the embedded PostgreSQL's postmaster dead and had it "
            "running again (embedded mode only; service/db/embedded.py Supervisor).",
            registry=self.registry,
        )
        # Decisions are no table's rows since migration 0026 (arrays on their call's row): they
        # have a counter of their own, and the rows' counter counts context_calls rows only.
        self.trace_rows_purged = self._counter_by(
            "haki_trace_rows_purged",
            "Rows deleted by trace retention (HAKI_TRACE_RETENTION_DAYS) in this process, by table: "
            "context_calls (one a context call; its decisions are counted by "
            "haki_trace_decisions_purged_total).",
            "table",
            ("context_calls",),
        )
        self.trace_decisions_purged = Counter(
            "haki_trace_decisions_purged",
            "Decisions deleted by trace retention in this process with their context calls, "
            "whether held in their call's row or, for calls traced before migration 0026, as "
            "context_traces rows.",
            registry=self.registry,
        )
        self.statistics_refreshes = self._counter_by(
            "haki_planner_statistics_refreshes",
            "ANALYZEs of a memory table run by this process after its bulk writes, by table "
            "(service/memory/statistics.py).",
            "table",
            ("facts", "events"),
        )
        self.webhook_attempts = self._counter_by(
            "haki_webhook_attempts",
            "Webhook delivery attempts made by this process, by outcome: delivered (a 2xx), failed "
            "(to be retried) or dead (the last attempt failed: a dead letter).",
            "outcome",
            WEBHOOK_OUTCOMES,
        )
        self.webhook_dead_letters = Gauge(
            "haki_webhook_dead_letters",
            "Webhook deliveries in the dead-letter state, all projects together (refreshed at each "
            "scrape; GET /v1/webhooks/{id}/deliveries?status=dead lists a webhook's).",
            registry=self.registry,
        )

    def _counter_by(self, name: str, documentation: str, label: str, values: tuple[str, ...]) -> Counter:
        """A counter by one label, each of whose `values` is shown at 0 before its first count
        (a rate or an alert on a series that does not exist yet sees nothing)."""
        counter = Counter(name, documentation, [label], registry=self.registry)
        for value in values:
            counter.labels(value)
        return counter

    def observe_webhooks(self, done: Any) -> None:
        """A delivery round of service/webhooks/worker.py (its `Round`)."""
        for outcome in WEBHOOK_OUTCOMES:
            self.webhook_attempts.labels(outcome=outcome).inc(getattr(done, outcome))

    def observe_statistics_refresh(self, table: str) -> None:
        self.statistics_refreshes.labels(table=table).inc()

    def observe_purge(self, calls: int, decisions: int) -> None:
        self.trace_rows_purged.labels(table="context_calls").inc(calls)
        self.trace_decisions_purged.inc(decisions)

    def observe_context(self, timer: StageTimer, packet: ContextPacket) -> None:
        for stage, ms in timer.ms.items():
            self.stage_duration.labels(stage=stage, profile=packet.profile).observe(ms / 1000.0)
        self.context_calls.labels(status=packet.status, profile=packet.profile).inc()
        if packet.facts:
            self.injections.inc()

    def timing(self, app: ASGIApp) -> ASGIApp:
        """Times every HTTP request, wrapped around the whole app (its `asgi_handler`, routing and
        exception handling included), not as route middleware: a request refused while routing
        (400 malformed path id, 404, 405) never reaches a route's middleware, and an error-rate
        alert must see it."""

        async def timed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            status = 500
            start = time.perf_counter()

            async def send_and_record_status(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await app(scope, receive, send_and_record_status)
            finally:
                method = scope["method"] if scope["method"] in HTTP_METHODS else OTHER_METHOD
                self.request_duration.labels(
                    method=method, route=route_label(scope), status=str(status)
                ).observe(time.perf_counter() - start)

        return timed

    async def refresh(self, state: State) -> None:
        """Scrape-time gauges: cheap cross-project counts (index scans of partial indexes); the
        embedder's figures are read as they are."""
        self.embedder_stats.embedder = state.get("embedder")
        try:
            async with asyncio.timeout(SCRAPE_QUERY_TIMEOUT_SECONDS):
                async with state.pool.acquire(timeout=SCRAPE_QUERY_TIMEOUT_SECONDS) as conn:
                    self.open_conflicts.set(await repo.count_open_conflicts_all_projects(conn))
                    self.webhook_dead_letters.set(await webhooks_repo.count_dead_letters_all_projects(conn))
                    pending = await events_repo.count_pending_contexts_all_projects(conn)
                    self.event_context_pending.set(pending)
        except Exception as exc:  # a scrape must not fail because the database does
            log.warning("metrics: open conflicts not refreshed: %r", exc)
            self.database_up.set(0)
        else:
            self.database_up.set(1)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def metrics_of(state: State) -> Metrics | None:
    found: Any = state.get("metrics")
    return found if isinstance(found, Metrics) else None


def observe_context(state: State, timer: StageTimer, packet: ContextPacket) -> None:
    metrics = metrics_of(state)
    if metrics is not None:
        metrics.observe_context(timer, packet)


@get(
    "/metrics",
    include_in_schema=False,
    media_type=CONTENT_TYPE_LATEST,
    summary="Prometheus metrics, with `Authorization: Bearer <HAKI_METRICS_TOKEN>`",
)
async def metrics_endpoint(request: Request[Any, Any, Any], state: State) -> Response[bytes]:
    metrics = metrics_of(state)
    if metrics is None:
        return Response(b"", status_code=404, media_type=CONTENT_TYPE_LATEST)
    token = state.settings.metrics_token
    # Every route but /healthz and the API docs needs a bearer (docs/spec/api.md). Project keys
    # never open /metrics: it aggregates every project, so it has its own token, and is closed
    # without one.
    if token is None:
        raise Unauthorized(
            "GET /metrics is closed: set HAKI_METRICS_TOKEN on the server and send it as "
            "`Authorization: Bearer <token>`."
        )
    given = given_bearer(request.headers.get("authorization")) or ""
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise Unauthorized("GET /metrics needs `Authorization: Bearer <HAKI_METRICS_TOKEN>`.")
    await metrics.refresh(state)
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
