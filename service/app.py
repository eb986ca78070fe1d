"""The app factory: `create_app(settings)` builds a Litestar app; nothing happens at import time."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import ScalarRenderPlugin, SwaggerRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from service import __version__
from service.db import create_pool
from service.embedder import Embedder, build_embedder, check_embedder
from service.errors import handle_exception
from service.handlers.context import ContextController
from service.handlers.deps import (
    provide_conn,
    provide_embedder,
    provide_principal,
    provide_settings,
    release_after_exception,
)
from service.handlers.health import healthz
from service.handlers.memory import ConflictsController, EventsController, FactsController
from service.observability.metrics import Metrics, metrics_endpoint
from service.observability.ui import TraceInspector
from service.ratelimit import RateLimiter, WorkRateLimiter
from service.settings import Settings


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
        try:
            yield
        finally:
            if own_pool:
                await app.state.pool.close()
            if own_embedder:
                await app.state.embedder.aclose()

    metrics = Metrics()
    return Litestar(
        route_handlers=[
            healthz,
            FactsController,
            EventsController,
            ConflictsController,
            ContextController,
            metrics_endpoint,
            TraceInspector,
        ],
        lifespan=[lifespan],
        middleware=[metrics.middleware],
        state=State(
            {
                "settings": settings,
                "pool": pool,
                "embedder": embedder,
                "rate_limiter": RateLimiter(settings.rate_limit_per_minute),
                "work_limiter": WorkRateLimiter(settings.embed_chars_per_minute),
                "metrics": metrics,
            }
        ),
        dependencies={
            "conn": Provide(provide_conn),
            "principal": Provide(provide_principal),
            "embedder": Provide(provide_embedder, sync_to_thread=False),
            "settings": Provide(provide_settings, sync_to_thread=False),
        },
        exception_handlers={Exception: handle_exception},
        after_exception=[release_after_exception],
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="Haki",
            version=__version__,
            description="Memory service for AI agents: facts and dated events per subject, and "
            "explainable context packets under a token budget. Every route but /healthz and the "
            "OpenAPI pages needs `Authorization: Bearer <key>`.",
            path="/docs",
            render_plugins=[ScalarRenderPlugin(), SwaggerRenderPlugin(path="/swagger")],
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
