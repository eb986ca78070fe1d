"""Request limits (docs/reliability.md): body size, batch size, text lengths, per-key rate."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from service.api.ratelimit import RateLimiter
from service.embedding.embedder import Embedder
from service.errors import TooManyRequests
from service.settings import Settings, SettingsError
from tests.helpers import PROJECT, assert_error, bearer
from tests.helpers.app import make_client

SUBJECT = "limits"


def facts(n: int, content: str = "x") -> dict[str, Any]:
    return {"project_id": PROJECT, "subject_id": SUBJECT, "facts": [{"content": content}] * n}


def events(n: int) -> dict[str, Any]:
    return {
        "project_id": PROJECT,
        "subject_id": SUBJECT,
        "events": [{"content": "e", "occurred_at": "2024-01-01T00:00:00Z"}] * n,
    }


def context(query: str) -> dict[str, Any]:
    return {"project_id": PROJECT, "subject_id": SUBJECT, "query": query}


# --- body size ---------------------------------------------------------------------------------


async def test_body_over_max_body_bytes_is_a_413_in_the_error_shape(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    async with make_client(settings, conn, hash_embedder, max_body_bytes=4096) as client:
        small = facts(1, "y" * 1000)
        assert (await client.post("/v1/facts", json=small, headers=bearer(key))).status_code == 201
        big = facts(1, "y" * 5000)
        body = assert_error(
            await client.post("/v1/facts", json=big, headers=bearer(key)), 413, "payload_too_large"
        )
        # The limit and the setting that sets it, not Litestar's "Request Entity Too Large".
        assert "HAKI_MAX_BODY_BYTES (4096 bytes)" in body["message"]
        assert body["details"] == {"max_body_bytes": 4096}

        async def chunks() -> AsyncIterator[bytes]:
            # No Content-Length: the limit holds while the body streams in.
            raw = httpx.Request("POST", "/", json=big).content
            for i in range(0, len(raw), 1000):
                yield raw[i : i + 1000]

        r = await client.post(
            "/v1/facts", content=chunks(), headers={**bearer(key), "Content-Type": "application/json"}
        )
        assert_error(r, 413, "payload_too_large")
        listed = await client.get("/v1/facts", params={"project_id": PROJECT}, headers=bearer(key))
        assert len(listed.json()["facts"]) == 1


def test_max_body_bytes_default_and_environment() -> None:
    assert Settings.from_env({}).max_body_bytes == 16 * 1024 * 1024
    assert Settings.from_env({"HAKI_MAX_BODY_BYTES": "1000"}).max_body_bytes == 1000


# --- batch and text sizes ----------------------------------------------------------------------


async def test_batches_of_1000_pass_and_1001_are_refused(client: httpx.AsyncClient, key: str) -> None:
    r = await client.post("/v1/facts", json=facts(1001), headers=bearer(key))
    assert_error(r, 400, "validation_error", field="facts")
    r = await client.post("/v1/events", json=events(1001), headers=bearer(key))
    assert_error(r, 400, "validation_error", field="events")
    r = await client.post(
        f"/v1/conflicts/{uuid.uuid4()}/resolve",
        json={"keep": [str(uuid.uuid4())] * 1001},
        headers=bearer(key),
    )
    assert_error(r, 400, "validation_error", field="keep")

    r = await client.post("/v1/facts", json=facts(1000), headers=bearer(key))
    assert r.status_code == 201 and len(r.json()["facts"]) == 1000
    r = await client.post("/v1/events", json=events(1000), headers=bearer(key))
    assert r.status_code == 201 and len(r.json()["events"]) == 1000


@pytest.mark.parametrize("empty", [facts(0), events(0)])
async def test_empty_batches_are_refused(client: httpx.AsyncClient, key: str, empty: dict[str, Any]) -> None:
    route = "/v1/facts" if "facts" in empty else "/v1/events"
    assert_error(await client.post(route, json=empty, headers=bearer(key)), 400, "validation_error")


async def test_content_is_1_to_8000_characters(client: httpx.AsyncClient, key: str) -> None:
    assert (await client.post("/v1/facts", json=facts(1, "é" * 8000), headers=bearer(key))).status_code == 201
    r = await client.post("/v1/facts", json=facts(1, "é" * 8001), headers=bearer(key))
    assert_error(r, 400, "validation_error", field="facts[0].content")
    r = await client.post("/v1/facts", json=facts(1, ""), headers=bearer(key))
    assert_error(r, 400, "validation_error", field="facts[0].content")


async def test_query_is_1_to_4000_characters(client: httpx.AsyncClient, key: str) -> None:
    assert (
        await client.post("/v1/context", json=context("q" * 4000), headers=bearer(key))
    ).status_code == 200
    for bad in ("q" * 4001, ""):
        r = await client.post("/v1/context", json=context(bad), headers=bearer(key))
        assert_error(r, 400, "validation_error", field="query")


async def test_scope_ids_are_1_to_200_characters(client: httpx.AsyncClient, key: str) -> None:
    for bad in ("", "s" * 201):
        r = await client.post("/v1/context", json={**context("q"), "subject_id": bad}, headers=bearer(key))
        assert_error(r, 400, "validation_error", field="subject_id")


# --- rate limit --------------------------------------------------------------------------------


async def test_rate_limit_is_per_key_with_retry_after(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str, other_key: str
) -> None:
    async with make_client(settings, conn, hash_embedder, rate_limit_per_minute=5) as client:
        params = {"project_id": PROJECT}
        for _ in range(5):
            assert (await client.get("/v1/facts", params=params, headers=bearer(key))).status_code == 200
        r = await client.get("/v1/facts", params=params, headers=bearer(key))
        body = assert_error(r, 429, "rate_limited")
        assert r.headers["retry-after"] == "12"  # one token every 60/5 s
        assert body["details"]["retry_after_seconds"] == 12
        assert body["details"]["limit_per_minute"] == 5
        # Every route counts, and the refusal itself spends nothing more.
        r = await client.post("/v1/context", json=context("q"), headers=bearer(key))
        assert_error(r, 429, "rate_limited")
        # Another key has its own bucket.
        other = await client.get("/v1/facts", params={"project_id": "proj-b"}, headers=bearer(other_key))
        assert other.status_code == 200
        # Unknown keys are refused before the limiter (401), and do not spend anyone's tokens.
        assert (await client.get("/v1/facts", params=params, headers=bearer("hk_nope"))).status_code == 401


async def test_rate_limit_zero_turns_it_off(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    async with make_client(settings, conn, hash_embedder, rate_limit_per_minute=0) as client:
        for _ in range(50):
            r = await client.get("/v1/facts", params={"project_id": PROJECT}, headers=bearer(key))
            assert r.status_code == 200


def test_token_bucket_refills_over_time() -> None:
    now = [1000.0]
    limiter = RateLimiter(60, clock=lambda: now[0])  # one token per second, bursts of 60
    key_id = uuid.uuid4()
    for _ in range(60):
        limiter.take(key_id)
    with pytest.raises(TooManyRequests) as refused:
        limiter.take(key_id)
    assert refused.value.details == {"retry_after_seconds": 1, "limit_per_minute": 60}
    now[0] += 1.0
    limiter.take(key_id)  # one second later, one more
    with pytest.raises(TooManyRequests):
        limiter.take(key_id)
    now[0] += 3600
    for _ in range(60):  # never more than the burst, however long the pause
        limiter.take(key_id)
    with pytest.raises(TooManyRequests):
        limiter.take(key_id)


def test_rate_limit_default_and_environment() -> None:
    assert Settings.from_env({}).rate_limit_per_minute == 600
    assert Settings.from_env({"HAKI_RATE_LIMIT_PER_MINUTE": "0"}).rate_limit_per_minute == 0
    assert Settings.from_env({"HAKI_RATE_LIMIT_PER_MINUTE": "30"}).rate_limit_per_minute == 30
    with pytest.raises(SettingsError):
        Settings.from_env({"HAKI_RATE_LIMIT_PER_MINUTE": "-1"})
