"""Events' vectors in context (docs/spec/context-profiles.md, rule 8): the worker that makes them
after the write (service/memory/event_context.py), what resets them, and how `unified` ranks an
episode by the closer of its two vectors while `facts_first` keeps the event's own.

The hash embedder stands in for the model: a vector in context must equal its embedding of
"previous\\ncurrent" exactly, which a test can compute."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import numpy as np
import pytest

from service.constants import EVENT_CONTEXT_BEFORE_CHARS
from service.db import connect, create_pool, init_connection
from service.embedding.embedder import Embedder, HashEmbedder, Vector
from service.errors import EmbeddingModelMismatch
from service.memory import event_context
from service.settings import Settings
from tests.helpers import PROJECT, bearer, by_item, context_and_trace, inspect, write_events
from tests.helpers.app import SingleConnectionPool, make_client
from tests.helpers.serving import new_project
from tests.helpers.sql import load_test_queries

SUBJECT = "ctx"


@pytest.fixture
async def client(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> AsyncIterator[httpx.AsyncClient]:
    """The worker's client: writes leave their vectors in context to it (HAKI_EVENT_CONTEXT_INLINE
    off), as imports and a failed inline step do."""
    async with make_client(settings, conn, hash_embedder, event_context_inline=False) as c:
        yield c


CAT, ASK, NAME = "Alice adopted a cat", "What is its name then?", "She calls it Miso"
WORDS = ["cat", "garden", "violin", "harbour", "lantern", "meadow", "copper", "orchard", "saddle", "kettle",
         "ribbon", "glacier"]  # fmt: skip


def at(minute: int) -> str:
    return f"2024-03-01T09:{minute:02d}:00Z"


async def scope_vectors(conn: asyncpg.Connection) -> dict[str, tuple[Any, Any]]:
    """content -> (own vector, vector in context or None), in the scope's order."""
    rows = load_test_queries().test_event_context_vectors(conn, project_id=PROJECT, subject_id=SUBJECT)
    return {r["content"]: (r["embedding"], r["context_embedding"]) async for r in rows}


async def drain(conn: asyncpg.Connection, embedder: Embedder) -> int:
    """The worker's batches of the test's project until none is left (event_context.drain goes
    over every project: it would count other tests' committed events too)."""
    pool, total = SingleConnectionPool(conn), 0
    with suppress(EmbeddingModelMismatch):  # as the worker does: the project waits
        while stored := await event_context.contextualize_batch(pool, embedder, PROJECT):
            total += stored
    return total


def in_context(embedder: HashEmbedder, before: str, content: str) -> Any:
    return embedder.embed_one(event_context.context_text(before, content))


def array(v: Any) -> Any:
    """A stored vector (pgvector's Vector) or an embedder's, as an ndarray."""
    return v.to_numpy() if hasattr(v, "to_numpy") else np.asarray(v)


def same(a: Any, b: Any) -> bool:
    return a is not None and b is not None and np.allclose(array(a), array(b), atol=1e-6)


