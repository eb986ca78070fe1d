"""No transaction is open while the embedder runs, even under an Idempotency-Key.

A slow embedding used to be embedded inside the transaction that claimed the key: past
idle_in_transaction_session_timeout (60 s) PostgreSQL killed the session, the write was a 503 and
every retry failed the same way. Here a real OpenAI-compatible server (in a thread) holds each
embedding request until the test has looked at pg_stat_activity, and the real app runs on its own
pool under uvicorn (tests/helpers/serving.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest

from service.api import auth
from service.app import create_app
from service.db import connect
from service.embedding.embedder import HashEmbedder
from service.settings import Settings
from tests.helpers import bearer
from tests.helpers.serving import serve

# Texts with this prefix are held at the gate; others (the start-up probe) are answered at once.
SLOW = "slow:"


class GatedEmbeddingServer:
    """POST /v1/embeddings as OpenAI speaks it; a request holding a SLOW text waits for `release`."""

    def __init__(self) -> None:
        self.arrived = threading.Semaphore(0)
        self.release = threading.Event()
        self.slow_requests = 0
        self._hash = HashEmbedder()
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, body: bytes) -> bytes:
        payload = json.loads(body)
        texts: list[str] = payload["input"]
        if any(t.startswith(SLOW) for t in texts):
            self.slow_requests += 1
            self.arrived.release()
            self.release.wait(timeout=30)
        data = [
            {"object": "embedding", "index": i, "embedding": self._hash.embed_one(t).tolist()}
            for i, t in enumerate(texts)
        ]
        return json.dumps({"object": "list", "data": data, "model": payload["model"]}).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                out = gate.answer(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    async def wait_arrivals(self, n: int) -> None:
        for _ in range(n):
            assert await asyncio.to_thread(self.arrived.acquire, True, 30), "no embedding request arrived"


@pytest.fixture
def gate() -> Iterator[GatedEmbeddingServer]:
    fake = GatedEmbeddingServer()
    thread = threading.Thread(target=fake.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        fake.server.shutdown()
        fake.server.server_close()
        thread.join(timeout=5)


@contextmanager
def served_app(settings: Settings, gate: GatedEmbeddingServer, **overrides: Any) -> Iterator[str]:
    """The app under uvicorn on a pool of its own, the gate its embedder, with `overrides`."""
    app_settings = msgspec.structs.replace(
        settings,
        embed_provider="openai",
        embed_base_url=gate.url,
        embed_timeout_seconds=30.0,
        rate_limit_per_minute=0,
        **overrides,
    )
    with serve(create_app(app_settings)) as url:
        yield url


@pytest.fixture
def served(settings: Settings, migrated: str, gate: GatedEmbeddingServer) -> Iterator[str]:
    with served_app(settings, gate, pool_max_size=4) as url:
        yield url


@pytest.fixture
async def monitor(settings: Settings, migrated: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await connect(settings)
    try:
        yield conn
    finally:
        await conn.close()


async def open_transactions_after(monitor: asyncpg.Connection, seconds: float) -> list[dict[str, Any]]:
    """The service's open transactions once none is left, or after `seconds` (what is left then).
    A call lets its transaction go only once CONTEXT_EMBED_PATIENCE_SECONDS have passed since it
    began, and under load the second of two calls may begin well after the first."""
    for _ in range(round(seconds / 0.05)):
        if not (left := await open_transactions(monitor)):
            return left
        await asyncio.sleep(0.05)  # polled: nothing signals the end of another session's transaction
    return await open_transactions(monitor)


async def open_transactions(monitor: asyncpg.Connection) -> list[dict[str, Any]]:
    """The service's sessions (application_name haki) inside a transaction, this one excepted."""
    rows = await monitor.fetch(
        "SELECT pid, state, query FROM pg_stat_activity "
        "WHERE application_name = 'haki' AND xact_start IS NOT NULL AND pid <> pg_backend_pid()"
    )
    return [dict(r) for r in rows]


