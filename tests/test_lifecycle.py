"""Memory lifecycle over HTTP on the real database: erasure of a subject, a fact and
an event; listing of events and subjects; export and its re-import; trace retention."""

from __future__ import annotations

import codecs
import re
import uuid
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest

from service.api.auth import Principal
from service.constants import MAX_SCOPE_CHARS
from service.embedding.embedder import Embedder
from service.errors import Conflict, EmbeddingModelMismatch
from service.memory import cursors, export, retention
from service.memory.importer import detect_kind
from service.observability.metrics import Metrics
from service.repository import idempotency
from service.settings import Settings
from tests.helpers import (
    METRICS_AUTH,
    PROJECT,
    CountingEmbedder,
    assert_error,
    bearer,
    context,
    fact_ids,
    get_fact,
    list_all_facts,
    write_events,
    write_facts,
)
from tests.helpers.app import SingleConnectionPool, asgi_transport
from tests.helpers.sql import load_test_queries

# The audit table names the subject erased, by design (and no content): it is the one table
# allowed to hold rows of an erased scope.
AUDIT_TABLE = "erasures"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def scope_rows(
    conn: asyncpg.Connection, subject_id: str, markers: list[str]
) -> dict[str, tuple[Any, int]]:
    """For every table with a project_id column (from the catalog: a table added later is
    covered): its rows of the scope (tables with subject_id, else None), and its rows of the
    project whose whole row, as JSON text, names a marker (the erased ids, a word of the texts)."""
    out: dict[str, tuple[Any, int]] = {}
    patterns = [f"%{m}%" for m in markers]
    async for t in load_test_queries().test_tenant_catalog(conn):
        table = _ident(t["table_name"])
        in_scope = None
        if t["has_subject"]:
            in_scope = await conn.fetchval(
                f"SELECT count(*) FROM public.{table} WHERE project_id = $1 AND subject_id = $2",
                PROJECT,
                subject_id,
            )
        naming = await conn.fetchval(
            f"SELECT count(*) FROM public.{table} AS x "
            "WHERE x.project_id = $1 AND to_jsonb(x)::text LIKE ANY ($2::text[])",
            PROJECT,
            patterns,
        )
        out[t["table_name"]] = (in_scope, naming)
    return out


def conflict_and_home(subject: str, tag: str) -> list[dict[str, Any]]:
    """Two employers under one key (an open conflict) and a home valid from 2020."""
    return [
        {"content": f"{subject} works at Acme {tag}", "key": "employer"},
        {"content": f"{subject} works at Globex {tag}", "key": "employer"},
        {"content": f"{subject} lives in Paris {tag}", "valid_from": "2020-01-01T00:00:00Z"},
    ]


async def idempotent_write(client: httpx.AsyncClient, key: str, subject: str, tag: str) -> httpx.Response:
    """The subject's one write under an Idempotency-Key (seed_subject's; again after an erase)."""
    return await client.post(
        "/v1/facts",
        json={
            "project_id": PROJECT,
            "subject_id": subject,
            "facts": [{"content": f"{subject} owns a cat {tag}"}],
        },
        headers={**bearer(key), "Idempotency-Key": f"idem-{subject}-{tag}"},
    )


