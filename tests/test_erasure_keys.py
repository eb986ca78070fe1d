"""Erasing one memory takes the Idempotency-Key records whose stored response names it, as a
subject erasure does (haki_response_names, migration 0042): a retry of the write, or of the
extraction, under the same key then runs again instead of replaying the erased memory."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from service.ids import uuid7
from service.repository import idempotency
from tests.helpers import PROJECT, bearer
from tests.helpers.fake_chat import FakeChat, answer
from tests.helpers.sql import load_test_queries

SUBJECT = "keys"
OCCURRED = "2024-05-01T10:00:00Z"


def keyed(key: str, idempotency_key: str) -> dict[str, str]:
    return {**bearer(key), "Idempotency-Key": idempotency_key}


def facts_body(*contents: str) -> dict[str, Any]:
    return {"project_id": PROJECT, "subject_id": SUBJECT, "facts": [{"content": c} for c in contents]}


def events_body(*contents: str) -> dict[str, Any]:
    events = [{"content": c, "occurred_at": OCCURRED} for c in contents]
    return {"project_id": PROJECT, "subject_id": SUBJECT, "events": events}


async def post(
    client: httpx.AsyncClient, key: str, path: str, body: Any, idempotency_key: str
) -> httpx.Response:
    r = await client.post(path, json=body, headers=keyed(key, idempotency_key))
    assert r.status_code == 201, r.text
    return r


async def audit(conn: asyncpg.Connection) -> list[tuple[str, int]]:
    rows = load_test_queries().test_erasures(conn, project_id=PROJECT, subject_id=SUBJECT)
    return [(r["kind"], r["idempotency_keys"]) async for r in rows]


@pytest.mark.parametrize(
    ("path", "body", "other_body", "kind"),
    [
        ("/v1/facts", facts_body("u owns a cat", "u owns a dog"), facts_body("u owns a fish"), "fact"),
        ("/v1/events", events_body("u got a cat", "u got a dog"), events_body("u got a fish"), "event"),
    ],
)
async def test_erasing_a_memory_takes_the_keys_naming_it(
    client: httpx.AsyncClient,
    conn: asyncpg.Connection,
    key: str,
    path: str,
    body: Any,
    other_body: Any,
    kind: str,
) -> None:
    plural = f"{kind}s"
    first = await post(client, key, path, body, "k-erased")
    other = await post(client, key, path, other_body, "k-other")
    ids = [item[f"{kind}_id"] for item in first.json()[plural]]

    r = await client.delete(f"/v1/{plural}/{ids[0]}", headers=bearer(key))
    assert r.status_code == 200 and r.json()["idempotency_keys"] == 1, r.text
    assert await audit(conn) == [(kind, 1)]

    # The write under the erased memory's key runs again: new ids, no replay of the erased one.
    again = await post(client, key, path, body, "k-erased")
    assert "Idempotent-Replayed" not in again.headers, again.headers
    assert not {item[f"{kind}_id"] for item in again.json()[plural]} & set(ids), again.text
    # A record that does not name it stays: its retry is a replay.
    replay = await post(client, key, path, other_body, "k-other")
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json() == other.json()
    # The second erasure of the first batch finds its record gone already.
    r = await client.delete(f"/v1/{plural}/{ids[1]}", headers=bearer(key))
    assert r.status_code == 200 and r.json()["idempotency_keys"] == 0, r.text


async def test_erasing_an_extracted_event_takes_the_extraction_key(
    ext: httpx.AsyncClient, conn: asyncpg.Connection, key: str, chat: FakeChat
) -> None:
    """The extraction's answer names its events: a replay would hand back the erased message."""
    payload = {
        "subject_id": SUBJECT,
        "messages": [
            {"role": "user", "content": "I work at Globex.", "occurred_at": OCCURRED},
            {"role": "user", "content": "My SSN is 078-05-1120."},
        ],
    }
    chat.then(answer({"content": "u works at Globex.", "source_message": 0}))
    first = await post(ext, key, "/v1/extract", payload, "extract-1")
    secret = first.json()["events"][1]["event_id"]

    r = await ext.delete(f"/v1/events/{secret}", headers=bearer(key))
    assert r.status_code == 200 and r.json()["idempotency_keys"] == 1, r.text

    chat.then(answer({"content": "u works at Globex.", "source_message": 0}))
    again = await post(ext, key, "/v1/extract", payload, "extract-1")
    assert "Idempotent-Replayed" not in again.headers and len(chat.requests) == 2
    assert secret not in again.text


async def test_haki_response_names_inlines_and_reads_both_arrays(conn: asyncpg.Connection) -> None:
    """Both statements call it on columns: the plan holds its body, not a call. It finds an id as
    a fact's or an event's, in either array, and nothing in a response of another shape."""
    plan = "\n".join(
        r[0]
        for r in await conn.fetch(
            "EXPLAIN (VERBOSE, COSTS OFF) SELECT n.item_id FROM idempotency_keys AS k "
            "CROSS JOIN facts AS f "
            "CROSS JOIN LATERAL public.haki_response_names(k.response, ARRAY[f.fact_id]) AS n"
        )
    )
    assert "haki_response_names" not in plan, plan
    a, b, c = uuid7(), uuid7(), uuid7()
    names = (
        "SELECT array_agg(n.item_id ORDER BY n.item_id) "
        "FROM public.haki_response_names($1::jsonb, $2::uuid[]) AS n"
    )
    # The connection's jsonb codec encodes a Python value.
    response = {"facts": [{"fact_id": str(a)}], "events": [{"event_id": str(b)}], "proposals": []}
    assert await conn.fetchval(names, response, [a, b, c]) == sorted([str(a), str(b)])
    assert await conn.fetchval(names, response, [c]) is None
    # Not an array of items (the object itself, a JSON null, no response yet): names nothing.
    for shape in ({"facts": {"fact_id": str(a)}}, {"events": None}, None):
        assert await conn.fetchval(names, shape, [a]) is None, shape


async def test_an_erasure_reads_the_records_of_its_scope(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    """A record keeps its write's subject (migration 0042), and an erasure reads its own scope's
    records and those claimed before, which have none: another scope's never, whatever it holds."""
    r = await post(client, key, "/v1/facts", facts_body("u owns a kite"), "k-own")
    fact_id = r.json()["facts"][0]["fact_id"]
    naming = {"facts": [{"fact_id": fact_id}]}
    for subject, idempotency_key in (("elsewhere", "k-elsewhere"), (None, "k-before-0042")):
        assert await idempotency.claim_idempotency_key(conn, PROJECT, "x", idempotency_key, b"y" * 32, 3600)
        await idempotency.store_idempotent_response(conn, PROJECT, idempotency_key, 201, naming)
        await load_test_queries().test_set_idempotency_subject(
            conn, project_id=PROJECT, idempotency_key=idempotency_key, subject_id=subject
        )
    erased = await client.delete(f"/v1/facts/{fact_id}", headers=bearer(key))
    assert erased.status_code == 200 and erased.json()["idempotency_keys"] == 2, erased.text
    left = [
        k
        for k in ("k-own", "k-elsewhere", "k-before-0042")
        if await idempotency.find_idempotent_response(conn, PROJECT, k)
    ]
    assert left == ["k-elsewhere"]
