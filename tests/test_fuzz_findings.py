"""Regressions for what tests/test_fuzz.py found in the product, pinned as plain examples."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import PROJECT, assert_error, bearer, post_events, post_facts

SUBJECT = "fuzzed"


def context(**extra: Any) -> dict[str, Any]:
    return {"project_id": PROJECT, "subject_id": SUBJECT, "query": "where does Alice live", **extra}


async def test_budget_beyond_bigint_is_a_400_not_a_500(client: httpx.AsyncClient, key: str) -> None:
    r = await client.post("/v1/context", json=context(budget_tokens=2**63), headers=bearer(key))
    assert_error(r, 400, "budget_exceeded", field="budget_tokens")
    r = await client.post("/v1/context", json=context(budget_tokens=2**80), headers=bearer(key))
    assert_error(r, 400, "budget_exceeded", field="budget_tokens")
    r = await client.post("/v1/context", json=context(budget_tokens=2**63 - 1), headers=bearer(key))
    assert r.status_code == 200 and r.json()["budget_tokens"] == 2**63 - 1


@pytest.mark.parametrize("valid_from", ["1900-01-01T00:00:00Z", "0001-01-02T00:00:00Z"])
async def test_very_old_memories_do_not_break_context(
    client: httpx.AsyncClient, key: str, valid_from: str
) -> None:
    """exp(-age/tau) underflowed in PostgreSQL for memories older than ~60 years: every context
    call of the scope was a 500."""
    r = await post_facts(
        client, key, [{"content": "Alice was born in Lyon", "valid_from": valid_from}], SUBJECT
    )
    assert r.status_code == 201, r.text
    fact_id = r.json()["facts"][0]["fact_id"]
    r = await post_events(
        client, key, [{"content": "Alice said she was born in Lyon", "occurred_at": valid_from}], SUBJECT
    )
    assert r.status_code == 201, r.text
    r = await client.post("/v1/context", json=context(), headers=bearer(key))
    assert r.status_code == 200, r.text
    assert [f["fact_id"] for f in r.json()["facts"]] == [fact_id]
    trace = (await client.get(f"/v1/inspect/{r.json()['trace_id']}", headers=bearer(key))).json()
    (decision,) = [d for d in trace["decisions"] if d["item_id"] == fact_id]
    assert 0 <= decision["recency"] < 1e-10


@pytest.mark.parametrize("instant", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"])
async def test_instants_stored_as_infinity_are_refused(
    client: httpx.AsyncClient, key: str, instant: str
) -> None:
    """asyncpg writes these two as -infinity/infinity, which read back without an offset."""
    r = await post_events(client, key, [{"content": "e", "occurred_at": instant}], SUBJECT)
    assert_error(r, 422, "validation_error", field="events[0].occurred_at")
    r = await post_facts(client, key, [{"content": "f", "valid_from": instant}], SUBJECT)
    body = assert_error(r, 422, "validation_error", field="facts[0].valid_from")
    assert "after 0001-01-01T00:00:00Z and before 9999-12-31T23:59:59.999999Z" in body["message"], body
    # Read as of that instant too: it would be stored in the trace as -infinity, with no offset.
    r = await client.post("/v1/context", json=context(as_of=instant), headers=bearer(key))
    assert_error(r, 422, "validation_error", field="as_of")


LAX = [
    ("/v1/context", context(budget_tokens="900"), "budget_exceeded", "budget_tokens"),
    ("/v1/context", context(budget_tokens=900.0), "budget_exceeded", "budget_tokens"),
    ("/v1/context", context(include_episodes=0), "validation_error", "include_episodes"),
    ("/v1/context", context(include_episodes="true"), "validation_error", "include_episodes"),
    (
        "/v1/events",
        {"project_id": PROJECT, "subject_id": SUBJECT, "events": [{"content": "e", "occurred_at": 0}]},
        "validation_error",
        "events[0].occurred_at",
    ),
    (
        "/v1/facts",
        {
            "project_id": PROJECT,
            "subject_id": SUBJECT,
            "facts": [{"content": "f", "volatility": "volatile", "stale_after_seconds": "60"}],
        },
        "validation_error",
        "facts[0].stale_after_seconds",
    ),
]


@pytest.mark.parametrize(("route", "body", "code", "field"), LAX, ids=[f"{c[3]}={c[1]!r:.0}" for c in LAX])
async def test_bodies_are_decoded_strictly(
    client: httpx.AsyncClient, key: str, route: str, body: dict[str, Any], code: str, field: str
) -> None:
    """Litestar's lax conversion turned "900" into 900 and 0 into 1970-01-01 or false."""
    assert_error(await client.post(route, json=body, headers=bearer(key)), 400, code, field=field)


async def test_strict_decoding_comes_after_authentication(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/context", json=context(budget_tokens="900"))
    assert_error(r, 401, "unauthorized")


async def test_healthz_is_documented_as_needing_no_key(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/docs/openapi.json")).json()
    assert schema["security"] == [{"bearer": []}]
    assert schema["paths"]["/healthz"]["get"]["security"] == [{}]