async def seed_subject(client: httpx.AsyncClient, key: str, subject: str, tag: str) -> dict[str, Any]:
    """Facts (a conflict, a supersedes chain, a retraction, a source event), events, two traced
    context calls and an idempotent write of one subject."""
    events = await write_events(
        client, key, [(f"{subject} moved to Lyon {tag}", "2024-05-01T10:00:00Z")], subject_id=subject
    )
    first = await write_facts(
        client,
        key,
        [
            *conflict_and_home(subject, tag),
            {"content": f"{subject} likes tea {tag}", "source_event_id": events[0]},
        ],
        subject_id=subject,
    )
    ids = [f["fact_id"] for f in first]
    later = await fact_ids(
        client,
        key,
        [
            {
                "content": f"{subject} lives in Lyon {tag}",
                "supersedes": ids[2],
                "valid_from": "2024-05-01T00:00:00Z",
            }
        ],
        subject_id=subject,
    )
    r = await client.patch(f"/v1/facts/{ids[3]}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text
    r = await idempotent_write(client, key, subject, tag)
    assert r.status_code == 201, r.text
    traces = [
        (
            await context(
                client, key, f"Where does {subject} live and work {tag}", subject, budget_tokens=5000
            )
        )["trace_id"]
        for _ in range(2)
    ]
    return {
        "fact_ids": [*ids, *later, r.json()["facts"][0]["fact_id"]],
        "event_ids": events,
        "conflict_set_id": first[0]["conflict_set_id"],
        "trace_ids": traces,
    }


async def reads_of(
    client: httpx.AsyncClient, key: str, subject: str, seeded: dict[str, Any]
) -> dict[str, Any]:
    """Every read route's answer about one subject, as bytes (to compare before and after)."""
    h = bearer(key)
    out: dict[str, Any] = {
        "facts": (await client.get("/v1/facts", params={"subject_id": subject}, headers=h)).content,
        "events": (await client.get("/v1/events", params={"subject_id": subject}, headers=h)).content,
        "conflicts": (await client.get("/v1/conflicts", params={"subject_id": subject}, headers=h)).content,
        "fact_stats": (await client.get("/v1/stats/facts", params={"subject_id": subject}, headers=h)).json()[
            "facts"
        ],
    }
    for fid in seeded["fact_ids"]:
        out[fid] = (await client.get(f"/v1/facts/{fid}", headers=h)).content
    for eid in seeded["event_ids"]:
        out[eid] = (await client.get(f"/v1/events/{eid}", headers=h)).content
    for tid in seeded["trace_ids"]:
        out[tid] = (await client.get(f"/v1/inspect/{tid}", headers=h)).content
    export_lines = (await client.get(f"/v1/subjects/{subject}/export", headers=h)).content.splitlines()
    out["export"] = export_lines[1:]  # the header carries the instant of the export
    return out


async def test_subject_erase_takes_the_key_of_an_extraction_that_wrote_no_fact(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    """An extraction's answer names its events beside its facts (none here): its key names the
    subject's event, and a replay of it would repeat the erased messages' proposals."""
    (event_id,) = await write_events(client, key, [("Zoe said her SSN", "2024-05-01T10:00:00Z")], "zoe")
    answer = {"facts": [], "events": [{"event_id": event_id}], "proposals": [{"content": "Zoe's SSN"}]}
    assert await idempotency.claim_idempotency_key(conn, PROJECT, "zoe", "extract-1", b"x" * 32, 3600)
    await idempotency.store_idempotent_response(conn, PROJECT, "extract-1", 201, answer)
    r = await client.delete("/v1/subjects/zoe", params={"project_id": PROJECT}, headers=bearer(key))
    assert r.status_code == 200 and r.json()["idempotency_keys"] == 1, r.text
    assert await idempotency.find_idempotent_response(conn, PROJECT, "extract-1") is None


async def test_subject_erase_leaves_nothing_of_the_scope(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    tag, other_tag = uuid.uuid4().hex[:10], uuid.uuid4().hex[:10]
    alice = await seed_subject(client, key, "alice", tag)
    bob = await seed_subject(client, key, "bob", other_tag)
    bob_before = await reads_of(client, key, "bob", bob)
    markers = [tag, *alice["fact_ids"], *alice["event_ids"], *alice["trace_ids"], alice["conflict_set_id"]]
    before = await scope_rows(conn, "alice", markers)
    assert before["facts"][0] == 6 and before["idempotency_keys"][1] == 1, before

    r = await client.delete("/v1/subjects/alice", params={"project_id": PROJECT}, headers=bearer(key))
    assert r.status_code == 200, r.text
    counts = r.json()
    assert {k: counts[k] for k in counts if k not in ("erased_at",)} == {
        "project_id": PROJECT,
        "subject_id": "alice",
        "facts": 6,
        "events": 1,
        "conflict_sets": 1,
        "conflict_members": 2,
        "context_calls": 2,
        "decisions": counts["decisions"],
        "idempotency_keys": 1,
    }
    assert counts["decisions"] > 0

    # Raw SQL over every table with a project_id column: nothing of the scope is left, nor any row
    # naming its ids or the word its texts carried; the audit row holds counts, not content.
    after = await scope_rows(conn, "alice", markers)
    assert set(after) >= {"facts", "events", "conflict_sets", "conflict_members", "context_calls",
                          "context_traces", "idempotency_keys", AUDIT_TABLE}  # fmt: skip
    for table, (in_scope, naming) in after.items():
        assert naming == 0, (table, after)
        if table != AUDIT_TABLE:
            assert in_scope in (None, 0), (table, after)
    audit = [
        dict(r) async for r in load_test_queries().test_erasures(conn, project_id=PROJECT, subject_id="alice")
    ]
    assert len(audit) == 1 and audit[0]["kind"] == "subject" and audit[0]["facts"] == 6, audit

    # Every read route: nothing of alice.
    h = bearer(key)
    for fid in alice["fact_ids"]:
        assert_error(await client.get(f"/v1/facts/{fid}", headers=h), 404, "not_found")
    for eid in alice["event_ids"]:
        assert_error(await client.get(f"/v1/events/{eid}", headers=h), 404, "not_found")
    for tid in alice["trace_ids"]:
        assert_error(await client.get(f"/v1/inspect/{tid}", headers=h), 404, "not_found")
        assert_error(await client.post(f"/v1/inspect/{tid}/replay", headers=h), 404, "not_found")
    assert (await client.get("/v1/facts", params={"subject_id": "alice"}, headers=h)).json()["facts"] == []
    assert (await client.get("/v1/events", params={"subject_id": "alice"}, headers=h)).json()["events"] == []
    assert (await client.get("/v1/conflicts", params={"subject_id": "alice"}, headers=h)).json()[
        "conflicts"
    ] == []
    assert (await client.get("/v1/stats/facts", params={"subject_id": "alice"}, headers=h)).json()[
        "facts"
    ] == []
    subjects = (await client.get("/v1/subjects", headers=h)).json()["subjects"]
    assert [s["subject_id"] for s in subjects] == ["bob"], subjects
    assert_error(await client.get("/v1/subjects/alice/export", headers=h), 404, "not_found")
    for page in ("/v1/facts", "/v1/events", "/v1/conflicts", "/v1/stats/facts", "/v1/subjects"):
        assert tag not in (await client.get(page, headers=h)).text, page
    packet = await context(client, key, f"Where does alice live and work {tag}", "alice")
    assert packet["facts"] == [] and packet["episodes"] == [], packet
    # Nor as of an instant before the erasure: erased data cannot come back.
    past = await context(client, key, f"Where does alice live {tag}", "alice", as_of=counts["erased_at"])
    assert past["facts"] == [] and past["episodes"] == [], past

    # The other subject is byte-identical.
    assert await reads_of(client, key, "bob", bob) == bob_before

    # A new write to the same subject id starts empty.
    new = await fact_ids(client, key, [{"content": f"alice works at Acme {tag}", "key": "employer"}], "alice")
    listed = (await client.get("/v1/facts", params={"subject_id": "alice"}, headers=h)).json()["facts"]
    assert [f["fact_id"] for f in listed] == new and listed[0]["conflict_set_id"] is None, listed
    # The idempotent write of the erased subject runs again (its record went with it).
    r = await idempotent_write(client, key, "alice", tag)
    assert r.status_code == 201 and "Idempotent-Replayed" not in r.headers, r.text
    assert r.json()["facts"][0]["fact_id"] not in alice["fact_ids"]


async def test_erasing_an_empty_subject_answers_zeros(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    r = await client.delete("/v1/subjects/nobody", headers=bearer(key))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["facts"] == body["events"] == body["context_calls"] == 0, body
    # The erasure ran under HAKI_ERASURE_TIMEOUT_MS (set for its transaction: here the test's).
    assert await conn.fetchval("SELECT current_setting('statement_timeout')") == "2min"


async def test_fact_erase_leaves_a_consistent_conflict_set_and_traces(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    tag = uuid.uuid4().hex[:10]
    h = bearer(key)
    written = await write_facts(
        client,
        key,
        conflict_and_home("u", tag),
    )
    acme, globex, paris = (f["fact_id"] for f in written)
    set_id = written[0]["conflict_set_id"]
    (lyon,) = await fact_ids(
        client,
        key,
        [{"content": f"u lives in Lyon {tag}", "supersedes": paris, "valid_from": "2024-01-01T00:00:00Z"}],
    )
    packet = await context(client, key, f"Where does u work and live {tag}", budget_tokens=5000)
    trace = (await client.get(f"/v1/inspect/{packet['trace_id']}", headers=h)).json()
    assert {d["item_id"] for d in trace["decisions"]} >= {acme, globex}

    r = await client.delete(f"/v1/facts/{acme}", headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (
        body["fact_id"] == acme and body["conflict_members"] == 1 and body["conflict_sets_resolved"] == 1
    ), body
    assert body["decisions"] >= 1, body
    assert_error(await client.get(f"/v1/facts/{acme}", headers=h), 404, "not_found")
    assert_error(await client.delete(f"/v1/facts/{acme}", headers=h), 404, "not_found")
    # The set is resolved with the one member left, which stays active and servable.
    (cs,) = (await client.get("/v1/conflicts", params={"subject_id": "u1"}, headers=h)).json()["conflicts"]
    assert cs["conflict_set_id"] == set_id and cs["status"] == "resolved", cs
    assert [m["fact_id"] for m in cs["members"]] == [globex] and cs["members"][0]["status"] == "active"
    got = (await client.get(f"/v1/facts/{globex}", headers=h)).json()
    assert got["status"] == "active" and got["conflict_set_id"] is None, got
    # The trace no longer names it; the rest of it is intact; a replay of it answers.
    trace_after = (await client.get(f"/v1/inspect/{packet['trace_id']}", headers=h)).json()
    assert acme not in str(trace_after)
    assert [d for d in trace["decisions"] if d["item_id"] != acme] == trace_after["decisions"]
    r = await client.post(f"/v1/inspect/{packet['trace_id']}/replay", headers=h)
    assert r.status_code == 200, r.text
    assert acme not in r.text
    assert globex in [f["fact_id"] for f in r.json()["packet"]["facts"]]

    # A supersedes link that pointed at an erased fact becomes null.
    r = await client.delete(f"/v1/facts/{paris}", headers=h)
    assert r.status_code == 200 and r.json()["supersedes_unlinked"] == 1, r.text
    assert (await client.get(f"/v1/facts/{lyon}", headers=h)).json()["supersedes"] is None
    rows = await scope_rows(conn, "u1", [acme, paris])
    assert all(naming == 0 for _, naming in rows.values()), rows


async def test_a_conflict_set_of_three_stays_open_after_one_erase(
    client: httpx.AsyncClient, key: str
) -> None:
    written = await write_facts(
        client, key, [{"content": f"works at {c}", "key": "employer"} for c in ("Acme", "Globex", "Initech")]
    )
    r = await client.delete(f"/v1/facts/{written[0]['fact_id']}", headers=bearer(key))
    assert r.status_code == 200 and r.json()["conflict_sets_resolved"] == 0, r.text
    (cs,) = (await client.get("/v1/conflicts", params={"status": "open"}, headers=bearer(key))).json()[
        "conflicts"
    ]
    assert sorted(m["fact_id"] for m in cs["members"]) == sorted(f["fact_id"] for f in written[1:])


async def test_an_erase_leaving_one_claim_beside_a_retracted_member_resolves_the_set(
    client: httpx.AsyncClient, key: str
) -> None:
    h = bearer(key)
    acme, globex, initech = await fact_ids(
        client, key, [{"content": f"works at {c}", "key": "employer"} for c in ("Acme", "Globex", "Initech")]
    )
    r = await client.patch(f"/v1/facts/{acme}", json={"status": "retracted"}, headers=h)
    assert r.status_code == 200, r.text
    r = await client.delete(f"/v1/facts/{globex}", headers=h)
    # Two members are left, but one claim: Initech's.
    assert r.status_code == 200 and r.json()["conflict_sets_resolved"] == 1, r.text
    (cs,) = (await client.get("/v1/conflicts", headers=h)).json()["conflicts"]
    assert cs["status"] == "resolved", cs
    assert {m["fact_id"]: m["status"] for m in cs["members"]} == {acme: "retracted", initech: "active"}
    packet = await context(client, key, "Where does u work?", profile="facts_first")
    assert initech in [f["fact_id"] for f in packet["facts"]]


async def test_event_erase_unlinks_its_facts(client: httpx.AsyncClient, key: str) -> None:
    h = bearer(key)
    (event_id,) = await write_events(client, key, [("u went to Rome", "2024-05-01T10:00:00Z")])
    (fact_id,) = await fact_ids(client, key, [{"content": "u likes Rome", "source_event_id": event_id}])
    packet = await context(client, key, "u went to Rome", budget_tokens=5000)
    assert event_id in [e["event_id"] for e in packet["episodes"]]
    r = await client.delete(f"/v1/events/{event_id}", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["facts_unlinked"] == 1 and r.json()["decisions"] >= 1, r.text
    assert_error(await client.get(f"/v1/events/{event_id}", headers=h), 404, "not_found")
    assert_error(await client.delete(f"/v1/events/{event_id}", headers=h), 404, "not_found")
    fact = (await client.get(f"/v1/facts/{fact_id}", headers=h)).json()
    assert fact["source_event_id"] is None and fact["content"] == "u likes Rome"
    assert event_id not in (await client.get(f"/v1/inspect/{packet['trace_id']}", headers=h)).text


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/v1/facts/not-a-uuid"),
        ("DELETE", "/v1/events/not-a-uuid"),
        ("GET", "/v1/events/not-a-uuid"),
    ],
)
async def test_malformed_ids_are_400(client: httpx.AsyncClient, key: str, method: str, path: str) -> None:
    body = assert_error(await client.request(method, path, headers=bearer(key)), 400, "validation_error")
    assert body["details"]["field"] in ("fact_id", "event_id"), body


async def test_bad_cursors_are_400(client: httpx.AsyncClient, key: str) -> None:
    for path in ("/v1/events", "/v1/subjects"):
        body = assert_error(
            await client.get(path, params={"cursor": "!!!"}, headers=bearer(key)), 422, "validation_error"
        )
        assert body["details"]["field"] == "cursor", body


@pytest.mark.parametrize(
    "cursor",
    ["AA", "AA==", "YQBi", "cwBi", "cwA", cursors.encode_subject_cursor((PROJECT,), "a\0b")],
)
async def test_a_cursor_holding_nul_is_422(client: httpx.AsyncClient, key: str, cursor: str) -> None:
    # NUL, "a\0b", "s\0b" (a subjects tag before a NUL), and a subject id holding a NUL in a cursor
    # of this listing: PostgreSQL text cannot hold them, and the route must say so before its
    # statement does.
    body = assert_error(
        await client.get("/v1/subjects", params={"cursor": cursor}, headers=bearer(key)),
        422,
        "validation_error",
    )
    assert body["details"]["field"] == "cursor", body


async def test_a_cursor_pages_only_the_route_that_issued_it(client: httpx.AsyncClient, key: str) -> None:
    h = bearer(key)
    await write_facts(client, key, ["one", "two"], subject_id="u1")
    await write_events(client, key, [("e1", "2024-01-01T00:00:00Z"), ("e2", "2024-01-02T00:00:00Z")])
    await write_facts(client, key, ["three"], subject_id="u2")
    issued = {
        "/v1/facts": (await client.get("/v1/facts", params={"limit": 1}, headers=h)).json()["next_cursor"],
        "/v1/events": (await client.get("/v1/events", params={"limit": 1}, headers=h)).json()["next_cursor"],
        "/v1/subjects": (await client.get("/v1/subjects", params={"limit": 1}, headers=h)).json()[
            "next_cursor"
        ],
    }
    assert all(issued.values()), issued
    for route, cursor in issued.items():
        own = await client.get(route, params={"cursor": cursor}, headers=h)
        assert own.status_code == 200, own.text
        for other in issued.keys() - {route}:
            body = assert_error(
                await client.get(other, params={"cursor": cursor}, headers=h), 422, "validation_error"
            )
            assert body["details"]["field"] == "cursor", (route, other, body)


async def test_a_cursor_pages_only_the_listing_that_issued_it(
    client: httpx.AsyncClient, key: str, other_key: str
) -> None:
    """A cursor carries its listing: the same route with another filter or another project refuses
    it (a page after its id in another listing would be neither walk's page)."""
    h = bearer(key)
    for subject in ("u1", "u2"):
        await write_facts(client, key, ["one", "two"], subject_id=subject)
        await write_events(
            client, key, [("e1", "2024-01-01T00:00:00Z"), ("e2", "2024-01-02T00:00:00Z")], subject_id=subject
        )
        await write_facts(client, other_key, ["one", "two"], subject_id=subject, project_id="proj-b")
    issued_with: dict[str, str | int] = {"subject_id": "u1", "limit": 1}
    listings: dict[str, list[dict[str, str]]] = {
        "/v1/facts": [{"subject_id": "u2"}, {}, {"subject_id": "u1", "status": "active"}],
        "/v1/events": [{"subject_id": "u2"}, {}],
        "/v1/subjects": [],
    }
    for route, others in listings.items():
        params: dict[str, str | int] = {"limit": 1} if route == "/v1/subjects" else issued_with
        cursor = (await client.get(route, params=params, headers=h)).json()["next_cursor"]
        assert cursor, route
        again = await client.get(route, params={**params, "cursor": cursor}, headers=h)
        assert again.status_code == 200, again.text
        for filters in others:
            body = assert_error(
                await client.get(route, params={**filters, "cursor": cursor}, headers=h),
                422,
                "validation_error",
            )
            assert body["details"]["field"] == "cursor", (route, filters, body)
        body = assert_error(
            await client.get(route, params={**params, "cursor": cursor}, headers=bearer(other_key)),
            422,
            "validation_error",
        )
        assert body["details"]["field"] == "cursor", (route, body)


async def test_events_and_subjects_page_by_cursor(client: httpx.AsyncClient, key: str) -> None:
    h = bearer(key)
    written = await write_events(
        client, key, [(f"event {i}", f"2024-01-0{i + 1}T00:00:00Z") for i in range(5)]
    )
    await write_facts(client, key, ["a fact"], subject_id="s2")
    await write_events(client, key, [("another", "2024-01-01T00:00:00Z")], subject_id="s3")
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {
            "subject_id": "u1",
            "limit": 2,
            **({"cursor": cursor} if cursor else {}),
        }
        page = (await client.get("/v1/events", params=params, headers=h)).json()
        seen += [e["event_id"] for e in page["events"]]
        assert all(e["subject_id"] == "u1" for e in page["events"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == written
    event = (await client.get(f"/v1/events/{written[0]}", headers=h)).json()
    assert event["content"] == "event 0" and event["occurred_at"].startswith("2024-01-01"), event

    await write_facts(client, key, ["a fact of u1", "another fact of u1"], subject_id="u1")
    # Pages of each size, so that subjects of the facts alone, of the events alone and of both
    # meet inside a page and across the cursor (the statement walks each table's subjects apart).
    for limit in (1, 2, 3, 4):
        subjects: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": limit, **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/v1/subjects", params=params, headers=h)).json()
            assert len(page["subjects"]) <= limit
            subjects += page["subjects"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [(s["subject_id"], s["facts"], s["events"]) for s in subjects] == [
            ("s2", 1, 0),
            ("s3", 0, 1),
            ("u1", 2, 5),
        ], limit
        assert all(s["last_write_at"] for s in subjects)


async def test_the_longest_subject_id_pages_on(client: httpx.AsyncClient, key: str) -> None:
    """A subject id of 200 four-byte characters makes the longest cursor (1,076 characters); the
    route takes back every cursor it issues."""
    longest = ["\U0001f600" * MAX_SCOPE_CHARS, "\U0001f601" * MAX_SCOPE_CHARS]
    for subject in longest:
        await write_facts(client, key, ["a fact"], subject_id=subject)
    page = (await client.get("/v1/subjects", params={"limit": 1}, headers=bearer(key))).json()
    assert page["subjects"][0]["subject_id"] == longest[0] and len(page["next_cursor"]) == 1076
    params = {"limit": 1, "cursor": page["next_cursor"]}
    r = await client.get("/v1/subjects", params=params, headers=bearer(key))
    assert r.status_code == 200, r.text
    assert [s["subject_id"] for s in r.json()["subjects"]] == longest[1:]


def _comparable(lines: list[bytes]) -> list[dict[str, Any]]:
    """The export's items without what an import makes anew: ids become their positions."""
    items = [msgspec.json.decode(line) for line in lines[1:]]
    ids: dict[str, int] = {}
    for item in items:
        ids[item.get("fact_id") or item.get("event_id") or item.get("conflict_set_id") or "end"] = len(ids)
    out = []
    for item in items:
        if item["kind"] == "conflict_set":
            out.append({**item, "conflict_set_id": None, "members": sorted(ids[m] for m in item["members"])})
            continue
        kept = {
            k: v
            for k, v in item.items()
            if k
            not in ("fact_id", "event_id", "recorded_from", "recorded_to", "recorded_at", "conflict_set_id")
        }
        for link in ("supersedes", "source_event_id"):
            if kept.get(link) is not None:
                kept[link] = ids[kept[link]]
        out.append(kept)
    return out


async def test_export_then_import_gives_the_same_facts_and_events(
    client: httpx.AsyncClient,
    conn: asyncpg.Connection,
    key: str,
    settings: Settings,
    hash_embedder: Embedder,
) -> None:
    tag = uuid.uuid4().hex[:10]
    seeded = await seed_subject(client, key, "alice", tag)
    await write_facts(
        client,
        key,
        [
            {"content": f"alice is in Oslo {tag}", "volatility": "volatile", "stale_after_seconds": 3600,
             "metadata": {"source": "chat", "n": [1, 2]}},
            {"content": f"alice likes chess {tag}", "key": "hobby"},
            {"content": f"alice likes go {tag}", "key": "hobby"},
        ],
        subject_id="alice",
    )  # fmt: skip
    conflicts = (
        await client.get(
            "/v1/conflicts", params={"subject_id": "alice", "status": "open"}, headers=bearer(key)
        )
    ).json()
    hobby = next(c for c in conflicts["conflicts"] if c["key"] == "hobby")
    r = await client.post(
        f"/v1/conflicts/{hobby['conflict_set_id']}/resolve",
        json={"keep": [hobby["members"][0]["fact_id"]]},
        headers=bearer(key),
    )
    assert r.status_code == 200, r.text

    r = await client.get("/v1/subjects/alice/export", headers=bearer(key))
    assert r.status_code == 200 and r.headers["content-type"].startswith(export.MEDIA_TYPE), r.text
    lines = r.content.splitlines()
    header = msgspec.json.decode(lines[0])
    assert header["haki_export"] == 2 and header["subject_id"] == "alice" and header["project_id"] == PROJECT
    kinds = [msgspec.json.decode(line)["kind"] for line in lines[1:]]
    assert kinds == ["event"] * 1 + ["fact"] * 9 + ["conflict_set"] * 2 + ["end"], kinds
    assert msgspec.json.decode(lines[-1]) == {"kind": "end", "events": 1, "facts": 9, "conflict_sets": 2}
    statuses = sorted(msgspec.json.decode(line).get("status", "") for line in lines[1:])
    assert statuses.count("superseded") == 2 and statuses.count("retracted") == 1, statuses
    assert set(seeded["fact_ids"]) <= {msgspec.json.decode(line).get("fact_id") for line in lines}

    doc = export.parse_document(lines)
    summary = await export.import_document(
        conn,
        hash_embedder,
        settings,
        Principal(project_id=PROJECT, key_id=uuid.UUID(int=0)),
        doc,
        PROJECT,
        "alice-copy",
    )
    assert (summary.events, summary.facts, summary.retracted) == (1, 9, 1), summary
    again = (await client.get("/v1/subjects/alice-copy/export", headers=bearer(key))).content.splitlines()
    assert _comparable(again) == _comparable(lines)
    # The open employer conflict came back open, the hobby one resolved as exported.
    back = (
        await client.get("/v1/conflicts", params={"subject_id": "alice-copy"}, headers=bearer(key))
    ).json()
    assert sorted((c["key"], c["status"]) for c in back["conflicts"]) == [
        ("employer", "open"),
        ("hobby", "resolved"),
    ]


async def _import_export(
    conn: asyncpg.Connection, embedder: Embedder, settings: Settings, lines: list[bytes], subject_id: str
) -> export.ImportSummary:
    principal = Principal(project_id=PROJECT, key_id=uuid.UUID(int=0))
    doc = export.parse_document(lines)
    return await export.import_document(conn, embedder, settings, principal, doc, PROJECT, subject_id)


async def test_an_export_is_imported_only_into_an_empty_subject(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str, settings: Settings, hash_embedder: Embedder
) -> None:
    await write_facts(client, key, ["Ann works at Acme", "Ann works at Globex"], subject_id="ann")
    lines = (await client.get("/v1/subjects/ann/export", headers=bearer(key))).content.splitlines()
    await _import_export(conn, hash_embedder, settings, lines, "ann-copy")
    # A second import would merge two histories; it is refused and writes nothing.
    with pytest.raises(Conflict, match="empty subject"):
        await _import_export(conn, hash_embedder, settings, lines, "ann-copy")
    with pytest.raises(Conflict, match="empty subject"):
        await _import_export(conn, hash_embedder, settings, lines, "ann")
    assert len(await list_all_facts(client, key, subject_id="ann-copy")) == 2


async def test_an_export_on_another_model_is_refused_before_it_is_embedded(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str, settings: Settings
) -> None:
    await write_facts(client, key, ["Bo works at Acme"], subject_id="bo")
    lines = (await client.get("/v1/subjects/bo/export", headers=bearer(key))).content.splitlines()
    other = CountingEmbedder(model="model-b")
    with pytest.raises(EmbeddingModelMismatch):
        await _import_export(conn, other, settings, lines, "bo-copy")
    assert other.written == 0
    assert await list_all_facts(client, key, subject_id="bo-copy") == []


async def test_a_fact_superseded_by_an_erased_fact_is_imported_superseded(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str, settings: Settings, hash_embedder: Embedder
) -> None:
    h = bearer(key)
    rome, _ = await fact_ids(
        client, key, [{"content": "Carol lives in Rome", "key": "city"}, "Carol skis"], "carol"
    )
    (oslo,) = await fact_ids(client, key, [{"content": "Carol lives in Oslo", "supersedes": rome}], "carol")
    assert (await client.delete(f"/v1/facts/{oslo}", headers=h)).status_code == 200
    lines = (await client.get("/v1/subjects/carol/export", headers=h)).content.splitlines()
    summary = await _import_export(conn, hash_embedder, settings, lines, "carol-copy")
    copy = await get_fact(client, key, summary.fact_ids[rome])
    original = await get_fact(client, key, rome)
    assert copy["status"] == original["status"] == "superseded", copy
    assert copy["valid_to"] == original["valid_to"], (copy, original)
    packet = await context(client, key, "Where does Carol live?", "carol-copy", profile="facts_first")
    assert [f["content"] for f in packet["facts"]] == ["Carol skis"], packet


@pytest.mark.parametrize(
    ("fact", "problem"),
    [
        ({"content": ""}, "content"),
        ({"content": "x" * 8001}, "content"),
        ({"key": ""}, "key"),
        ({"volatility": "volatile", "stale_after_seconds": -5}, "stale_after_seconds"),
        ({"content": "a\u0000b"}, "content"),
        ({"supersedes": str(uuid.uuid4())}, "no fact before it"),
        ({"source_event_id": str(uuid.uuid4())}, "no event before"),
    ],
    ids=[
        "empty",
        "too_long",
        "empty_key",
        "negative_staleness",
        "nul",
        "dangling_supersedes",
        "dangling_source",
    ],
)
def test_an_export_line_a_write_would_refuse_is_refused(fact: dict[str, Any], problem: str) -> None:
    header = (
        b'{"haki_export": 1, "project_id": "p", "subject_id": "s", "exported_at": "2024-01-01T00:00:00Z"}'
    )
    good = {"kind": "fact", "fact_id": str(uuid.uuid4()), "content": "fine"}
    bad = {"kind": "fact", "fact_id": str(uuid.uuid4()), "content": "fine", **fact}
    with pytest.raises(ValueError, match=f"line 3: .*{re.escape(problem)}"):
        export.parse_document([header, msgspec.json.encode(good), msgspec.json.encode(bad)])


def test_an_export_of_another_version_or_with_a_repeated_id_is_refused() -> None:
    fact = msgspec.json.encode({"kind": "fact", "fact_id": str(uuid.uuid4()), "content": "fine"})
    v3 = b'{"haki_export": 3, "project_id": "p", "subject_id": "s", "exported_at": "2024-01-01T00:00:00Z"}'
    with pytest.raises(ValueError, match="haki_export 3"):
        export.parse_document([v3, fact])
    with pytest.raises(ValueError, match=r"line 2: fact_id .* appears twice"):
        export.parse_document([fact, fact])


def test_haki_import_detects_an_export_document(tmp_path: Any) -> None:
    path = tmp_path / "alice.jsonl"
    path.write_bytes(
        b'{"haki_export": 1, "project_id": "p", "subject_id": "s", "exported_at": "2024-01-01T00:00:00Z"}\n'
    )
    assert detect_kind(path) == "export"


async def test_stats_say_the_window_they_count_over(
    client: httpx.AsyncClient, key: str, settings: Settings
) -> None:
    body = (await client.get("/v1/stats/overview", headers=bearer(key))).json()
    assert body["trace_retention_days"] == settings.trace_retention_days == 30, body
    body = (await client.get("/v1/stats/facts", headers=bearer(key))).json()
    assert body["trace_retention_days"] == 30, body


async def _traced_calls(client: httpx.AsyncClient, key: str, subject: str, n: int) -> list[str]:
    return [(await context(client, key, f"what about {subject} {i}", subject))["trace_id"] for i in range(n)]


async def test_retention_purges_exactly_the_expired_calls_in_batches(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str, settings: Settings
) -> None:
    await write_facts(client, key, ["u likes tea", "u likes coffee"])
    old = await _traced_calls(client, key, "u1", 5)
    fresh = await _traced_calls(client, key, "u1", 3)
    await load_test_queries().test_backdate_context_calls(conn, project_id=PROJECT, trace_ids=old, days=31)
    metrics = Metrics()
    batches: list[tuple[int, int]] = []

    def seen(calls: int, decisions: int) -> None:
        batches.append((calls, decisions))
        metrics.observe_purge(calls, decisions)

    purge_settings = msgspec.structs.replace(settings, trace_purge_batch=2)
    before = await load_test_queries().test_context_call_counts(conn, project_id=PROJECT)
    purged = await retention.purge_once(SingleConnectionPool(conn), purge_settings, on_batch=seen)
    assert [c for c, _ in batches] == [2, 2, 1] and purged.context_calls == 5, batches
    after = await load_test_queries().test_context_call_counts(conn, project_id=PROJECT)
    assert after["calls"] == before["calls"] - 5
    assert after["decisions"] == before["decisions"] - purged.decisions and purged.decisions > 0
    for tid in old:
        assert_error(await client.get(f"/v1/inspect/{tid}", headers=bearer(key)), 404, "not_found")
    for tid in fresh:
        assert (await client.get(f"/v1/inspect/{tid}", headers=bearer(key))).status_code == 200
    text = metrics.exposition().decode()
    assert 'haki_trace_rows_purged_total{table="context_calls"} 5.0' in text, text
    # Decisions are counted as what they are, not as rows of context_traces (which held none).
    assert f"haki_trace_decisions_purged_total {float(purged.decisions)}" in text, text
    assert 'table="context_traces"' not in text
    # Nothing left to purge; retention 0 purges nothing at all.
    assert (await retention.purge_once(SingleConnectionPool(conn), purge_settings)).context_calls == 0
    await load_test_queries().test_backdate_context_calls(
        conn, project_id=PROJECT, trace_ids=fresh, days=3650
    )
    forever = msgspec.structs.replace(settings, trace_retention_days=0)
    assert (await retention.purge_once(SingleConnectionPool(conn), forever)).context_calls == 0


async def test_metrics_page_lists_purged_rows(client: httpx.AsyncClient) -> None:
    text = (await client.get("/metrics", headers=METRICS_AUTH)).text
    assert 'haki_trace_rows_purged_total{table="context_calls"}' in text
    assert "\nhaki_trace_decisions_purged_total " in text


async def test_a_subject_id_with_a_slash_is_erased_and_exported_by_query(
    client: httpx.AsyncClient, key: str
) -> None:
    h = bearer(key)
    await write_facts(client, key, ["a fact of a/b"], subject_id="a/b")
    await write_facts(client, key, ["a fact of export"], subject_id="export")
    r = await client.get("/v1/subjects/export", params={"subject_id": "a/b"}, headers=h)
    assert r.status_code == 200 and b"a fact of a/b" in r.content, r.text
    r = await client.get("/v1/subjects/export/export", headers=h)  # a subject named `export`
    assert r.status_code == 200 and b"a fact of export" in r.content, r.text
    assert_error(await client.delete("/v1/subjects", headers=h), 400, "validation_error")
    r = await client.delete("/v1/subjects", params={"subject_id": "a/b"}, headers=h)
    assert r.status_code == 200 and r.json()["facts"] == 1, r.text
    assert (await client.get("/v1/facts", params={"subject_id": "a/b"}, headers=h)).json()["facts"] == []
    assert (
        len((await client.get("/v1/facts", params={"subject_id": "export"}, headers=h)).json()["facts"]) == 1
    )
    # The subject `export` is erased in the query form: its path is the query form's export.
    assert_error(await client.delete("/v1/subjects/export", headers=h), 405, "method_not_allowed")
    r = await client.delete("/v1/subjects", params={"subject_id": "export"}, headers=h)
    assert r.status_code == 200 and r.json()["facts"] == 1, r.text


async def test_retention_runs_beside_context_calls_and_never_waits_on_them(
    settings: Settings, migrated: str, hash_embedder: Embedder
) -> None:
    """Committed data on a real pool: the purge removes exactly the expired calls, in batches,
    while context calls go on; a call another transaction holds is skipped, not waited for."""
    import asyncio

    from service.api import auth
    from service.app import create_app
    from service.db import create_pool
    from service.repository import lifecycle as lifecycle_repo

    project = f"retention-{uuid.uuid4().hex[:8]}"
    pool = await create_pool(msgspec.structs.replace(settings, pool_max_size=6))
    try:
        async with pool.acquire() as c:
            key_id, key = await auth.create_key(c, project)
        app = create_app(settings, pool=pool, embedder=hash_embedder)
        transport = asgi_transport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            await write_facts(client, key, ["u likes tea", "u likes rain"], project_id=project)

            async def call(i: int) -> str:
                r = await client.post(
                    "/v1/context",
                    json={"project_id": project, "subject_id": "u1", "query": f"what does u like {i}"},
                    headers=bearer(key),
                )
                assert r.status_code == 200, r.text
                trace_id: str = r.json()["trace_id"]
                return trace_id

            old = [await call(i) for i in range(24)]
            fresh = [await call(i) for i in range(6)]
            async with pool.acquire() as c:
                await load_test_queries().test_backdate_context_calls(
                    c, project_id=project, trace_ids=old, days=40
                )
            batches: list[int] = []
            purge_settings = msgspec.structs.replace(settings, trace_purge_batch=5)
            # One expired call held by another transaction, as a request would hold it.
            async with pool.acquire() as holder, holder.transaction():
                await load_test_queries().test_lock_context_call(holder, project_id=project, trace_id=old[0])
                during, purged = await asyncio.gather(
                    asyncio.gather(*(call(100 + i) for i in range(20))),
                    asyncio.wait_for(
                        retention.purge_once(pool, purge_settings, on_batch=lambda n, _: batches.append(n)),
                        timeout=60,
                    ),
                )
            assert purged.context_calls == 23 and all(n <= 5 for n in batches) and len(batches) >= 5, batches
            h = bearer(key)
            assert (await client.get(f"/v1/inspect/{old[0]}", headers=h)).status_code == 200  # skipped
            for tid in old[1:]:
                assert (await client.get(f"/v1/inspect/{tid}", headers=h)).status_code == 404
            for tid in [*fresh, *during]:
                assert (await client.get(f"/v1/inspect/{tid}", headers=h)).status_code == 200
            # Released, the held call goes at the next purge.
            assert (await retention.purge_once(pool, purge_settings)).context_calls == 1
    finally:
        async with pool.acquire() as c:
            await lifecycle_repo.erase_subject(c, project, "u1", uuid.uuid4(), uuid.uuid4())
            await auth.revoke_key_id(c, project, key_id)
        await pool.close()


async def test_the_background_task_purges_and_counts_on_metrics(
    settings: Settings, migrated: str, hash_embedder: Embedder
) -> None:
    """retention.run_forever, as `haki serve` runs it: purges at each interval, counts on /metrics,
    and stops when cancelled."""
    import asyncio

    from service.api import auth
    from service.app import create_app
    from service.db import create_pool
    from service.repository import lifecycle as lifecycle_repo

    project = f"retention-{uuid.uuid4().hex[:8]}"
    pool = await create_pool(settings)
    metrics = Metrics()
    try:
        async with pool.acquire() as c:
            key_id, key = await auth.create_key(c, project)
        app = create_app(settings, pool=pool, embedder=hash_embedder)
        async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://t") as client:
            await write_facts(client, key, ["u likes tea"], project_id=project)
            traces = []
            for i in range(3):
                r = await client.post(
                    "/v1/context",
                    json={"project_id": project, "subject_id": "u1", "query": f"tea {i}"},
                    headers=bearer(key),
                )
                traces.append(r.json()["trace_id"])
        async with pool.acquire() as c:
            await load_test_queries().test_backdate_context_calls(
                c, project_id=project, trace_ids=traces[:2], days=31
            )
        fast = msgspec.structs.replace(settings, trace_purge_interval_seconds=0.05)
        task = asyncio.create_task(retention.run_forever(pool, fast, metrics.observe_purge))
        try:
            for _ in range(200):
                if metrics.trace_rows_purged.labels(table="context_calls")._value.get() >= 2:
                    break
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert 'haki_trace_rows_purged_total{table="context_calls"} 2.0' in metrics.exposition().decode()
        async with pool.acquire() as c:
            counts = await load_test_queries().test_context_call_counts(c, project_id=project)
        assert counts["calls"] == 1
    finally:
        async with pool.acquire() as c:
            await lifecycle_repo.erase_subject(c, project, "u1", uuid.uuid4(), uuid.uuid4())
            await auth.revoke_key_id(c, project, key_id)
        await pool.close()


def test_an_export_document_with_a_byte_order_mark_is_read() -> None:
    """A Windows editor's UTF-8 byte order mark before line 1 is no part of the header."""
    header = (
        b'{"haki_export": 1, "project_id": "p", "subject_id": "s", "exported_at": "2024-01-01T00:00:00Z"}'
    )
    fact = msgspec.json.encode({"kind": "fact", "fact_id": str(uuid.uuid4()), "content": "fine"})
    doc = export.parse_document([codecs.BOM_UTF8 + header, fact])
    assert doc.header is not None and doc.header.subject_id == "s"
    assert [f.content for f in doc.facts] == ["fine"]
    with pytest.raises(ValueError, match="line 2"):  # only line 1 may carry it
        export.parse_document([header, codecs.BOM_UTF8 + fact])
