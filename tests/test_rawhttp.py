"""The benchmarks' minimal HTTP/1.1 client (benchmarks/rawhttp.py) against a peer that speaks
HTTP/1.1 on a real socket: framing by length, by chunks and by the end of the connection,
keep-alive reuse, and every failure raised as RawHTTPError (the load generator counts those as
errors instead of dying)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from benchmarks import rawhttp
from benchmarks.rawhttp import RawClient, RawHTTPError


class Peer:
    """An HTTP/1.1 server of a few paths; `connections` counts the connections it accepted."""

    def __init__(self) -> None:
        self.connections = 0
        self.hung_up = 0  # connections the client closed while the peer waited to answer
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        try:
            while request := await reader.readline():
                method, path, _ = request.decode().split(" ", 2)
                headers = {}
                while (line := await reader.readline()) != b"\r\n":
                    name, _, value = line.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self.respond(reader, writer, method, path, headers, body, conn):
                    break
                await writer.drain()
        finally:
            writer.close()

    async def respond(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        conn: int,
    ) -> bool:
        """Writes the response; False when the connection ends with it."""
        if path == "/echo":
            out = json.dumps(
                {"method": method, "body": body.decode(), "conn": conn, "auth": headers.get("authorization")}
            ).encode()
            head = f"HTTP/1.1 201 Created\r\nServer-Timing: a;dur=1\r\nContent-Length: {len(out)}\r\n\r\n"
            writer.write(head.encode() + out)
            return True
        if path == "/chunked":
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n"
            )
            return True
        if path == "/close":
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
            return False
        if path == "/until-eof":
            writer.write(b"HTTP/1.1 200 OK\r\n\r\nto the end")
            return False
        if path == "/cut":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
            return False
        if path == "/silent":  # answers nothing; reads until the client hangs up
            if await asyncio.wait_for(reader.read(), 5) == b"":
                self.hung_up += 1
            return False
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        return True


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    p = Peer()
    p.server = await asyncio.start_server(p.handle, "127.0.0.1", 0)
    async with p.server:
        yield p


async def test_a_length_framed_response_and_its_connection_kept_alive(peer: Peer) -> None:
    async with RawClient(peer.url) as client:
        first = await client.post("/echo", json={"q": "é"}, headers={"Authorization": "Bearer k"})
        second = await client.post("/echo", json={"q": 2})
        missing = await client.request("GET", "/nowhere")
    assert first.status_code == 201
    assert first.headers["server-timing"] == "a;dur=1"
    assert first.json() == {"method": "POST", "body": '{"q":"é"}', "conn": 1, "auth": "Bearer k"}
    assert second.json()["conn"] == 1  # the same connection, kept alive
    assert (missing.status_code, missing.content) == (404, b"")
    assert peer.connections == 1


async def test_concurrent_callers_each_get_a_connection_and_give_it_back(peer: Peer) -> None:
    async with RawClient(peer.url) as client:
        answers = await asyncio.gather(*(client.post("/echo", json=i) for i in range(3)))
        assert sorted(a.json()["conn"] for a in answers) == [1, 2, 3]
        again = await asyncio.gather(*(client.post("/echo", json=i) for i in range(3)))
    assert sorted(a.json()["conn"] for a in again) == [1, 2, 3]
    assert peer.connections == 3


async def test_chunked_and_connection_framed_bodies(peer: Peer) -> None:
    async with RawClient(peer.url) as client:
        chunked = await client.request("GET", "/chunked")
        after_chunks = await client.post("/echo", json=None)
        to_the_end = await client.request("GET", "/until-eof")
        after_eof = await client.post("/echo", json=None)
    assert chunked.content == b"hello"
    assert after_chunks.json()["conn"] == 1  # the chunked body was read to its end
    assert to_the_end.content == b"to the end"
    assert after_eof.json()["conn"] == 2  # a body framed by the close leaves no connection


async def test_connection_close_is_not_reused(peer: Peer) -> None:
    async with RawClient(peer.url) as client:
        closed = await client.request("GET", "/close")
        after = await client.post("/echo", json=None)
    assert closed.text == "ok"
    assert after.json()["conn"] == 2


async def test_a_connection_idle_too_long_is_not_reused(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A server closes idle keep-alive connections (uvicorn: after 5 s); one idle that long is
    # closed by the client instead of carrying a request into an EOF.
    monkeypatch.setattr(rawhttp, "MAX_IDLE_SECONDS", 0.05)
    async with RawClient(peer.url) as client:
        first = await client.post("/echo", json=None)
        soon = await client.post("/echo", json=None)
        await asyncio.sleep(0.1)
        late = await client.post("/echo", json=None)
    assert [r.json()["conn"] for r in (first, soon, late)] == [1, 1, 2]


async def test_failures_are_raw_http_errors_and_leave_no_broken_connection(peer: Peer) -> None:
    async with RawClient(peer.url, timeout=0.3) as client:
        with pytest.raises(RawHTTPError, match="IncompleteReadError"):
            await client.request("GET", "/cut")
        with pytest.raises(RawHTTPError, match="/silent: TimeoutError"):
            await client.request("GET", "/silent")
        after = await client.post("/echo", json=None)
    assert after.json()["conn"] == 3
    for _ in range(100):  # the timed-out connection was closed by the client, not left open
        if peer.hung_up:
            break
        await asyncio.sleep(0.01)
    assert peer.hung_up == 1
    with pytest.raises(RawHTTPError, match="ConnectionRefusedError"):
        await RawClient("http://127.0.0.1:9").request("GET", "/")
    with pytest.raises(ValueError, match="plain http"):
        RawClient("https://example.com")
