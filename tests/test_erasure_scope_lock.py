"""Erasures racing the context calls and writes of their scope: the scope's lock.

Erasures hold their scope's lock (lock_erasure_scope) exclusively; context calls
(open_context_call), writes (share_erasure_scope) and the event context worker
(share_event_scopes) hold it shared, before any other lock. Each test forces one interleaving
that went wrong without it, with sessions of their own (tests/helpers/serving.py `sessions`): a
step runs until it ends or waits on a lock (pg_stat_activity), then the next one starts. Data is
committed, each test in a project of its own.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from service.api.auth import Principal
from service.context import replay
from service.context.call import ContextCall
from service.db.call_runner import ErasedSinceRetrieval, run_context_call
from service.db.replica import rerun_reason
from service.embedding.embedder import HashEmbedder
from service.errors import NotFound, database_unavailable
from service.memory import erasure, event_context
from service.memory import writes as memory
from service.repository import conflicts as conflicts_repo
from service.repository import context as context_repo
from service.repository import embedding_model
from service.repository import facts as facts_repo
from service.repository import lifecycle as lifecycle_repo
from service.settings import Settings
from service.structs import (
    ContextRequest,
    EventIn,
    FactIn,
    PatchFactRequest,
    ReplayRequest,
    ResolveConflictRequest,
    WriteEventsRequest,
    WriteFactsRequest,
)
from tests.helpers.serving import sessions, waits_or_ends
from tests.helpers.sql import load_test_queries


@pytest.fixture
async def scope(settings: Settings, migrated: str) -> AsyncIterator[tuple[Principal, HashEmbedder]]:
    """A project of the test's own, its subject `s` erased afterwards: what the test committed
    would otherwise stay, its events' vectors in context pending for another test's worker."""
    principal = Principal(project_id=f"race-{uuid.uuid4().hex[:12]}", key_id=uuid.uuid4())
    yield principal, HashEmbedder()
    async with sessions(settings, 1) as (conn,):
        await erasure.erase_subject(conn, principal, settings, principal.project_id, "s")


async def remember(
    conn: asyncpg.Connection,
    settings: Settings,
    principal: Principal,
    facts: list[FactIn],
    events: list[EventIn],
) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Facts and events of (the principal's project, `s`), committed; their ids."""
    embedder, project_id = HashEmbedder(), principal.project_id
    fact_ids = []
    if facts:
        req = WriteFactsRequest(project_id=project_id, subject_id="s", facts=facts)
        fact_ids = [
            f.fact_id for f in (await memory.write_facts(conn, embedder, settings, principal, req)).facts
        ]
    event_ids = []
    if events:
        ereq = WriteEventsRequest(project_id=project_id, subject_id="s", events=events)
        written = await memory.write_events(conn, embedder, settings, principal, ereq)
        event_ids = [e.event_id for e in written.events]
    return fact_ids, event_ids


def erasing(
    conn: asyncpg.Connection, settings: Settings, principal: Principal, kind: str, item: uuid.UUID
) -> Any:
    """The erasure of `kind` (the subject `s`, or the item), as its route runs it."""
    if kind == "subject":
        return erasure.erase_subject(conn, principal, settings, principal.project_id, "s")
    if kind == "fact":
        return erasure.erase_fact(conn, principal, item)
    return erasure.erase_event(conn, principal, item)