@pytest.mark.parametrize("route", ["/v1/facts", "/v1/events"])
async def test_no_transaction_is_open_while_the_embedder_runs(
    served: str, gate: GatedEmbeddingServer, monitor: asyncpg.Connection, route: str
) -> None:
    project_id = f"slow-{uuid.uuid4().hex[:12]}"
    _, key = await auth.create_key(monitor, project_id)
    items = [{"content": f"{SLOW} fact {i}"} for i in range(3)]
    if route == "/v1/events":
        items = [{**item, "occurred_at": "2026-01-01T00:00:00Z"} for item in items]
    body = {"project_id": project_id, "subject_id": "s", route.rsplit("/", 1)[1]: items}
    headers = {**bearer(key), "Idempotency-Key": "slow-batch"}
    async with httpx.AsyncClient(base_url=served, timeout=60) as client:
        first = asyncio.create_task(client.post(route, json=body, headers=headers))
        await gate.wait_arrivals(1)
        # The first request waits on the embedder: it holds no transaction (on main: one, idle in
        # transaction since its key claim, which PostgreSQL kills after 60 s).
        assert await open_transactions(monitor) == []
        # A concurrent retry with the same key embeds too, outside any transaction, then waits for
        # the first's claim and replays it.
        retry = asyncio.create_task(client.post(route, json=body, headers=headers))
        await gate.wait_arrivals(1)
        assert await open_transactions(monitor) == []
        gate.release.set()
        answers = [await first, await retry]
        assert [r.status_code for r in answers] == [201, 201], [r.text for r in answers]
        assert answers[0].json() == answers[1].json()
        assert sorted("idempotent-replayed" in r.headers for r in answers) == [False, True]
        if route == "/v1/facts":
            listed = await client.get("/v1/facts", params={"project_id": project_id}, headers=bearer(key))
            assert len(listed.json()["facts"]) == len(items)


@pytest.fixture
def served_small_pool(settings: Settings, migrated: str, gate: GatedEmbeddingServer) -> Iterator[str]:
    with served_app(
        settings, gate, pool_min_size=0, pool_max_size=2, pool_acquire_timeout_seconds=3.0
    ) as url:
        yield url


KNOWN = "Ana likes tea"


async def project_knowing_one_fact(
    client: httpx.AsyncClient, monitor: asyncpg.Connection
) -> tuple[dict[str, str], dict[str, str]]:
    """A new project whose subject `u` holds the fact KNOWN: its scope and its key's headers."""
    project_id = f"aside-{uuid.uuid4().hex[:12]}"
    _, key = await auth.create_key(monitor, project_id)
    scope = {"project_id": project_id, "subject_id": "u"}
    known = await client.post("/v1/facts", json={**scope, "facts": [{"content": KNOWN}]}, headers=bearer(key))
    assert known.status_code == 201, known.text
    return scope, bearer(key)


def posted(
    client: httpx.AsyncClient, path: str, bodies: Sequence[dict[str, Any] | None], headers: dict[str, str]
) -> list[asyncio.Task[httpx.Response]]:
    """Each body POSTed to `path` at once (None, no body), as tasks the gated embedder may hold."""
    return [asyncio.create_task(client.post(path, json=body, headers=headers)) for body in bodies]


async def test_a_write_waiting_on_the_embedder_holds_no_connection(
    served_small_pool: str, gate: GatedEmbeddingServer, monitor: asyncpg.Connection
) -> None:
    """Two writes waiting for their embeddings, on a pool of two: the agents' reads and context
    calls are still served. Until the write gave its connection back while it waited, they
    waited for one too, and were refused (503) once the pool's acquire timeout passed."""
    async with httpx.AsyncClient(base_url=served_small_pool, timeout=60) as client:
        scope, headers = await project_knowing_one_fact(client, monitor)
        bodies = [
            {**scope, "subject_id": f"w{i}", "facts": [{"content": f"{SLOW} fact {i}"}]} for i in range(2)
        ]
        writes = posted(client, "/v1/facts", bodies, headers)
        await gate.wait_arrivals(2)
        listed = await client.get("/v1/facts", params=scope, headers=headers)
        assert listed.status_code == 200, listed.text
        assert [f["content"] for f in listed.json()["facts"]] == [KNOWN]
        packet = await client.post(
            "/v1/context", json={**scope, "query": "what does Ana drink?"}, headers=headers
        )
        assert packet.status_code == 200, packet.text
        assert [f["content"] for f in packet.json()["facts"]] == [KNOWN]
        assert not any(w.done() for w in writes)
        # Released, each write is lent a connection again and commits.
        gate.release.set()
        done = [await w for w in writes]
        assert [r.status_code for r in done] == [201, 201], [r.text for r in done]
        for i in range(2):
            listed = await client.get("/v1/facts", params={**scope, "subject_id": f"w{i}"}, headers=headers)
            assert [f["content"] for f in listed.json()["facts"]] == [f"{SLOW} fact {i}"]


