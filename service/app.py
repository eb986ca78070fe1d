"""The app factory: `create_app(settings)` builds a Litestar app; nothing happens at import time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager, suppress
from typing import Any

from litestar import Litestar, Request, Response
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme

from service import __version__
from service.api.context import ContextController
from service.api.deps import (
    after_strict_body,
    provide_conn,
    provide_deps,
    provide_key,
    release_after_exception,
)
from service.api.docs_ui import DOCS_PATH, OfflineSwaggerRenderPlugin, docs_router
from service.api.extract import ExtractController
from service.api.health import healthz
from service.api.lifecycle import LifecycleController
from service.api.mcp_mount import McpMount
from service.api.memory import (
    ConflictsController,
    EventsController,
    FactsController,
    provide_project_id,
)
from service.api.openapi_schema import StrictStructSchemaPlugin
from service.api.ratelimit import RateLimiter, WorkRateLimiter
from service.api.strict_body import check_request
from service.api.ui import TraceInspector, is_ui_path, refused_page
from service.api.webhooks import WebhooksController
from service.db import create_pool, create_read_pool
from service.db.embedded import Supervisor
from service.db.replica import ReadRouter, rerun_after_replica_error, rerun_on_primary
from service.embedding.embedder import Embedder, build_embedder, check_embedder
from service.errors import handle_exception, unavailable_when_cut
from service.memory import event_context, retention
from service.memory.statistics import StatisticsKeeper
from service.observability.metrics import Metrics, metrics_endpoint
from service.settings import Settings
from service.webhooks import worker as webhook_worker


async def _stopped(task: asyncio.Task[Any] | None) -> None:
    """A background task of the app cancelled and awaited (None: it never started)."""
    if task is not None:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


def _handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The contract's JSON error body, but under /ui (an id that is not a UUID, an unknown page,
    a wrong method) the browser's error page with the pages' security headers."""
    if is_ui_path(request.url.path):
        return refused_page(request, exc)
    return handle_exception(request, exc)


