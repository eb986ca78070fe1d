"""`/mcp`: the MCP server (service/api/mcp_server.py) mounted on the service, built by the lifespan.

The MCP SDK costs 2.1 s to import and 37 ms per server built (measured here, 2 cores): an app
that never starts its lifespan (the in-process test clients, hundreds per test run) pays neither.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from litestar.handlers import ASGIRouteHandler, asgi

from service.errors import UNAVAILABLE_RETRY_AFTER_SECONDS, send_error

if TYPE_CHECKING:
    from service.api.mcp_server import McpEndpoint

MCP_PATH = "/mcp"


class McpMount:
    def __init__(self) -> None:
        self.endpoint: McpEndpoint | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        from service.api.mcp_server import McpEndpoint

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
            # A mount receives every path below it (the rest in scope["path"]): the SDK's own router
            # answered those with a plain-text 404.
            rest = scope["path"]
            if rest.strip("/"):
                message = f"No route {MCP_PATH}{rest.rstrip('/')}: the MCP endpoint is {MCP_PATH} itself."
                await send_error(send, 404, "not_found", message)
                return
            if self.endpoint is None:
                retry = [(b"retry-after", str(UNAVAILABLE_RETRY_AFTER_SECONDS).encode())]
                await send_error(
                    send, 503, "unavailable", "The MCP server starts with the app; retry.", retry
                )
                return
            await self.endpoint(scope, receive, send)

        return mcp