async def answered_after_the_gate(
    client: httpx.AsyncClient,
    gate: GatedEmbeddingServer,
    monitor: asyncpg.Connection,
    scope: dict[str, str],
    headers: dict[str, str],
    held: list[asyncio.Task[httpx.Response]],
) -> list[httpx.Response]:
    """With every request of `held` waiting on the gated embedder: the scope is still read, no
    transaction is left open and none of them has answered; then the gate opens, and each
    answers 200. Their answers."""
    await gate.wait_arrivals(len(held))
    listed = await client.get("/v1/facts", params=scope, headers=headers)
    assert listed.status_code == 200, listed.text
    assert await open_transactions_after(monitor, 3.0) == []
    assert not any(h.done() for h in held)
    gate.release.set()
    answers = [await h for h in held]
    assert [a.status_code for a in answers] == [200] * len(held), [a.text for a in answers]
    return answers


async def test_a_context_call_waiting_on_the_embedder_gives_its_connection_back(
    served_small_pool: str, gate: GatedEmbeddingServer, monitor: asyncpg.Connection
) -> None:
    """Two context calls whose query embedding hangs, on a pool of two: past
    CONTEXT_EMBED_PATIENCE_SECONDS they give their connections (and their transactions) back, so
    the project's other requests are served; once the vectors come they run on connections lent
    anew, and answer in full. Before, each held its connection, inside its transaction, until the
    embedder answered or timed out (10 s): an embedder that hangs took the whole service down."""
    async with httpx.AsyncClient(base_url=served_small_pool, timeout=60) as client:
        scope, headers = await project_knowing_one_fact(client, monitor)
        queries = [{**scope, "query": f"{SLOW} what does Ana drink {i}?"} for i in range(2)]
        calls = posted(client, "/v1/context", queries, headers)
        packets = await answered_after_the_gate(client, gate, monitor, scope, headers, calls)
        for p in packets:
            body = p.json()
            assert body["status"] == "ok", body
            assert [f["content"] for f in body["facts"]] == [KNOWN]
            trace = await client.get(f"/v1/inspect/{body['trace_id']}", headers=headers)
            assert trace.status_code == 200, trace.text


async def test_a_replay_waiting_on_the_embedder_gives_its_connection_back(
    served_small_pool: str, gate: GatedEmbeddingServer, monitor: asyncpg.Connection
) -> None:
    """A replay embeds its stored query again (the OpenAI-compatible embedder keeps no cache):
    two replays held by the embedder, on a pool of two, give their connections back as a context
    call does, and once the vectors come they answer with the original's packet. Before, each
    held its connection until the embedder answered, and the GET below got a 503."""
    async with httpx.AsyncClient(base_url=served_small_pool, timeout=60) as client:
        scope, headers = await project_knowing_one_fact(client, monitor)
        gate.release.set()
        origin = await client.post(
            "/v1/context", json={**scope, "query": f"{SLOW} what does Ana drink?"}, headers=headers
        )
        assert origin.status_code == 200, origin.text
        await gate.wait_arrivals(1)  # the origin's own embedding, let through
        gate.release.clear()
        trace_id = origin.json()["trace_id"]
        replays = posted(client, f"/v1/inspect/{trace_id}/replay", [None, None], headers)
        answers = await answered_after_the_gate(client, gate, monitor, scope, headers, replays)
        for a in answers:
            body = a.json()
            assert body["origin_trace_id"] == trace_id
            assert [f["content"] for f in body["packet"]["facts"]] == [KNOWN]
            assert body["diff"] == {"added": [], "removed": [], "moved": []}
