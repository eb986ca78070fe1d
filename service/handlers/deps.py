"""Per-request dependencies: one pooled connection lent per request, and the caller's key."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any

import asyncpg
from litestar import Request
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Dependency

from service.auth import Principal, authenticate
from service.embedder import Embedder
from service.errors import ErrorBody
from service.settings import Settings

# Injected objects are ours, not client input: Litestar must not try to validate them.
Conn = Annotated[asyncpg.Connection, Dependency(skip_validation=True)]
Caller = Annotated[Principal, Dependency(skip_validation=True)]
EmbedderDep = Annotated[Embedder, Dependency(skip_validation=True)]
SettingsDep = Annotated[Settings, Dependency(skip_validation=True)]


async def provide_conn(state: State) -> AsyncGenerator[asyncpg.Connection, None]:
    settings: Settings = state.settings
    async with state.pool.acquire(timeout=settings.pool_acquire_timeout_seconds) as conn:
        yield conn


async def provide_principal(request: Request[Any, Any, Any], conn: Conn) -> Principal:
    return await authenticate(conn, request.headers.get("authorization"))


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
    409: _spec("conflict"),
    422: _spec("validation_error: a rule only the service can check; `details.field` names the field"),
    503: _spec("unavailable: database or embedder down, or a statement timeout; retry"),
}
