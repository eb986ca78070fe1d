"""Concurrent writes of one (project, subject, key) still meet conflict detection.

The real app is served by uvicorn with its own asyncpg pool (tests/helpers/serving.py), so concurrent
requests run on separate connections and separate transactions, as under `haki serve`. Data is
committed, in a project of this module's own.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from service.api.auth import Principal
from service.db import connect, init_connection
from service.embedding.embedder import HashEmbedder
from service.memory import writes as memory
from service.repository import facts as facts_repo
from service.settings import Settings
from service.structs import FactIn, ResolveConflictRequest, WriteFactsRequest
from tests.helpers import bearer
from tests.helpers.serving import two_sessions

# Fires concurrent writes at a served app with committed data: out of the fast lane.
pytestmark = pytest.mark.slow


# Pairs fired at once. On main before the fix 15 to 18 of 24 pairs ended with both facts
# active and no ConflictSet (hash embedder, pool of 8).
PAIRS = 24


async def post_facts(
    client: httpx.AsyncClient,
    key: str,
    project_id: str,
    subject_id: str,
    facts: list[dict[str, Any]],
    idem: bool,
) -> httpx.Response:
    headers = bearer(key)
    if idem:  # the SDK always sends one; with it the race was 12 of 12 in the probe
        headers["Idempotency-Key"] = uuid.uuid4().hex
    return await client.post(
        "/v1/facts",
        json={"project_id": project_id, "subject_id": subject_id, "facts": facts},
        headers=headers,
    )


async def open_sets(client: httpx.AsyncClient, key: str, project_id: str, subject_id: str) -> list[Any]:
    r = await client.get(
        "/v1/conflicts",
        params={"project_id": project_id, "subject_id": subject_id, "status": "open"},
        headers=bearer(key),
    )
    assert r.status_code == 200, r.text
    sets: list[Any] = r.json()["conflicts"]
    return sets


async def test_concurrent_same_key_pairs_end_in_one_open_conflict_set(
    race_server: str, race_project: tuple[str, str]
) -> None:
    project_id, key = race_project
    async with httpx.AsyncClient(base_url=race_server, timeout=60) as client:

        async def pair(n: int) -> tuple[str, list[httpx.Response]]:
            subject = f"s{n}"
            answers = await asyncio.gather(
                *(
                    post_facts(
                        client,
                        key,
                        project_id,
                        subject,
                        [{"content": f"pair {n} says {side}", "key": "city"}],
                        idem=n % 2 == 0,
                    )
                    for side in ("Lyon", "Oslo")
                )
            )
            return subject, list(answers)

        results = await asyncio.gather(*(pair(n) for n in range(PAIRS)))
        unguarded = []
        for subject, answers in results:
            assert [r.status_code for r in answers] == [201, 201], [r.text for r in answers]
            ids = {r.json()["facts"][0]["fact_id"] for r in answers}
            sets = await open_sets(client, key, project_id, subject)
            members = [{m["fact_id"] for m in s["members"]} for s in sets]
            if members != [ids]:
                unguarded.append((subject, members))
                continue
            # Both facts are blocked by that one set, as GET /v1/facts/{id} shows.
            for fact_id in ids:
                r = await client.get(f"/v1/facts/{fact_id}", headers=bearer(key))
                assert r.json()["conflict_set_id"] == sets[0]["conflict_set_id"], r.text
        assert not unguarded, f"{len(unguarded)} of {PAIRS} pairs escaped conflict detection: {unguarded[:3]}"


async def test_batches_sharing_keys_in_opposite_orders_neither_deadlock_nor_escape(
    race_server: str, race_project: tuple[str, str]
) -> None:
    """Locks are taken in one order whatever the order of the batch, so two batches that share
    keys wait for each other instead of deadlocking (a deadlock would be a 503)."""
    project_id, key = race_project
    keys = [f"k{i}" for i in range(6)]
    async with httpx.AsyncClient(base_url=race_server, timeout=60) as client:

        async def clash(n: int) -> list[httpx.Response]:
            forward = [{"content": f"{k} forward {n}", "key": k} for k in keys]
            backward = [{"content": f"{k} backward {n}", "key": k} for k in reversed(keys)]
            return list(
                await asyncio.gather(
                    post_facts(client, key, project_id, f"d{n}", forward, idem=False),
                    post_facts(client, key, project_id, f"d{n}", backward, idem=True),
                )
            )

        rounds = await asyncio.gather(*(clash(n) for n in range(8)))
        for n, answers in enumerate(rounds):
            assert [r.status_code for r in answers] == [201, 201], [r.text for r in answers]
            sets = await open_sets(client, key, project_id, f"d{n}")
            assert sorted(s["key"] for s in sets) == keys, sets
            assert all(len(s["members"]) == 2 for s in sets), sets


async def test_the_key_lock_serialises_one_key_and_leaves_others_free(
    settings: Settings, migrated: str
) -> None:
    """Two sessions: while one holds the lock of (p, s, city), another waits for that key (here:
    gives up after its lock_timeout) but takes (p, s, job) and (p, other subject, city) at once."""
    async with two_sessions(settings) as (holder, other):
        async with holder.transaction():
            await facts_repo.lock_fact_keys(holder, "proj-lock", "s", ["city"])
            for subject, keys in (("s", ["job"]), ("s2", ["city"]), ("s", [None, "job", "job"])):
                async with other.transaction():
                    await other.execute("SET LOCAL lock_timeout = '2s'")
                    await facts_repo.lock_fact_keys(other, "proj-lock", subject, keys)
            with pytest.raises(asyncpg.LockNotAvailableError):
                async with other.transaction():
                    await other.execute("SET LOCAL lock_timeout = '200ms'")
                    await facts_repo.lock_fact_keys(other, "proj-lock", "s", ["job", "city"])
        # Released at the holder's commit.
        async with other.transaction():
            await other.execute("SET LOCAL lock_timeout = '2s'")
            await facts_repo.lock_fact_keys(other, "proj-lock", "s", ["city"])


async def test_a_write_racing_a_resolution_opens_no_set_with_a_fact_it_superseded(
    settings: Settings, migrated: str
) -> None:
    """A resolution of {Lyon, Oslo} keeping Lyon is in flight (its transaction open) when a write
    of the same key comes. The write waits, then sees the resolution whole: one open set
    {Lyon, Paris}. Before, the resolution took no key lock: the write read both members active,
    waited on the set's row, found it resolved and opened a new set listing Oslo, which the
    resolution had just superseded, so Paris was blocked by a fact nobody believes."""
    project_id = f"race-{uuid.uuid4().hex[:12]}"
    principal = Principal(project_id=project_id, key_id=uuid.uuid4())
    embedder = HashEmbedder()
    setup, resolver, writer = [await connect(settings) for _ in range(3)]

    def city(content: str) -> WriteFactsRequest:
        facts = [FactIn(content=content, key="city")]
        return WriteFactsRequest(project_id=project_id, subject_id="s", facts=facts)

    try:
        for conn in (setup, resolver, writer):
            await init_connection(conn)
        lyon, oslo = [
            (await memory.write_facts(setup, embedder, settings, principal, city(c))).facts[0].fact_id
            for c in ("city Lyon", "city Oslo")
        ]
        (opened,) = (await memory.list_conflicts(setup, principal, project_id, "s", "open")).conflicts
        outer = resolver.transaction()
        await outer.start()
        await memory.resolve_conflict(
            resolver, principal, opened.conflict_set_id, ResolveConflictRequest(keep=[lyon])
        )
        racing = asyncio.create_task(
            memory.write_facts(writer, embedder, settings, principal, city("city Paris"))
        )
        deadline = asyncio.get_running_loop().time() + 10
        pid = writer.get_server_pid()
        while (
            await setup.fetchval("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid) != "Lock"
        ):
            assert not racing.done(), "the write did not wait for the resolution"
            assert asyncio.get_running_loop().time() < deadline, "the write never reached a lock"
            await asyncio.sleep(0.02)
        await outer.commit()
        paris = (await racing).facts[0].fact_id
        sets = (await memory.list_conflicts(setup, principal, project_id, "s", "open")).conflicts
        assert [{m.fact_id for m in s.members} for s in sets] == [{lyon, paris}]
        superseded = await memory.get_fact(setup, principal, oslo)
        assert superseded.status == "superseded"
    finally:
        for conn in (setup, resolver, writer):
            await conn.close()