async def test_the_worker_embeds_each_event_after_the_one_before_it(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    # Written out of order in one batch: the scope's order is occurred_at's.
    await write_events(client, key, [(NAME, at(2)), (CAT, at(0)), (ASK, at(1))], subject_id=SUBJECT)
    assert all(ctx is None for _, ctx in (await scope_vectors(conn)).values())
    # The worker's rounds over every project, this one's three events among them.
    assert await event_context.drain(SingleConnectionPool(conn), hash_embedder) >= 3
    v = await scope_vectors(conn)
    assert list(v) == [CAT, ASK, NAME]
    assert same(v[CAT][1], v[CAT][0])  # the first event has nothing before it: its own vector
    assert same(v[ASK][1], in_context(hash_embedder, CAT, ASK))
    assert same(v[NAME][1], in_context(hash_embedder, ASK, NAME))
    assert not same(v[NAME][1], v[NAME][0])
    assert await drain(conn, hash_embedder) == 0


async def test_an_event_written_before_a_stored_one_remakes_that_ones_vector(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    await write_events(client, key, [(CAT, at(0)), (NAME, at(10))], subject_id=SUBJECT)
    await drain(conn, hash_embedder)
    await write_events(client, key, [(ASK, at(5))], subject_id=SUBJECT)
    v = await scope_vectors(conn)
    assert v[NAME][1] is None and v[ASK][1] is None  # NAME's predecessor changed
    assert same(v[CAT][1], v[CAT][0])
    assert await drain(conn, hash_embedder) == 2
    v = await scope_vectors(conn)
    assert same(v[ASK][1], in_context(hash_embedder, CAT, ASK))
    assert same(v[NAME][1], in_context(hash_embedder, ASK, NAME))


async def test_erasing_an_event_remakes_the_next_ones_vector(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    ids = await write_events(client, key, [(CAT, at(0)), (ASK, at(1)), (NAME, at(2))], subject_id=SUBJECT)
    await drain(conn, hash_embedder)
    r = await client.delete(f"/v1/events/{ids[1]}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    v = await scope_vectors(conn)
    assert list(v) == [CAT, NAME] and v[NAME][1] is None  # it held the erased text
    assert await drain(conn, hash_embedder) == 1
    assert same((await scope_vectors(conn))[NAME][1], in_context(hash_embedder, CAT, NAME))


async def test_an_erasure_takes_the_claims_on_its_events(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    """A claim names its event's id: a process that died mid-batch leaves it for its lease, and
    an erasure meanwhile must leave no row naming what it erased."""
    ids = await write_events(client, key, [(CAT, at(0)), (ASK, at(1)), (NAME, at(2))], subject_id=SUBJECT)
    assert len(await event_context.claim_pending(conn, hash_embedder, PROJECT, 10)) == 3
    q = load_test_queries()
    r = await client.delete(f"/v1/events/{ids[0]}", headers=bearer(key))
    assert r.status_code == 200, r.text
    assert await q.test_count_event_context_claims(conn, project_id=PROJECT) == 2
    r = await client.delete(f"/v1/subjects/{SUBJECT}", params={"project_id": PROJECT}, headers=bearer(key))
    assert r.status_code == 200, r.text
    assert await q.test_count_event_context_claims(conn, project_id=PROJECT) == 0


async def test_a_vector_made_before_its_predecessor_changed_is_not_stored(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    await write_events(client, key, [(CAT, at(0)), (NAME, at(10))], subject_id=SUBJECT)
    pending = await event_context.claim_pending(conn, hash_embedder, PROJECT, 10)
    assert [p.before_content for p in pending if p.content == NAME] == [CAT]
    await write_events(client, key, [(ASK, at(5))], subject_id=SUBJECT)  # while it was embedded
    made = [None if p.before_content is None else in_context(hash_embedder, p.before_content, p.content)
            for p in pending]  # fmt: skip
    assert await event_context.store_pending(conn, hash_embedder, PROJECT, pending, made) == 1  # CAT only
    assert (await scope_vectors(conn))[NAME][1] is None
    await drain(conn, hash_embedder)
    assert same((await scope_vectors(conn))[NAME][1], in_context(hash_embedder, ASK, NAME))


async def test_a_project_on_another_model_keeps_its_events_pending(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    class Counting(HashEmbedder):
        texts = 0

        async def embed(self, texts: Sequence[str], **kw: Any) -> list[Vector]:
            Counting.texts += len(texts)
            return await super().embed(texts, **kw)

    await write_events(client, key, [(CAT, at(0)), (ASK, at(1))], subject_id=SUBJECT)
    assert await drain(conn, Counting(model="model-b")) == 0  # never the wrong space
    assert Counting.texts == 0  # refused before embedding: no batch spent every round
    assert all(ctx is None for _, ctx in (await scope_vectors(conn)).values())
    assert await drain(conn, hash_embedder) == 2


async def test_unified_ranks_an_episode_by_the_closer_of_its_two_vectors(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    # The query is the reply read after its question: only the reply's vector in context holds it.
    ids = await write_events(client, key, [(CAT, at(0)), (ASK, at(1)), (NAME, at(2))], subject_id=SUBJECT)
    query = event_context.context_text(ASK, NAME)
    own = 1 - float(np.dot(hash_embedder.embed_one(query), hash_embedder.embed_one(NAME)))
    assert own > 0.05

    async def distance(profile: str) -> float:
        _, trace = await context_and_trace(client, key, query, SUBJECT, profile=profile)
        return float(by_item(trace)[ids[2]]["cosine_distance"])

    assert abs(await distance("unified") - own) < 1e-6  # not made yet: its own vector alone
    await drain(conn, hash_embedder)
    assert await distance("unified") < 1e-6
    assert abs(await distance("facts_first") - own) < 1e-6  # the assembler's spec, unchanged


async def test_a_replay_ranks_by_the_vectors_in_context_made_by_its_instant(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    """A vector in context made after a call is not the call's: its replay (as of the call's
    instant) ranks the episode by its own vector, as the call did, while calls from then on use
    both (docs/time-travel.md)."""
    ids = await write_events(client, key, [(CAT, at(0)), (ASK, at(1)), (NAME, at(2))], subject_id=SUBJECT)
    query = event_context.context_text(ASK, NAME)
    origin, origin_trace = await context_and_trace(client, key, query, SUBJECT)  # none made yet
    await drain(conn, hash_embedder)
    r = await client.post(f"/v1/inspect/{origin['trace_id']}/replay", headers=bearer(key))
    assert r.status_code == 200, r.text
    assert r.json()["diff"] == {"added": [], "removed": [], "moved": []}
    replayed = by_item(await inspect(client, key, r.json()["packet"]["trace_id"]))
    for item_id, decision in by_item(origin_trace).items():
        assert replayed[item_id]["cosine_distance"] == decision["cosine_distance"]
        assert replayed[item_id]["score"] == decision["score"]
    _, now = await context_and_trace(client, key, query, SUBJECT)
    assert float(now["decisions"][0]["cosine_distance"]) < 1e-6 and now["decisions"][0]["item_id"] == ids[2]
    # As of an instant after the vectors were made, a call ranks by them too.
    _, then = await context_and_trace(client, key, query, SUBJECT, as_of=datetime.now(UTC).isoformat())
    assert float(by_item(then)[ids[2]]["cosine_distance"]) < 1e-6


async def test_a_scope_beyond_the_exact_scan_walks_the_graph_of_the_vectors_in_context(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection, hash_embedder: HashEmbedder
) -> None:
    """Beyond the exact scan, the walk finds a scope's top_k events by the closer of their two
    vectors, as the exact scan does, not by their own alone; an event whose vector in context is
    not made yet is found by its own (migration 0037)."""
    queries = load_test_queries()
    n = await queries.test_exact_scan_limit(conn, top_k=2) + 20
    # Distinct texts: near-equal distances could swap in the graphs' half precision.
    pairs = [(a, b) for a in WORDS for b in WORDS if a != b][:n]
    assert len(pairs) == n
    turns = [
        (f"{a} beside {b}", f"2024-03-01T{i // 60:02d}:{i % 60:02d}:00Z") for i, (a, b) in enumerate(pairs)
    ]
    await write_events(client, key, [*turns, (CAT, at(0)), (ASK, at(1)), (NAME, at(2))], subject_id=SUBJECT)
    await drain(conn, hash_embedder)
    text = event_context.context_text(ASK, NAME)
    query = hash_embedder.embed_one(text)

    async def nearest(top_k: int, both: bool = True) -> set[Any]:
        rows = queries.test_event_nearest(
            conn, project_id=PROJECT, subject_id=SUBJECT, query=query, top_k=top_k, both=both
        )
        return {r["event_id"] async for r in rows}

    async def walked(top_k: int) -> set[Any]:
        rows = queries.test_event_context_walk(
            conn, project_id=PROJECT, subject_id=SUBJECT, query=query, top_k=top_k
        )
        return {r["event_id"] async for r in rows}

    # NAME by its vector in context (the query's own text), ASK by its own (more words in common).
    assert await nearest(1) != await nearest(1, both=False)
    assert await walked(1) == await nearest(1)
    [new] = await write_events(client, key, [(text, at(3))], subject_id=SUBJECT)
    assert UUID(new) in await nearest(2)
    assert await walked(2) == await nearest(2)


async def test_a_write_makes_its_events_vectors_in_context_before_it_answers(
    settings: Settings, conn: asyncpg.Connection, key: str, hash_embedder: HashEmbedder
) -> None:
    async with make_client(settings, conn, hash_embedder) as inline:
        await write_events(inline, key, [(CAT, at(0)), (ASK, at(1)), (NAME, at(2))], subject_id=SUBJECT)
    v = await scope_vectors(conn)
    assert same(v[CAT][1], v[CAT][0])
    assert same(v[ASK][1], in_context(hash_embedder, CAT, ASK))
    assert same(v[NAME][1], in_context(hash_embedder, ASK, NAME))
    assert await drain(conn, hash_embedder) == 0


async def test_a_write_whose_vectors_in_context_fail_still_succeeds(
    settings: Settings, conn: asyncpg.Connection, key: str
) -> None:
    class NoContext(HashEmbedder):
        async def embed(self, texts: Sequence[str], **kw: Any) -> list[Vector]:
            if any("\n" in t for t in texts):  # a vector in context: the event before, then it
                raise RuntimeError("embedder down")
            return await super().embed(texts, **kw)

    async with make_client(settings, conn, NoContext()) as inline:
        ids = await write_events(inline, key, [(CAT, at(0)), (ASK, at(1))], subject_id=SUBJECT)
        assert len(ids) == 2
    v = await scope_vectors(conn)
    assert v[ASK][1] is None  # left to the background task
    assert await drain(conn, HashEmbedder()) >= 1


def test_a_long_predecessor_leaves_room_for_the_event() -> None:
    # The model reads its first 256 tokens: only the end of the event before goes first.
    text = event_context.context_text("a" * 600 + "b" * EVENT_CONTEXT_BEFORE_CHARS, "Same here!")
    assert text == "b" * EVENT_CONTEXT_BEFORE_CHARS + "\nSame here!"
    assert event_context.context_text("Who adopted a cat?", "I did.") == "Who adopted a cat?\nI did."


class SlowCounting(HashEmbedder):
    """Keeps every text it embeds; a batch takes a while, as the model's does, so that the
    batches of two processes' workers overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str], **kw: Any) -> list[Vector]:
        self.texts.extend(texts)
        await asyncio.sleep(0.05)
        return await super().embed(texts, **kw)


async def test_the_workers_of_two_processes_embed_each_event_once(
    settings: Settings, migrated: str, hash_embedder: HashEmbedder
) -> None:
    """Every serving process runs the worker: two draining one project's 200 pending events (two
    pools, committed data) embed each text once between them, and make every vector."""
    project, key = await new_project(settings, "ctx-claims")
    times = [f"2024-03-01T{n // 60:02d}:{n % 60:02d}:00Z" for n in range(200)]
    writer = await connect(settings)
    pools = [await create_pool(settings) for _ in range(2)]
    try:
        await init_connection(writer)
        async with make_client(settings, writer, hash_embedder, event_context_inline=False) as c:
            await write_events(c, key, [(f"turn {n}", t) for n, t in enumerate(times)], SUBJECT, project)

        async def pending(pool: Any) -> int:
            async with pool.acquire() as c:
                rows = load_test_queries().test_event_context_vectors(
                    c, project_id=project, subject_id=SUBJECT
                )
                return sum([r["context_embedding"] is None async for r in rows])

        embedder = SlowCounting()

        async def worker(pool: Any) -> int:
            stored = 0
            while await pending(pool):
                made = await event_context.contextualize_batch(pool, embedder, project)
                stored += made
                if not made:
                    await asyncio.sleep(0.01)  # the other process holds the rest
            return stored

        assert sum(await asyncio.wait_for(asyncio.gather(*(worker(p) for p in pools)), timeout=120)) == 200
        assert len(embedder.texts) == len(set(embedder.texts)) == 199  # the first event takes its own
    finally:
        for pool in pools:
            await pool.close()
        await writer.close()