def create_app(
    settings: Settings,
    *,
    pool: Any | None = None,
    embedder: Embedder | None = None,
) -> Litestar:
    """`pool` and `embedder`, when given, are owned by the caller (tests share them across apps)."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncGenerator[None, None]:
        own_embedder = embedder is None
        own_pool = pool is None
        if own_embedder:
            app.state.embedder = build_embedder(settings)
            await check_embedder(app.state.embedder)
        if own_pool:
            app.state.pool = await create_pool(settings)
        monitoring = await start_read_pool(app) if router is not None else None
        supervising = None
        if own_pool and settings.database_url is None:  # embedded mode: Haki owns the server
            supervising = asyncio.create_task(supervisor(app).run(), name="embedded-postgres-supervisor")
        purging = None
        if own_pool and settings.trace_retention_days > 0:
            # Trace retention: only on the pool this app owns (a lent pool is the
            # caller's, and a test's single connection cannot serve two tasks at once).
            purging = asyncio.create_task(
                retention.run_forever(app.state.pool, settings, metrics.observe_purge),
                name="trace-retention",
            )
        delivering = None
        if own_pool:
            # Webhook deliveries: only on a pool this app owns, as above (docs/webhooks.md).
            delivering = asyncio.create_task(
                webhook_worker.run_forever(app.state.pool, settings, metrics.observe_webhooks),
                name="webhook-delivery",
            )
        contextualizing = None
        if own_pool and settings.event_context:
            # Events' vectors in context: only on a pool this app owns, as above.
            contextualizing = asyncio.create_task(
                event_context.run_forever(app.state.pool, app.state.embedder), name="event-context"
            )
        keeping = None
        app.state.statistics = None
        if own_pool:
            # Planner statistics after bulk writes: only on a pool this app owns, as above.
            app.state.statistics = StatisticsKeeper(
                app.state.pool, on_refresh=metrics.observe_statistics_refresh
            )
            keeping = asyncio.create_task(app.state.statistics.run(), name="planner-statistics")
        try:
            async with mcp_mount.running():
                yield
        finally:
            await _stopped(contextualizing)
            await _stopped(delivering)
            await _stopped(keeping)
            await _stopped(purging)
            if monitoring is not None:
                await _stopped(monitoring)
                await app.state.read_router.read_pool.close()
            await _stopped(supervising)
            if own_pool:
                await app.state.pool.close()
            if own_embedder:
                await app.state.embedder.aclose()

    metrics = Metrics()
    # Reads on a streaming standby (service/db/replica.py); None keeps today's single pool.
    router = ReadRouter(settings, metrics.registry) if settings.database_read_url else None

    async def start_read_pool(app: Litestar) -> asyncio.Task[None]:
        """The standby's pool and its monitor; the first check runs before the first request,
        so a standby that is up serves from the start. A standby down at start-up is not fatal:
        the primary serves until the monitor finds it."""
        assert router is not None and settings.database_read_url is not None
        router.primary_pool = app.state.pool
        router.read_pool = await create_read_pool(settings, settings.database_read_url)
        await router.check()
        return asyncio.create_task(router.run(), name="read-replica-monitor")

    mcp_mount = McpMount()

    def supervisor(app: Litestar) -> Supervisor:
        async def restarted() -> None:
            metrics.embedded_restarts.inc()
            await app.state.pool.expire_connections()  # all dead: replaced now, not one failure each

        return Supervisor(settings.data_dir, on_restart=restarted)

    app = Litestar(
        route_handlers=[
            healthz,
            FactsController,
            EventsController,
            ConflictsController,
            ContextController,
            LifecycleController,
            metrics_endpoint,
            TraceInspector,
            ExtractController,
            WebhooksController,
            mcp_mount.handler(),
        ],
        lifespan=[lifespan],
        plugins=[StrictStructSchemaPlugin()],
        # Inside the timing (create_app wraps the whole handler), so that a request cut by the
        # shutdown is counted as its 503.
        middleware=[unavailable_when_cut] + ([rerun_on_primary] if router is not None else []),
        state=State(
            {
                "settings": settings,
                "pool": pool,
                "embedder": embedder,
                "rate_limiter": RateLimiter(settings.rate_limit_per_minute),
                "work_limiter": WorkRateLimiter(settings.embed_chars_per_minute),
                "metrics": metrics,
                "read_router": router,
            }
        ),
        dependencies={
            "conn": Provide(provide_conn),
            # An authenticated route's checks after the hook's (below), in this order: the key
            # (401, then 429 over its rate), then the strict decoding of the body (400); a
            # handler's `principal` is the key once both passed.
            "key": Provide(provide_key),
            "principal": Provide(after_strict_body),
            "project_id": Provide(provide_project_id),
            "deps": Provide(provide_deps, sync_to_thread=False),
        },
        exception_handlers={Exception: _handle_exception},
        # The URL's percent-escapes, then media type, nesting depth and JSON syntax of a body, before
        # it is decoded or the key read.
        before_request=check_request,
        after_exception=[release_after_exception]
        + ([rerun_after_replica_error] if router is not None else []),
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="Haki",
            version=__version__,
            description="Memory service for AI agents: facts and dated events per subject, and "
            "explainable context packets under a token budget. Every route but /healthz and the "
            "OpenAPI pages needs `Authorization: Bearer <key>`.",
            # Swagger UI at /docs and /docs/swagger, on assets the service serves itself: the
            # pages load nothing from another host (service/api/docs_ui.py).
            path=DOCS_PATH,
            openapi_router=docs_router(),
            render_plugins=[OfflineSwaggerRenderPlugin(path="/swagger")],
            components=Components(
                security_schemes={
                    "bearer": SecurityScheme(
                        type="http", scheme="bearer", description="A Haki API key (hk_...)."
                    )
                }
            ),
            security=[{"bearer": []}],
        ),
        debug=False,
    )
    # Around routing too, so that a 400 malformed path id, a 404 or a 405 is counted.
    app.asgi_handler = metrics.timing(app.asgi_handler)
    return app