@pytest.mark.parametrize("kind", ["subject", "fact", "event"])
async def test_an_erasure_during_a_context_call_erases_its_trace(
    settings: Settings, scope: tuple[Principal, HashEmbedder], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The erasure runs after the call's retrieval, before its trace: it waits for the trace, then
    erases it (the subject's) or the decisions naming the item. Before the scope lock the erasure
    committed first and the trace outlived it, naming the item (every run)."""
    principal, embedder = scope
    async with sessions(settings, 3) as (caller, eraser, observer):
        (fact,), (event,) = await remember(
            observer, settings, principal, [FactIn(content="cats purr")],
            [EventIn(content="cats slept", occurred_at=datetime(2026, 1, 1, tzinfo=UTC))],
        )  # fmt: skip
        item = event if kind == "event" else fact
        insert = context_repo.insert_context_trace
        erasures: list[asyncio.Task[Any]] = []

        async def erase_then_insert(conn: Any, call: Any, packet: Any, decisions: Any) -> None:
            assert {fact, event} <= {d.item_id for d in decisions}
            erasures.append(asyncio.create_task(erasing(eraser, settings, principal, kind, item)))
            await waits_or_ends(observer, erasures[0], eraser)
            await insert(conn, call, packet, decisions)

        monkeypatch.setattr(context_repo, "insert_context_trace", erase_then_insert)
        request = ContextRequest(project_id=principal.project_id, subject_id="s", query="cats")
        packet = await run_context_call(caller, embedder, ContextCall.of(request, settings))
        await erasures[0]
        traced = await context_repo.get_inspection(observer, principal.project_id, packet.trace_id)
        if kind == "subject":
            assert traced is None
        else:
            assert traced is not None
            assert item not in {d.item_id for d in traced.decisions}


async def test_a_trace_after_a_standby_retrieval_names_no_memory_erased_meanwhile(
    settings: Settings, scope: tuple[Principal, HashEmbedder]
) -> None:
    """On a read replica the retrieval and the trace are two transactions (two servers): a fact
    erased between them on the primary keeps the trace from being written, and the call runs
    again on the primary (the replica's rerun reason). Before, the trace named the erased fact."""
    principal, embedder = scope
    async with sessions(settings, 3) as (standby, eraser, on_primary):
        (fact,), _ = await remember(on_primary, settings, principal, [FactIn(content="cats purr")], [])

        @asynccontextmanager
        async def primary() -> AsyncIterator[asyncpg.Connection]:
            await erasure.erase_fact(eraser, principal, fact)  # after the retrieval, before the trace
            yield on_primary

        request = ContextRequest(project_id=principal.project_id, subject_id="s", query="cats")
        with pytest.raises(ErasedSinceRetrieval) as raised:
            await run_context_call(standby, embedder, ContextCall.of(request, settings), primary=primary)
        assert rerun_reason(raised.value) == "erased_meanwhile"
        t = load_test_queries()
        assert await t.test_count_context_calls(on_primary, project_id=principal.project_id) == 0


@pytest.mark.parametrize("kind", ["subject", "fact"])
async def test_a_keyed_write_racing_an_erasure_of_its_scope_fails_on_no_foreign_key(
    settings: Settings, scope: tuple[Principal, HashEmbedder], kind: str
) -> None:
    """A write of `city` reads the key's facts (Lyon), then waits on an open set of the key that
    another session is inserting; meanwhile Lyon is erased; the write then joined Lyon to its set:
    a foreign key violation, a 500 (every run). With the scope lock the erasure waits for the
    write, and erases what it committed."""
    principal, embedder = scope
    async with sessions(settings, 4) as (writer, eraser, holder, observer):
        (lyon,), _ = await remember(observer, settings, principal, [FactIn(content="Lyon", key="city")], [])
        oslo = WriteFactsRequest(
            project_id=principal.project_id, subject_id="s", facts=[FactIn(content="Oslo", key="city")]
        )
        held = holder.transaction()
        await held.start()
        await load_test_queries().test_open_conflict_set(
            holder, project_id=principal.project_id, subject_id="s", key="city"
        )
        write = asyncio.create_task(memory.write_facts(writer, embedder, settings, principal, oslo))
        assert await waits_or_ends(observer, write, writer), "the write did not wait on the open set"
        erase = asyncio.create_task(erasing(eraser, settings, principal, kind, lyon))
        await waits_or_ends(observer, erase, eraser)
        await held.rollback()
        await write
        await erase
        left = await load_test_queries().test_fact_contents(observer, project_id=principal.project_id)
        assert left == (None if kind == "subject" else ["Oslo"])


@pytest.mark.parametrize("change", ["resolve", "retract"])
async def test_a_change_answers_what_it_committed_though_an_erasure_follows_at_once(
    settings: Settings, scope: tuple[Principal, HashEmbedder], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A resolution or a retraction reads its answer (the set, the fact) last; an erasure of the
    scope fired just before that read waits for the change's commit. The read came after the
    commit: the erasure went first, and the answer was a 500 (the resolution's: not enough values
    to unpack) or a 404 (the retraction's) for a change that had committed."""
    principal, _ = scope
    async with sessions(settings, 3) as (changer, eraser, observer):
        (tea, coffee), _ = await remember(
            observer, settings, principal,
            [FactIn(content="Likes tea", key="drink"), FactIn(content="Likes coffee", key="drink")], [],
        )  # fmt: skip
        # The answer is the resolution's first list_conflicts, the retraction's second get_fact.
        repo, name, answer = (
            (conflicts_repo, "list_conflicts", 1) if change == "resolve" else (facts_repo, "get_fact", 2)
        )
        read = getattr(repo, name)
        reads: list[int] = []
        erasures: list[asyncio.Task[Any]] = []

        async def erase_then_read(*args: Any, **kwargs: Any) -> Any:
            reads.append(1)
            if len(reads) == answer:
                erasures.append(asyncio.create_task(erasing(eraser, settings, principal, "subject", tea)))
                await waits_or_ends(observer, erasures[0], eraser)
            return await read(*args, **kwargs)

        (open_set,) = await conflicts_repo.list_conflicts(observer, principal.project_id, "s", "open", None)
        monkeypatch.setattr(repo, name, erase_then_read)
        if change == "resolve":
            resolved = await memory.resolve_conflict(
                changer, principal, open_set.conflict_set_id, ResolveConflictRequest(keep=[tea])
            )
            assert resolved.status == "resolved"
            assert {m.fact_id: m.status for m in resolved.members} == {tea: "active", coffee: "superseded"}
        else:
            fact = await memory.patch_fact(changer, principal, coffee, PatchFactRequest(status="retracted"))
            assert (fact.fact_id, fact.status) == (coffee, "retracted")
        assert erasures, "the erasure was not fired"
        await erasures[0]
        assert await load_test_queries().test_fact_contents(observer, project_id=principal.project_id) is None


class KeptConnection:
    """A request's lease that never gives its connection back (service/db/pools.py `Lent`)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    @asynccontextmanager
    async def set_aside(self) -> AsyncIterator[None]:
        yield


async def test_a_replay_whose_subject_is_erased_as_it_ends_is_a_404(
    settings: Settings, scope: tuple[Principal, HashEmbedder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay reads its own trace after its commit, for the diff: an erasure of the subject in
    between left none, and an assertion made the answer a 500."""
    principal, embedder = scope
    async with sessions(settings, 2) as (caller, eraser):
        await remember(caller, settings, principal, [FactIn(content="cats purr")], [])
        request = ContextRequest(project_id=principal.project_id, subject_id="s", query="cats")
        origin = await run_context_call(caller, embedder, ContextCall.of(request, settings))
        reads: list[int] = []
        read = context_repo.get_inspection

        async def erase_then_read(*args: Any, **kwargs: Any) -> Any:
            reads.append(1)
            if len(reads) == 2:  # the replay's own trace (the first read is the origin's)
                await erasure.erase_subject(eraser, principal, settings, principal.project_id, "s")
            return await read(*args, **kwargs)

        monkeypatch.setattr(context_repo, "get_inspection", erase_then_read)
        with pytest.raises(NotFound, match="erased during its replay"):
            await replay.replay(
                KeptConnection(caller), embedder, settings, principal, origin.trace_id, ReplayRequest()
            )
        assert len(reads) == 2


@pytest.mark.parametrize("kind", ["event", "subject"])
async def test_the_event_context_worker_and_an_event_erasure_do_not_deadlock(
    settings: Settings, scope: tuple[Principal, HashEmbedder], kind: str
) -> None:
    """The worker stores the vectors in context of N, then A (id order); erasing A locks A, then
    sets N's back to pending (N is the event after A: A was written later, but happened before).
    A third session holds A until both wait; then they deadlocked (a 503, every run). With the
    scope lock the worker waits for the erasure, and skips the two events it changed."""
    principal, embedder = scope
    project_id = principal.project_id
    async with sessions(settings, 4) as (worker, eraser, holder, observer):
        day = datetime(2026, 1, 1, tzinfo=UTC)
        _, (after,) = await remember(
            observer, settings, principal, [], [EventIn(content="N", occurred_at=day)]
        )
        _, (erased,) = await remember(
            observer, settings, principal, [], [EventIn(content="A", occurred_at=day - timedelta(hours=1))]
        )
        pending = await event_context.claim_pending(worker, embedder, project_id, 10)
        assert [p.event_id for p in pending] == [after, erased]
        vectors = await event_context.embed_pending(embedder, project_id, pending)
        held = holder.transaction()
        await held.start()
        await load_test_queries().test_lock_event(holder, project_id=project_id, event_id=erased)
        erase = asyncio.create_task(erasing(eraser, settings, principal, kind, erased))
        assert await waits_or_ends(observer, erase, eraser)
        store = asyncio.create_task(
            event_context.store_pending(worker, embedder, project_id, pending, vectors)
        )
        assert await waits_or_ends(observer, store, worker)
        await held.commit()
        assert await store == 0
        await erase


async def test_calls_and_writes_share_the_scope_lock_that_an_erasure_takes_alone(
    settings: Settings, migrated: str
) -> None:
    """A context call and a write of the scope hold its lock at once; an erasure waits for them
    (here: gives up after its lock_timeout), and they for it. A standby's retrieval (no subject)
    takes none."""
    project_id = f"race-{uuid.uuid4().hex[:12]}"
    async with sessions(settings, 2) as (holder, other):

        async def blocked(statement: Any) -> bool:
            try:
                async with other.transaction():
                    await load_test_queries().test_lock_timeout(other, milliseconds=200)
                    await statement
            except asyncpg.LockNotAvailableError:
                return True
            return False

        async with holder.transaction():
            await context_repo.open_context_call(holder, 40, project_id, "s")
            assert not await blocked(lifecycle_repo.share_erasure_scope(other, project_id, "s"))
            assert await blocked(
                lifecycle_repo.lock_erasure_scope(other, project_id, "subject", subject_id="s")
            )
        async with holder.transaction():
            await lifecycle_repo.lock_erasure_scope(holder, project_id, "subject", subject_id="s")
            assert await blocked(context_repo.open_context_call(other, 40, project_id, "s"))
            assert await blocked(lifecycle_repo.share_erasure_scope(other, project_id, "s"))
            assert not await blocked(context_repo.open_context_call(other, 40, project_id, None))
            assert not await blocked(lifecycle_repo.share_erasure_scope(other, project_id, "s2"))


async def test_an_event_written_before_a_pending_one_during_its_store_keeps_it_pending(
    settings: Settings, scope: tuple[Principal, HashEmbedder]
) -> None:
    """The worker read S with its predecessor P and embedded them; a write of X between P and S
    is not committed yet. The store waits for it, then leaves S pending, and the next read pairs
    it with X. Before, the store, blind to X, kept S's vector made from P for good (a write shares
    the scope's erasure lock with the worker: it does not exclude it)."""
    principal, embedder = scope
    project_id = principal.project_id
    at = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(3)]
    async with sessions(settings, 3) as (worker, writer, observer):
        _, (p, s) = await remember(
            observer, settings, principal, [], [EventIn(content="P", occurred_at=at[0]),
                                                EventIn(content="S", occurred_at=at[2])]
        )  # fmt: skip
        pending = await event_context.claim_pending(worker, embedder, project_id, 10)
        assert [(x.event_id, x.before_id) for x in pending] == [(p, None), (s, p)]
        vectors = await event_context.embed_pending(embedder, project_id, pending)
        async with writer.transaction():
            _, (x,) = await remember(
                writer, settings, principal, [], [EventIn(content="X", occurred_at=at[1])]
            )
            store = asyncio.create_task(
                event_context.store_pending(worker, embedder, project_id, pending, vectors)
            )
            assert await waits_or_ends(observer, store, worker), "the store ran beside the write"
        assert await store == 1
        again = await event_context.claim_pending(worker, embedder, project_id, 10)
        assert {y.event_id: y.before_id for y in again} == {x: p, s: x}


@pytest.mark.parametrize("kind", ["subject", "fact"])
async def test_an_erasure_during_a_reembed_switch_is_a_retryable_503_at_once(
    settings: Settings, scope: tuple[Principal, HashEmbedder], kind: str
) -> None:
    """A re-embedding's switch counts the project's rows, then swaps each one's vector: an erasure
    committed between them made it refuse its own partial swap (a traceback, every run that
    overlapped). An erasure holds the project's model record as writes do; during a switch it
    fails at once, its scope's lock given back, instead of holding every call of the scope."""
    principal, embedder = scope
    async with sessions(settings, 3) as (switcher, eraser, observer):
        (fact,), _ = await remember(observer, settings, principal, [FactIn(content="cats purr")], [])
        async with switcher.transaction():
            await embedding_model.switch_model(switcher, principal.project_id, embedder.name)
            with pytest.raises(asyncpg.LockNotAvailableError) as refused:
                await erasing(eraser, settings, principal, kind, fact)
            assert database_unavailable(refused.value)  # a 503 with Retry-After
            await context_repo.open_context_call(observer, 40, principal.project_id, "s")  # not held
        await erasing(eraser, settings, principal, kind, fact)


async def test_a_reembed_batch_skips_the_facts_an_erasure_is_deleting(
    settings: Settings, scope: tuple[Principal, HashEmbedder]
) -> None:
    """The batch read its facts before an erasure took one; its insert waits for the erasure and
    skips the fact. Before, its foreign key check failed once the erasure committed, and the
    re-embedding stopped."""
    principal, embedder = scope
    async with sessions(settings, 3) as (reembedder, eraser, observer):
        (gone, kept), _ = await remember(
            observer, settings, principal, [FactIn(content="cats purr"), FactIn(content="dogs bark")], []
        )
        vectors = await embedder.embed(["cats purr", "dogs bark"])
        async with eraser.transaction():
            await erasing(eraser, settings, principal, "fact", gone)
            insert = asyncio.create_task(
                embedding_model.insert_vectors(
                    reembedder, "fact", principal.project_id, "model-b", [gone, kept], vectors
                )
            )
            assert await waits_or_ends(observer, insert, reembedder), "the insert did not wait"
        await insert
        counts = await embedding_model.count_pending(observer, principal.project_id, "model-b")
        assert (counts.facts, counts.facts_done) == (1, 1)


async def test_two_event_writes_between_the_same_events_leave_the_later_one_pending(
    settings: Settings, scope: tuple[Principal, HashEmbedder]
) -> None:
    """Y is written after P, and X between them by a write whose snapshot was taken before Y's
    committed: it never set Y back to pending, and the worker, storing Y's vector while X was
    uncommitted, made it from P for good. Event writes of a scope take turns (lock_event_order),
    and the worker's store waits for the one in flight."""
    principal, embedder = scope
    project_id = principal.project_id
    at = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(3)]
    async with sessions(settings, 4) as (writes_y, writes_x, worker, observer):
        _, (p,) = await remember(observer, settings, principal, [], [EventIn(content="P", occurred_at=at[0])])
        release_x = asyncio.Event()

        async def write_x() -> uuid.UUID:
            async with writes_x.transaction():
                _, (x,) = await remember(
                    writes_x, settings, principal, [], [EventIn(content="X", occurred_at=at[1])]
                )
                await release_x.wait()
            return x

        try:
            async with writes_y.transaction():
                _, (y,) = await remember(
                    writes_y, settings, principal, [], [EventIn(content="Y", occurred_at=at[2])]
                )
                x_task = asyncio.create_task(write_x())
                assert await waits_or_ends(observer, x_task, writes_x), "X's write ran beside Y's"
            pending = await event_context.claim_pending(worker, embedder, project_id, 10)
            assert {e.event_id: e.before_id for e in pending}[y] == p  # X is not committed yet
            vectors = await event_context.embed_pending(embedder, project_id, pending)
            store = asyncio.create_task(
                event_context.store_pending(worker, embedder, project_id, pending, vectors)
            )
            assert await waits_or_ends(observer, store, worker), "the store ran beside X's write"
        finally:
            release_x.set()
        x = await x_task
        await store
        again = await event_context.claim_pending(worker, embedder, project_id, 10)
        assert {e.event_id: e.before_id for e in again}[y] == x
