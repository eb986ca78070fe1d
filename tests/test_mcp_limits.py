"""/mcp's body limit is HAKI_MAX_BODY_BYTES, as on every route (docs/spec/api.md, Limits): checked
by Haki before the key and answered with the contract's error body; the MCP SDK's own limit
(a plain-text 413 over 4 MiB by default) never binds. In process, with the app's lifespan run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import httpx
import msgspec
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

from service.embedding.embedder import Embedder
from service.settings import Settings
from tests.helpers import assert_error, bearer
from tests.helpers.app import asgi_transport
from tests.helpers.mcp_sessions import mcp_in_process

PING = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
ACCEPT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def ping_of(size: int) -> bytes:
    """An MCP ping of exactly `size` bytes: JSON takes any whitespace after its value."""
    return PING + b" " * (size - len(PING))


@asynccontextmanager
async def limited_client(
    settings: Settings, conn: asyncpg.Connection, embedder: Embedder, key: str, max_body_bytes: int
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client (no key of its own) on an app with HAKI_MAX_BODY_BYTES=`max_body_bytes`
    whose lifespan built the /mcp server."""
    limited = msgspec.structs.replace(settings, max_body_bytes=max_body_bytes)
    async with (
        mcp_in_process(limited, conn, embedder, key) as (app, _, _),
        httpx.AsyncClient(transport=asgi_transport(app), base_url="http://haki.test") as client,
    ):
        yield client


async def test_a_body_over_max_body_bytes_is_a_413_in_the_error_shape(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    async with limited_client(settings, conn, hash_embedder, key, max_body_bytes=300) as client:
        r = await client.post("/mcp", content=ping_of(300), headers={**ACCEPT, **bearer(key)})
        assert r.status_code == 200 and r.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}, r.text
        r = await client.post("/mcp", content=ping_of(301), headers={**ACCEPT, **bearer(key)})
        body = assert_error(r, 413, "payload_too_large")
        assert "HAKI_MAX_BODY_BYTES (300 bytes)" in body["message"] and body["details"] == {
            "max_body_bytes": 300
        }

        # Before the key is looked up, as on the routes.
        for path in ("/v1/facts", "/mcp"):
            r = await client.post(path, content=ping_of(301), headers=ACCEPT)
            assert_error(r, 413, "payload_too_large")

        async def chunks() -> AsyncIterator[bytes]:
            # No Content-Length: the limit holds while the body streams in.
            raw = ping_of(301)
            for i in range(0, len(raw), 100):
                yield raw[i : i + 100]

        r = await client.post("/mcp", content=chunks(), headers={**ACCEPT, **bearer(key)})
        assert_error(r, 413, "payload_too_large")


async def test_the_limit_is_haki_s_not_the_mcp_sdk_s(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    # A body the SDK's default limit refuses is served under a larger HAKI_MAX_BODY_BYTES, and
    # that limit, not the SDK's, is where the 413 starts.
    limit = 2 * DEFAULT_MAX_REQUEST_BODY_SIZE
    async with limited_client(settings, conn, hash_embedder, key, max_body_bytes=limit) as client:
        r = await client.post(
            "/mcp", content=ping_of(DEFAULT_MAX_REQUEST_BODY_SIZE + 1), headers={**ACCEPT, **bearer(key)}
        )
        assert r.status_code == 200 and r.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}, r.text
        r = await client.post("/mcp", content=ping_of(limit + 1), headers={**ACCEPT, **bearer(key)})
        assert_error(r, 413, "payload_too_large")


async def test_what_the_stateless_endpoint_cannot_answer_is_refused_in_the_error_shape(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """A GET would open an event stream on which nothing is ever sent (the client waited for
    ever); the SDK's own refusals were JSON-RPC or plain text."""
    async with limited_client(settings, conn, hash_embedder, key, max_body_bytes=1 << 20) as client:
        for method in ("GET", "DELETE", "PUT", "PATCH", "OPTIONS"):
            r = await client.request(method, "/mcp", headers={**ACCEPT, **bearer(key)}, timeout=5)
            assert_error(r, 405, "method_not_allowed")
            assert r.headers["allow"] == "POST"
        for content_type in ("text/plain", "", "application/x-www-form-urlencoded"):
            headers = {**ACCEPT, **bearer(key), "Content-Type": content_type}
            assert_error(
                await client.post("/mcp", content=PING, headers=headers), 415, "unsupported_media_type"
            )
        for content_type in ("application/json; charset=utf-8", "Application/JSON"):
            headers = {**ACCEPT, **bearer(key), "Content-Type": content_type}
            assert (await client.post("/mcp", content=PING, headers=headers)).status_code == 200
        # A pin that is not UTF-8 once percent-decoded, as on the routes (it read as "\ufffd").
        r = await client.post("/mcp?project_id=%FF", content=PING, headers={**ACCEPT, **bearer(key)})
        assert_error(r, 400, "validation_error", field="project_id")


async def test_a_path_below_mcp_is_a_404_in_the_error_shape(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """The mount receives every path below /mcp: the SDK's router answered them with a plain-text
    404 "Not Found" (a bridge at HAKI_URL=http://host/mcp asked /mcp/mcp)."""
    async with limited_client(settings, conn, hash_embedder, key, max_body_bytes=1 << 20) as client:
        for path in ("/mcp/x", "/mcp/mcp", "/mcp/a/b"):
            for headers in ({**ACCEPT, **bearer(key)}, ACCEPT):
                r = await client.post(path, content=PING, headers=headers)
                body = assert_error(r, 404, "not_found")
                assert body["message"] == f"No route {path}: the MCP endpoint is /mcp itself.", body
        for path in ("/mcp", "/mcp/"):
            r = await client.post(path, content=PING, headers={**ACCEPT, **bearer(key)})
            assert r.status_code == 200 and r.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}, (
                path,
                r.text,
            )
