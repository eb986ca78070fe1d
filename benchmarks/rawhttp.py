"""A minimal HTTP/1.1 keep-alive client for the load generators: the server's cost, not the client's.

On this machine httpx's AsyncClient spends about 2 ms a call of its own on a context call (600
fresh questions against the 10k scope, the two clients interleaved request by request:
`unified` p50 19.47 ms with httpx against 17.52 ms with this client, `facts_first` 13.64
against 11.69), on the same two cores as the server it measures. Native load tools (wrk, hey)
exist for that reason; this is the same idea in a page of Python, so the benchmarks need no
binary. It does only what they send: a request with a body on a kept-alive connection, and a
response framed by Content-Length or chunked. Not for the service or the SDK, which keep httpx
(timeouts, retries, TLS, proxies).
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# A connection idle this long is closed rather than reused: uvicorn closes an idle keep-alive
# connection after 5 s (timeout_keep_alive), and a request written into it gets EOF.
MAX_IDLE_SECONDS = 4.0


class RawHTTPError(Exception):
    """The connection failed or the response was not HTTP/1.1 this client can read."""


@dataclass(frozen=True)
class RawResponse:
    status_code: int
    headers: dict[str, str]  # names in lower case
    content: bytes

    def json(self) -> Any:
        return jsonlib.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class RawClient:
    """Keeps one idle connection per request that finished, so N concurrent callers hold N."""

    def __init__(self, base_url: str, timeout: float = 60.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"plain http://host:port only, not {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout = timeout
        self._idle: list[tuple[Connection, float]] = []  # with the monotonic time it went idle

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        while self._idle:
            (_, writer), _ = self._idle.pop()
            writer.close()

    def _take_idle(self) -> Connection | None:
        """The most recently idle connection the server has not closed yet, if any."""
        while self._idle:
            conn, since = self._idle.pop()
            if time.monotonic() - since < MAX_IDLE_SECONDS:
                return conn
            conn[1].close()
        return None

    async def post(self, path: str, *, json: Any, headers: dict[str, str] | None = None) -> RawResponse:
        body = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        return await self.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> RawResponse:
        conn = self._take_idle()
        try:
            async with asyncio.timeout(self.timeout):
                if conn is None:
                    conn = await self._connect()
                response, reusable = await self._exchange(conn, method, path, body, headers or {})
        except (OSError, EOFError, ValueError, TimeoutError, asyncio.IncompleteReadError) as exc:
            if conn is not None:
                conn[1].close()
            raise RawHTTPError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if reusable:
            self._idle.append((conn, time.monotonic()))
        else:
            conn[1].close()
        return response

    async def _connect(self) -> Connection:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        sock = writer.get_extra_info("socket")
        if sock is not None:  # a request is one write: nothing to gain from Nagle's delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return reader, writer

    async def _exchange(
        self, conn: Connection, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[RawResponse, bool]:
        reader, writer = conn
        lines = [
            f"{method} {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            f"Content-Length: {len(body)}",
        ]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        status_line = await reader.readline()
        if not status_line:
            raise EOFError("the server closed the connection")
        version, status, *_ = status_line.split(None, 2)
        if version != b"HTTP/1.1":
            raise ValueError(f"unexpected status line {status_line!r}")
        got: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            key = name.strip().lower()
            got[key] = f"{got[key]}, {value.strip()}" if key in got else value.strip()
        code = int(status)
        reusable = got.get("connection", "").lower() != "close"
        if method == "HEAD" or code in (204, 304) or 100 <= code < 200:
            content = b""
        elif "content-length" in got:
            content = await reader.readexactly(int(got["content-length"]))
        elif got.get("transfer-encoding", "").lower() == "chunked":
            content = await self._chunks(reader)
        else:  # framed by the end of the connection
            content, reusable = await reader.read(), False
        return RawResponse(code, got, content), reusable

    @staticmethod
    async def _chunks(reader: asyncio.StreamReader) -> bytes:
        parts: list[bytes] = []
        while size := int((await reader.readline()).split(b";", 1)[0].strip(), 16):
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)  # the CRLF after the chunk
        while await reader.readline() not in (b"\r\n", b""):  # trailers
            pass
        return b"".join(parts)
