"""`/mcp`: the MCP server (service/mcp_server.py) mounted on the service, built by the lifespan.

The MCP SDK costs 2.1 s to import and 37 ms per server built (measured here, 2 cores): an app
that never starts its lifespan (the in-process test clients, hundreds per test run) pays neither.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from litestar.handlers import ASGIRouteHandler, asgi

if TYPE_CHECKING:
    from service.mcp_server import McpEndpoint

MCP_PATH = "/mcp"


async def send_error(send: Any, status: int, code: str, message: str) -> None:
    """The contract's error body, from a raw ASGI app."""
    body = json.dumps({"code": code, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="haki"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class McpMount:
    def __init__(self) -> None:
        self.endpoint: McpEndpoint | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        from service.mcp_server import McpEndpoint

        self.endpoint = McpEndpoint()
        try:
            async with self.endpoint.lifespan():
                yield
        finally:
            self.endpoint = None

    def handler(self) -> ASGIRouteHandler:
        # MCP over streamable HTTP: the same keys and projects as the API.
        @asgi(MCP_PATH, is_mount=True, copy_scope=True)
        async def mcp(scope: Any, receive: Any, send: Any) -> None:
            if self.endpoint is None:
                await send_error(send, 503, "unavailable", "The MCP server starts with the app; retry.")
                return
            await self.endpoint(scope, receive, send)

        return mcp
