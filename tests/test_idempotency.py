"""`Idempotency-Key` on POST /v1/facts and POST /v1/events (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from service.api import auth
from service.embedding.embedder import Embedder
from service.settings import SETTING_BOUNDS, Settings, SettingsError, env_name
from tests.helpers import PROJECT, assert_error, bearer, list_all_facts
from tests.helpers.app import make_client, pooled_client
from tests.helpers.sql import load_test_queries

OTHER = "proj-b"


def facts_body(*contents: str, project_id: str = PROJECT, subject_id: str = "idem") -> dict[str, Any]:
    return {"project_id": project_id, "subject_id": subject_id, "facts": [{"content": c} for c in contents]}


def events_body(*contents: str, project_id: str = PROJECT) -> dict[str, Any]:
    return {
        "project_id": project_id,
        "subject_id": "idem",
        "events": [{"content": c, "occurred_at": "2024-03-01T12:00:00Z"} for c in contents],
    }


def idem(key: str, idempotency_key: str) -> dict[str, str]:
    return {**bearer(key), "Idempotency-Key": idempotency_key}


async def fact_ids(client: httpx.AsyncClient, key: str, project_id: str = PROJECT) -> list[str]:
    """Every fact of the project, through GET /v1/facts."""
    return [f["fact_id"] for f in await list_all_facts(client, key, project_id)]


async def test_retry_returns_the_first_response_and_writes_nothing(
    client: httpx.AsyncClient, key: str
) -> None:
    body = facts_body("Alice works at Acme", "Alice lives in Lyon")
    first = await client.post("/v1/facts", json=body, headers=idem(key, "k-1"))
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    written = await fact_ids(client, key)
    assert len(written) == 2

    for _ in range(3):
        again = await client.post("/v1/facts", json=body, headers=idem(key, "k-1"))
        assert again.status_code == 201, again.text
        assert again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true"
    # Same request re-serialised (other key order, other whitespace): still a replay.
    reordered = {"facts": body["facts"], "subject_id": body["subject_id"], "project_id": body["project_id"]}
    again = await client.post("/v1/facts", json=reordered, headers=idem(key, "k-1"))
    assert again.status_code == 201 and again.json() == first.json()
    assert await fact_ids(client, key) == written


async def test_same_key_other_body_is_a_409(client: httpx.AsyncClient, key: str) -> None:
    first = await client.post("/v1/facts", json=facts_body("one"), headers=idem(key, "k-2"))
    assert first.status_code == 201
    r = await client.post("/v1/facts", json=facts_body("two"), headers=idem(key, "k-2"))
    body = assert_error(r, 409, "conflict")
    assert body["details"] == {"idempotency_key": "k-2", "reason": "idempotency_key_reused"}
    # The same key on the other route is another request too.
    r = await client.post("/v1/events", json=events_body("one"), headers=idem(key, "k-2"))
    assert_error(r, 409, "conflict")
    assert len(await fact_ids(client, key)) == 1


async def events_count(conn: asyncpg.Connection) -> int:
    n: int = await load_test_queries().test_count_project_events(conn, project_id=PROJECT)
    return n


async def test_events_are_idempotent_too(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    body = events_body("met Bob", "moved to Lyon")
    first = await client.post("/v1/events", json=body, headers=idem(key, "e-1"))
    assert first.status_code == 201, first.text
    again = await client.post("/v1/events", json=body, headers=idem(key, "e-1"))
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert await events_count(conn) == 2
    assert_error(
        await client.post("/v1/events", json=events_body("x"), headers=idem(key, "e-1")), 409, "conflict"
    )
    assert await events_count(conn) == 2


async def test_keys_are_scoped_per_project(client: httpx.AsyncClient, key: str, other_key: str) -> None:
    a = await client.post("/v1/facts", json=facts_body("A's fact"), headers=idem(key, "shared"))
    assert a.status_code == 201
    # B with the same key and its own body: a write of its own, not A's response, not a 409.
    b = await client.post(
        "/v1/facts", json=facts_body("B's fact", project_id=OTHER), headers=idem(other_key, "shared")
    )
    assert b.status_code == 201, b.text
    assert "idempotent-replayed" not in b.headers
    assert b.json() != a.json()
    # B replaying A's exact request gets the 403 of any cross-project request, not A's response.
    r = await client.post("/v1/facts", json=facts_body("A's fact"), headers=idem(other_key, "shared"))
    assert_error(r, 403, "forbidden")
    assert "fact_id" not in r.text


async def test_failed_requests_are_not_recorded(client: httpx.AsyncClient, key: str) -> None:
    bad = {**facts_body("x"), "facts": [{"content": "x", "supersedes": str(uuid.uuid4())}]}
    for _ in range(2):
        assert_error(
            await client.post("/v1/facts", json=bad, headers=idem(key, "k-3")), 422, "validation_error"
        )
    # Nothing was recorded for the key: the corrected request goes through with it.
    r = await client.post("/v1/facts", json=facts_body("x"), headers=idem(key, "k-3"))
    assert r.status_code == 201 and "idempotent-replayed" not in r.headers


async def test_keys_expire_after_the_ttl(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    t = load_test_queries()
    async with make_client(settings, conn, hash_embedder, idempotency_ttl_seconds=120) as client:
        body = facts_body("volatile memory")
        first = await client.post("/v1/facts", json=body, headers=idem(key, "k-ttl"))
        assert first.status_code == 201
        record = await t.test_idempotency_record(conn, project_id=PROJECT, idempotency_key="k-ttl")
        assert (record["expires_at"] - record["created_at"]).total_seconds() == 120
        assert record["status_code"] == 201

        await t.test_expire_idempotency_keys(conn, project_id=PROJECT)
        again = await client.post("/v1/facts", json=body, headers=idem(key, "k-ttl"))
        assert again.status_code == 201 and "idempotent-replayed" not in again.headers
        assert again.json() != first.json()  # an expired key is a new request: written again
        assert len(await fact_ids(client, key)) == 2
        # And the key is live again, for the new response.
        third = await client.post("/v1/facts", json=body, headers=idem(key, "k-ttl"))
        assert third.json() == again.json() and third.headers["idempotent-replayed"] == "true"


async def test_the_longest_ttl_and_stale_window_the_settings_take_are_written(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """The highest values the start-up check lets through work; past them, every keyed (or
    volatile) write was a 500 (make_interval overflowed)."""
    ttl = SETTING_BOUNDS["idempotency_ttl_seconds"][1]
    stale = SETTING_BOUNDS["volatile_stale_after_seconds"][1]
    highest = Settings.from_env(
        {
            env_name(f): str(v)
            for f, v in (("idempotency_ttl_seconds", ttl), ("volatile_stale_after_seconds", stale))
        }
    )
    assert (highest.idempotency_ttl_seconds, highest.volatile_stale_after_seconds) == (ttl, stale)
    changes = {"idempotency_ttl_seconds": ttl, "volatile_stale_after_seconds": stale}
    async with make_client(settings, conn, hash_embedder, **changes) as client:
        body = facts_body("x")
        body["facts"][0]["volatility"] = "volatile"
        r = await client.post("/v1/facts", json=body, headers=idem(key, "k-century"))
        assert r.status_code == 201, r.text
        got = (await client.get(f"/v1/facts/{r.json()['facts'][0]['fact_id']}", headers=bearer(key))).json()
        assert got["stale_after_seconds"] == stale


@pytest.mark.parametrize("bad", ["", "x" * 256, "clé", "with space", "tab\tkey"])
async def test_malformed_keys_are_a_400(client: httpx.AsyncClient, key: str, bad: str) -> None:
    r = await client.post(
        "/v1/facts",
        json=facts_body("x"),
        headers=[(k.encode(), v.encode()) for k, v in bearer(key).items()]
        + [(b"Idempotency-Key", bad.encode())],
    )
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "validation_error"


async def test_header_is_documented_in_the_openapi_schema(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/docs/openapi.json")).json()
    for path in ("/v1/facts", "/v1/events"):
        params = {p["name"]: p for p in schema["paths"][path]["post"]["parameters"]}
        header = params["Idempotency-Key"]
        assert header["in"] == "header" and not header.get("required", False)
        assert "HAKI_IDEMPOTENCY_TTL_SECONDS" in header["description"]


def test_ttl_setting_from_the_environment() -> None:
    assert Settings.from_env({}).idempotency_ttl_seconds == 24 * 3600
    assert Settings.from_env({"HAKI_IDEMPOTENCY_TTL_SECONDS": "60"}).idempotency_ttl_seconds == 60
    for bad in ("0", "-5", "soon"):
        with pytest.raises(SettingsError):
            Settings.from_env({"HAKI_IDEMPOTENCY_TTL_SECONDS": bad})


# --- concurrency, on a real pool (committed data, a project of its own) -------------------------


@pytest.fixture
async def pooled(
    settings: Settings, migrated: str, hash_embedder: Embedder
) -> AsyncIterator[tuple[Any, str, str]]:
    project = f"idem-{uuid.uuid4().hex[:12]}"
    async with pooled_client(msgspec_replace(settings, pool_max_size=8), hash_embedder) as (client, pool):
        async with pool.acquire() as c:
            _, project_key = await auth.create_key(c, project)
        yield client, project, project_key


def msgspec_replace(settings: Settings, **changes: Any) -> Settings:
    import msgspec

    return msgspec.structs.replace(settings, **changes)


async def test_concurrent_retries_write_once(pooled: tuple[httpx.AsyncClient, str, str]) -> None:
    client, project, project_key = pooled
    body = facts_body(*(f"fact {i}" for i in range(50)), project_id=project)
    responses = await asyncio.gather(
        *(client.post("/v1/facts", json=body, headers=idem(project_key, "race")) for _ in range(8))
    )
    assert {r.status_code for r in responses} == {201}, [r.text for r in responses]
    assert len({r.text for r in responses}) == 1
    assert sum("idempotent-replayed" not in r.headers for r in responses) == 1
    assert len(await fact_ids(client, project_key, project)) == 50

    # Racing different bodies under one key: one wins, the others get a 409, one batch is written.
    bodies = [facts_body(f"variant {i}", project_id=project) for i in range(6)]
    responses = await asyncio.gather(
        *(client.post("/v1/facts", json=b, headers=idem(project_key, "race-2")) for b in bodies)
    )
    assert sorted(r.status_code for r in responses) == [201] + [409] * 5, [r.text for r in responses]
    assert len(await fact_ids(client, project_key, project)) == 51
