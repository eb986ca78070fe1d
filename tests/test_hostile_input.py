"""Hostile text in `content` and `query`: a clean 4xx in the contract's error shape, or a correct
answer (stored and served back byte for byte). Never a 500, never SQL or tsquery syntax errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import PROJECT, assert_error, bearer, post_events, post_facts

SUBJECT = "hostile"

# Text PostgreSQL can store: must round-trip exactly and be found again.
STORABLE = {
    "sql_quote": "Robert'); DROP TABLE facts; --",
    "sql_or": "' OR '1'='1' /* */ UNION SELECT key_hash FROM api_keys --",
    "sql_placeholders": "$1 :project_id %s %(x)s ?",
    "sql_dollar_quote": "$$ ; DELETE FROM facts; $$ $tag$ x $tag$",
    "backslashes": "C:\\temp\\new \\x00 \\u0000 E'\\n'",
    "tsquery_ops": "!&|:*()<->",
    "tsquery_expr": "a & !b | (c:* <-> d) <2> e:AB & 'f'",
    "tsquery_unbalanced": "(((( ))) ' \" !!! &&& ||| <-> <-> :*",
    "websearch_syntax": '"unterminated phrase -not or OR -- "',
    "emoji": "Alice 👩‍👩‍👧‍👦 loves 🍕 and 🏳️‍🌈 and 🇫🇷",
    "rtl": "مرحبا بالعالم שלום עולם",
    "bidi_override": "\u202eevil\u202c and \u2066isolate\u2069 text",
    "zero_width": "a\u200bb\u200cc\u200dd\ufeffe",
    "combining": "Zalgo: z\u0351\u0352\u0353a\u0354\u0355l\u0356g\u0357o",
    "line_separators": "one\u2028two\u2029three\r\nfour\tfive",
    "control_chars": "bell\x07 escape\x1b[31m red \x7f del",
    "astral": "\U0001d54f\U0001f600\U00020000\U0010fffd",
    "whitespace_only": " \t ",
}

# What a query may hold, including what is no valid tsquery syntax at all.
QUERIES = {
    **STORABLE,
    "only_operators": "!&|",
    "only_stars": ":*:*:*",
    "single_quote": "'",
    "long_valid": "word " * 799,  # 3995 characters, under the 4000 limit
}


async def write_fact(client: httpx.AsyncClient, key: str, content: str) -> str:
    r = await post_facts(client, key, [{"content": content}], SUBJECT)
    assert r.status_code == 201, r.text
    fact_id: str = r.json()["facts"][0]["fact_id"]
    return fact_id


async def context(client: httpx.AsyncClient, key: str, query: str, **extra: Any) -> httpx.Response:
    return await client.post(
        "/v1/context",
        json={"project_id": PROJECT, "subject_id": SUBJECT, "query": query, **extra},
        headers=bearer(key),
    )


@pytest.mark.parametrize("name", sorted(STORABLE))
async def test_hostile_content_round_trips_and_is_found(
    client: httpx.AsyncClient, key: str, name: str
) -> None:
    content = STORABLE[name]
    fact_id = await write_fact(client, key, content)
    r = await client.get(f"/v1/facts/{fact_id}", headers=bearer(key))
    assert r.status_code == 200, r.text
    assert r.json()["content"] == content

    r = await client.post(
        "/v1/events",
        json={
            "project_id": PROJECT,
            "subject_id": SUBJECT,
            # Not the fact's text: the `unified` profile serves one text once (already_served).
            "events": [{"content": content + " (event)", "occurred_at": "2024-01-01T00:00:00Z"}],
        },
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text
    event_id = r.json()["events"][0]["event_id"]

    # The same text as the query finds the fact and the event again (the only ones of the scope).
    r = await context(client, key, content, budget_tokens=100000)
    assert r.status_code == 200, r.text
    packet = r.json()
    assert [f["fact_id"] for f in packet["facts"]] == [fact_id]
    assert packet["facts"][0]["content"] == content
    assert [e["event_id"] for e in packet["episodes"]] == [event_id]
    assert packet["episodes"][0]["content"] == content + " (event)"
    inspected = await client.get(f"/v1/inspect/{packet['trace_id']}", headers=bearer(key))
    assert inspected.status_code == 200 and inspected.json()["query"] == content


@pytest.mark.parametrize("name", sorted(QUERIES))
async def test_hostile_query_gets_a_packet(client: httpx.AsyncClient, key: str, name: str) -> None:
    fact_id = await write_fact(client, key, "Alice works at Acme in Lyon")
    r = await context(client, key, QUERIES[name])
    assert r.status_code == 200, r.text
    packet = r.json()
    assert packet["status"] in ("ok", "degraded")
    assert {f["fact_id"] for f in packet["facts"]} <= {fact_id}


NUL_CASES = [
    ("content", "a\x00b"),
    ("content", "\x00"),
    ("content", "x" * 100 + "\x00"),
]


@pytest.mark.parametrize(("field", "value"), NUL_CASES)
async def test_nul_in_content_is_a_400_naming_the_field(
    client: httpx.AsyncClient, key: str, field: str, value: str
) -> None:
    r = await post_facts(client, key, [{"content": "ok"}, {field: value}], SUBJECT)
    assert_error(r, 400, "validation_error", field="facts[1].content")
    r = await post_events(client, key, [{"content": value, "occurred_at": "2024-01-01T00:00:00Z"}], SUBJECT)
    assert_error(r, 400, "validation_error", field="events[0].content")


async def test_nul_elsewhere_is_a_clean_4xx(client: httpx.AsyncClient, key: str) -> None:
    assert_error(await context(client, key, "where\x00"), 400, "validation_error", field="query")
    r = await client.post(
        "/v1/context",
        json={"project_id": PROJECT, "subject_id": "a\x00", "query": "q"},
        headers=bearer(key),
    )
    assert_error(r, 400, "validation_error", field="subject_id")
    r = await post_facts(
        client, key, [{"content": "ok", "metadata": {"k\x00": "v", "nested": ["\x00"]}}], SUBJECT
    )
    assert_error(r, 422, "validation_error", field="facts[0].metadata")
    r = await client.get(
        "/v1/facts", params={"project_id": PROJECT, "subject_id": "a\x00"}, headers=bearer(key)
    )
    assert r.status_code == 400 and r.json()["code"] == "validation_error", r.text


async def test_100_kb_strings_are_refused_not_stored(client: httpx.AsyncClient, key: str) -> None:
    big = "A" * 100_000
    r = await post_facts(client, key, [{"content": big}], SUBJECT)
    assert_error(r, 400, "validation_error", field="facts[0].content")
    assert_error(await context(client, key, big), 400, "validation_error", field="query")
    emoji = "👩‍👩‍👧‍👦" * 15_000  # 100k code points, 375 KB of UTF-8
    assert_error(await context(client, key, emoji), 400, "validation_error", field="query")
    r = await client.get(
        "/v1/facts", params={"project_id": PROJECT, "subject_id": SUBJECT}, headers=bearer(key)
    )
    assert r.status_code == 200 and r.json()["facts"] == []


RAW_BODIES = [
    b'{"project_id": "proj-a", "subject_id": "s", "query": "\\ud800"}',  # lone surrogate
    b'{"project_id": "proj-a", "subject_id": "s", "query": "\xff\xfe"}',  # invalid UTF-8
    b'{"project_id": "proj-a", "subject_id": "s", "query": "q"',  # truncated
    b'{"project_id": "proj-a", "subject_id": "s", "query": "q", "query": "r"}',  # duplicate key
    b"\x00\x00\x00",
    b"[]",
    b"null",
]


@pytest.mark.parametrize("raw", RAW_BODIES)
async def test_malformed_json_is_a_400(client: httpx.AsyncClient, key: str, raw: bytes) -> None:
    r = await client.post(
        "/v1/context", content=raw, headers={**bearer(key), "Content-Type": "application/json"}
    )
    if r.status_code == 200:  # a duplicate key is valid JSON: the last one wins
        assert raw.count(b'"query"') == 2
        return
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "validation_error" and body["message"], body
