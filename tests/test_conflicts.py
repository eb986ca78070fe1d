"""ConflictSets: opened by keyed facts that disagree, listed, and resolved (docs/spec/api.md)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from service.db.sql import load_queries
from service.memory import cursors, writes
from service.settings import Settings
from tests.helpers import (
    PROJECT,
    assert_error,
    bearer,
    context,
    get_fact,
    json_of,
    post_facts,
    ts,
    write_facts,
)
from tests.helpers.sql import load_test_queries, parameter_order


async def list_conflicts(client: httpx.AsyncClient, key: str, **params: Any) -> list[dict[str, Any]]:
    r = await client.get("/v1/conflicts", params={"project_id": PROJECT, **params}, headers=bearer(key))
    assert r.status_code == 200, r.text
    sets: list[dict[str, Any]] = r.json()["conflicts"]
    return sets


def member_ids(conflict_set: dict[str, Any]) -> set[str]:
    return {m["fact_id"] for m in conflict_set["members"]}


async def resolve(client: httpx.AsyncClient, key: str, set_id: str, keep: list[str]) -> httpx.Response:
    return await client.post(f"/v1/conflicts/{set_id}/resolve", json={"keep": keep}, headers=bearer(key))


async def open_conflict(
    client: httpx.AsyncClient, key: str, subject_id: str = "c1", slot: str = "employer"
) -> tuple[str, str, str]:
    """Two clashing facts written one after the other: returns (set id, first fact, second fact)."""
    (a,) = await write_facts(client, key, [{"content": "Alice works at Acme", "key": slot}], subject_id)
    assert a["conflict_set_id"] is None
    (b,) = await write_facts(client, key, [{"content": "Alice works at Globex", "key": slot}], subject_id)
    assert b["status"] == "active"
    assert b["conflict_set_id"] is not None
    return b["conflict_set_id"], a["fact_id"], b["fact_id"]


# --- opening and joining -----------------------------------------------------------------------


async def test_clash_opens_a_set_with_both_facts(client: httpx.AsyncClient, key: str) -> None:
    set_id, a, b = await open_conflict(client, key)
    uuid.UUID(set_id)
    (cs,) = await list_conflicts(client, key, subject_id="c1")
    assert cs["conflict_set_id"] == set_id
    assert cs["status"] == "open"
    assert cs["key"] == "employer"
    assert cs["project_id"] == PROJECT and cs["subject_id"] == "c1"
    assert cs["resolved_at"] is None
    assert cs["created_at"] is not None
    assert member_ids(cs) == {a, b}
    assert {m["status"] for m in cs["members"]} == {"active"}
    assert {m["content"] for m in cs["members"]} == {"Alice works at Acme", "Alice works at Globex"}
    # Both facts stay active and point at the open set.
    for fid in (a, b):
        fact = await get_fact(client, key, fid)
        assert fact["status"] == "active"
        assert fact["conflict_set_id"] == set_id


async def test_third_value_joins_the_same_open_set(client: httpx.AsyncClient, key: str) -> None:
    set_id, a, b = await open_conflict(client, key)
    (c,) = await write_facts(client, key, [{"content": "Alice works at Initech", "key": "employer"}], "c1")
    assert c["conflict_set_id"] == set_id
    sets = await list_conflicts(client, key, subject_id="c1")
    assert len(sets) == 1
    assert member_ids(sets[0]) == {a, b, c["fact_id"]}
    # A repeat of a value already in the set still disagrees with the others: it joins too.
    (d,) = await write_facts(client, key, [{"content": "Alice works at Acme", "key": "employer"}], "c1")
    assert d["conflict_set_id"] == set_id
    sets = await list_conflicts(client, key, subject_id="c1")
    assert len(sets) == 1 and len(sets[0]["members"]) == 4


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


async def test_detection_reads_a_keys_facts_once_not_once_per_new_fact(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    # Pairing each new fact with each active fact of its key took 18 s for 1,000 new facts
    # into a set of 11,000.
    n = 40
    old = [{"content": f"Alice works at firm {i}", "key": "employer"} for i in range(n)]
    new = [{"content": f"Alice works at shop {i}", "key": "employer"} for i in range(n)]
    await write_facts(client, key, old, "lin")
    written = await write_facts(client, key, new, "lin")
    (set_id,) = {f["conflict_set_id"] for f in written}
    assert set_id is not None
    q: Any = load_queries()  # the statement's text, with aiosql's own attributes
    params = {
        "project_id": PROJECT,
        "subject_id": "lin",
        "fact_ids": [uuid.UUID(f["fact_id"]) for f in written],
    }
    args = [params[p] for p in parameter_order(q, "detect_conflicts")]
    async with conn.transaction():  # detection again (it changes nothing), explained
        raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + q.detect_conflicts.sql, *args)
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    rows = max(node["Actual Rows"] * node["Actual Loops"] for node in plan_nodes(plan))
    assert rows <= 4 * n, rows  # the key's 2n active facts, and n new ones; pairs were n x 2n


async def test_same_key_same_content_is_no_conflict(client: httpx.AsyncClient, key: str) -> None:
    (a,) = await write_facts(client, key, [{"content": "Alice lives in Oslo", "key": "city"}], "same")
    (b,) = await write_facts(client, key, [{"content": "Alice lives in Oslo", "key": "city"}], "same")
    assert a["conflict_set_id"] is None and b["conflict_set_id"] is None
    assert await list_conflicts(client, key, subject_id="same") == []
    assert (await get_fact(client, key, a["fact_id"]))["conflict_set_id"] is None


async def test_different_keys_subjects_and_unkeyed_facts_do_not_clash(
    client: httpx.AsyncClient, key: str
) -> None:
    await write_facts(client, key, [{"content": "Alice lives in Oslo", "key": "city"}], "iso-1")
    res = await write_facts(client, key, [{"content": "Alice lives in Bergen", "key": "home"}], "iso-1")
    res += await write_facts(client, key, [{"content": "Alice lives in Bergen", "key": "city"}], "iso-2")
    res += await write_facts(client, key, [{"content": "Alice lives in Bergen"}], "iso-1")
    assert all(r["conflict_set_id"] is None for r in res)
    assert await list_conflicts(client, key, subject_id="iso-1") == []
    assert await list_conflicts(client, key, subject_id="iso-2") == []


async def test_other_projects_facts_do_not_clash(client: httpx.AsyncClient, key: str, other_key: str) -> None:
    r = await post_facts(
        client,
        other_key,
        [{"content": "Alice works at Acme", "key": "employer"}],
        subject_id="x-proj",
        project_id="proj-b",
    )
    assert r.status_code == 201
    (mine,) = await write_facts(
        client, key, [{"content": "Alice works at Globex", "key": "employer"}], "x-proj"
    )
    assert mine["conflict_set_id"] is None


async def test_clash_inside_one_batch_opens_one_set(client: httpx.AsyncClient, key: str) -> None:
    res = await write_facts(
        client,
        key,
        [
            {"content": "Bob is 30", "key": "age"},
            {"content": "Bob likes jazz"},
            {"content": "Bob is 31", "key": "age"},
            {"content": "Bob drives a Fiat", "key": "car"},
            {"content": "Bob drives a Volvo", "key": "car"},
        ],
        "batch",
    )
    assert res[1]["conflict_set_id"] is None
    assert res[0]["conflict_set_id"] is not None
    assert res[0]["conflict_set_id"] == res[2]["conflict_set_id"]
    assert res[3]["conflict_set_id"] is not None
    assert res[3]["conflict_set_id"] == res[4]["conflict_set_id"] != res[0]["conflict_set_id"]
    sets = {cs["key"]: cs for cs in await list_conflicts(client, key, subject_id="batch")}
    assert set(sets) == {"age", "car"}
    assert member_ids(sets["age"]) == {res[0]["fact_id"], res[2]["fact_id"]}
    assert member_ids(sets["car"]) == {res[3]["fact_id"], res[4]["fact_id"]}


async def test_supersedes_is_no_conflict(client: httpx.AsyncClient, key: str) -> None:
    (a,) = await write_facts(client, key, [{"content": "Alice works at Acme", "key": "employer"}], "sup")
    (b,) = await write_facts(
        client,
        key,
        [{"content": "Alice works at Globex", "key": "employer", "supersedes": a["fact_id"]}],
        "sup",
    )
    assert b["conflict_set_id"] is None
    assert await list_conflicts(client, key, subject_id="sup") == []
    assert (await get_fact(client, key, a["fact_id"]))["status"] == "superseded"
    # The replaced value is no longer active, so a repeat of the current value clashes with nothing.
    (c,) = await write_facts(client, key, [{"content": "Alice works at Globex", "key": "employer"}], "sup")
    assert c["conflict_set_id"] is None


async def test_a_successor_joins_the_open_set_of_its_keys_other_claims(
    client: httpx.AsyncClient, key: str
) -> None:
    # It replaces one claim, not the others: before, the set resolved and both were served.
    set_id, acme, beta = await open_conflict(client, key, subject_id="sup-set")
    (gamma,) = await write_facts(
        client, key, [{"content": "Alice works at Gamma", "key": "employer", "supersedes": acme}], "sup-set"
    )
    assert gamma["conflict_set_id"] == set_id
    (cs,) = await list_conflicts(client, key, subject_id="sup-set")
    assert cs["status"] == "open", cs
    statuses = {m["fact_id"]: m["status"] for m in cs["members"]}
    assert statuses == {acme: "superseded", beta: "active", gamma["fact_id"]: "active"}
    assert not {beta, gamma["fact_id"]} & await served(client, key, "sup-set")


async def test_a_successor_of_another_key_clashes_with_its_own_keys_claim(
    client: httpx.AsyncClient, key: str
) -> None:
    paris, blue = await write_facts(
        client,
        key,
        [{"content": "Alice lives in Paris", "key": "city"}, {"content": "blue", "key": "color"}],
        "sup-key",
    )
    (berlin,) = await write_facts(
        client,
        key,
        [{"content": "Alice lives in Berlin", "key": "city", "supersedes": blue["fact_id"]}],
        "sup-key",
    )
    assert berlin["conflict_set_id"] is not None
    (cs,) = await list_conflicts(client, key, subject_id="sup-key")
    assert cs["key"] == "city" and member_ids(cs) == {paris["fact_id"], berlin["fact_id"]}
    assert (await get_fact(client, key, blue["fact_id"]))["status"] == "superseded"


async def test_retracted_fact_does_not_clash(client: httpx.AsyncClient, key: str) -> None:
    (a,) = await write_facts(client, key, [{"content": "Alice works at Acme", "key": "employer"}], "ret")
    r = await client.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200
    (b,) = await write_facts(client, key, [{"content": "Alice works at Globex", "key": "employer"}], "ret")
    assert b["conflict_set_id"] is None


# --- listing -----------------------------------------------------------------------------------


async def test_list_filters_by_subject_and_status(client: httpx.AsyncClient, key: str) -> None:
    s1, _, keep1 = await open_conflict(client, key, subject_id="lf-1")
    s2, _, _ = await open_conflict(client, key, subject_id="lf-2")
    s3, _, _ = await open_conflict(client, key, subject_id="lf-2", slot="city")
    r = await resolve(client, key, s1, [keep1])
    assert r.status_code == 200, r.text

    assert [cs["conflict_set_id"] for cs in await list_conflicts(client, key, subject_id="lf-1")] == [s1]
    assert {cs["conflict_set_id"] for cs in await list_conflicts(client, key, subject_id="lf-2")} == {s2, s3}
    open_ids = {cs["conflict_set_id"] for cs in await list_conflicts(client, key, status="open")}
    assert {s2, s3} <= open_ids and s1 not in open_ids
    resolved = await list_conflicts(client, key, status="resolved")
    assert s1 in {cs["conflict_set_id"] for cs in resolved}
    assert all(cs["status"] == "resolved" for cs in resolved)
    assert await list_conflicts(client, key, subject_id="lf-1", status="open") == []
    everything = {cs["conflict_set_id"] for cs in await list_conflicts(client, key)}
    assert {s1, s2, s3} <= everything


async def test_pages_hold_whole_sets_and_a_cursor(
    client: httpx.AsyncClient, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CONFLICT_PAGE_MEMBERS (10,000) made small: a silent LIMIT on member rows cut a big set's
    # members and left the older sets out.
    monkeypatch.setattr(writes, "CONFLICT_PAGE_MEMBERS", 3)
    big = await write_facts(client, key, [{"content": f"Alice is {n}", "key": "age"} for n in range(4)], "pg")
    small_1, _, _ = await open_conflict(client, key, subject_id="pg", slot="city")
    small_2, _, _ = await open_conflict(client, key, subject_id="pg", slot="car")
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        params = {"project_id": PROJECT, "subject_id": "pg", **({"cursor": cursor} if cursor else {})}
        page = json_of(await client.get("/v1/conflicts", params=params, headers=bearer(key)))
        pages.append(page["conflicts"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    # Any two sets pass 3 members: one a page, each once; the set of 4 comes alone, whole. (The
    # test's one transaction creates them at one instant: their ids order them.)
    assert [len(p) for p in pages] == [1, 1, 1]
    # The cursor carries its listing: with another filter it is refused, not read as a page of it.
    first = json_of(await client.get("/v1/conflicts", params={"subject_id": "pg"}, headers=bearer(key)))
    for other in ({}, {"subject_id": "pg", "status": "open"}, {"subject_id": "other"}):
        r = await client.get(
            "/v1/conflicts", params={**other, "cursor": first["next_cursor"]}, headers=bearer(key)
        )
        assert_error(r, 422, "validation_error", "cursor")
    listed = {p[0]["conflict_set_id"]: p[0] for p in pages}
    assert set(listed) == {small_1, small_2, big[0]["conflict_set_id"]}
    assert member_ids(listed[big[0]["conflict_set_id"]]) == {f["fact_id"] for f in big}
    # One page holds them all under the real bound.
    monkeypatch.undo()
    page = json_of(await client.get("/v1/conflicts", params={"subject_id": "pg"}, headers=bearer(key)))
    assert len(page["conflicts"]) == 3 and page["next_cursor"] is None


async def test_a_cursor_of_another_listing_is_refused(client: httpx.AsyncClient, key: str) -> None:
    await write_facts(client, key, ["one", "two"], "cur")
    facts = json_of(await client.get("/v1/facts", params={"limit": 1}, headers=bearer(key)))
    # Of this listing: too short; a year past 9999.
    issued = cursors.encode_conflict_cursor((PROJECT, None, None), datetime.now(UTC), uuid.uuid4())
    raw = base64.urlsafe_b64decode(issued + "=" * (-len(issued) % 4))
    forged = (raw[:-11], raw[:-24] + b"\x7f" * 8 + raw[-16:])
    tagged = [base64.urlsafe_b64encode(raw).decode().rstrip("=") for raw in forged]
    for cursor in (facts["next_cursor"], "bm90LWEtY3Vyc29y", *tagged):
        r = await client.get(
            "/v1/conflicts", params={"project_id": PROJECT, "cursor": cursor}, headers=bearer(key)
        )
        assert_error(r, 422, "validation_error", "cursor")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "closed"}, "status"),
        ({"subject_id": ""}, "subject_id"),
        ({"subject_id": "s" * 201}, "subject_id"),
    ],
    ids=["status", "empty_subject", "long_subject"],
)
async def test_list_bad_params(
    client: httpx.AsyncClient, key: str, params: dict[str, Any], field: str
) -> None:
    r = await client.get("/v1/conflicts", params={"project_id": PROJECT, **params}, headers=bearer(key))
    assert_error(r, 400, "validation_error", field)


# --- resolving ---------------------------------------------------------------------------------


async def test_resolve_keeps_some_and_supersedes_the_others(client: httpx.AsyncClient, key: str) -> None:
    set_id, a, b = await open_conflict(client, key, subject_id="res")
    (c,) = await write_facts(client, key, [{"content": "Alice works at Initech", "key": "employer"}], "res")
    assert c["conflict_set_id"] == set_id

    r = await resolve(client, key, set_id, [b])
    assert r.status_code == 200, r.text
    cs = r.json()
    assert cs["conflict_set_id"] == set_id
    assert cs["status"] == "resolved"
    resolved_at = ts(cs["resolved_at"])
    assert resolved_at is not None and abs(datetime.now(UTC) - resolved_at) < timedelta(minutes=5)
    assert {m["fact_id"]: m["status"] for m in cs["members"]} == {
        a: "superseded",
        b: "active",
        c["fact_id"]: "superseded",
    }

    kept = await get_fact(client, key, b)
    assert kept["status"] == "active"
    assert kept["valid_to"] is None
    assert kept["conflict_set_id"] is None  # no longer in an *open* set
    for fid in (a, c["fact_id"]):
        dropped = await get_fact(client, key, fid)
        assert dropped["status"] == "superseded"
        assert dropped["valid_to"] is not None
        assert ts(dropped["valid_to"]) == resolved_at
        assert dropped["conflict_set_id"] is None

    (listed,) = await list_conflicts(client, key, subject_id="res")
    assert listed["status"] == "resolved" and ts(listed["resolved_at"]) == resolved_at
    assert await list_conflicts(client, key, subject_id="res", status="open") == []

    # A later clash with the kept value opens a new set.
    (d,) = await write_facts(client, key, [{"content": "Alice works at Umbrella", "key": "employer"}], "res")
    assert d["conflict_set_id"] is not None and d["conflict_set_id"] != set_id
    (new_set,) = await list_conflicts(client, key, subject_id="res", status="open")
    assert member_ids(new_set) == {b, d["fact_id"]}


async def test_resolve_keeping_several(client: httpx.AsyncClient, key: str) -> None:
    set_id, a, b = await open_conflict(client, key, subject_id="res2")
    (c,) = await write_facts(client, key, [{"content": "Alice works at Initech", "key": "employer"}], "res2")
    r = await resolve(client, key, set_id, [a, c["fact_id"]])
    assert r.status_code == 200, r.text
    assert (await get_fact(client, key, a))["status"] == "active"
    assert (await get_fact(client, key, c["fact_id"]))["status"] == "active"
    assert (await get_fact(client, key, b))["status"] == "superseded"


async def test_resolve_future_dated_member_keeps_a_valid_interval(
    client: httpx.AsyncClient, key: str
) -> None:
    (a,) = await write_facts(client, key, [{"content": "Alice works at Acme", "key": "employer"}], "fut")
    (b,) = await write_facts(
        client,
        key,
        [{"content": "Alice works at Globex", "key": "employer", "valid_from": "2999-01-01T00:00:00Z"}],
        "fut",
    )
    set_id = b["conflict_set_id"]
    assert set_id is not None
    r = await resolve(client, key, set_id, [a["fact_id"]])
    assert r.status_code == 200, r.text
    dropped = await get_fact(client, key, b["fact_id"])
    assert dropped["status"] == "superseded"
    if dropped["valid_to"] is not None:
        assert ts(dropped["valid_to"]) > ts(dropped["valid_from"])  # type: ignore[operator]


async def test_resolve_twice_is_409(client: httpx.AsyncClient, key: str) -> None:
    set_id, a, b = await open_conflict(client, key, subject_id="twice")
    assert (await resolve(client, key, set_id, [a])).status_code == 200
    r = await resolve(client, key, set_id, [b])
    assert_error(r, 409, "conflict")
    # The second call changed nothing.
    assert (await get_fact(client, key, a))["status"] == "active"
    assert (await get_fact(client, key, b))["status"] == "superseded"


async def test_resolve_with_non_member_is_422(client: httpx.AsyncClient, key: str) -> None:
    set_id, a, _ = await open_conflict(client, key, subject_id="nonmember")
    (outsider,) = await write_facts(client, key, [{"content": "Alice has a cat"}], "nonmember")
    for keep, field in (([outsider["fact_id"]], "keep[0]"), ([a, str(uuid.uuid4())], "keep[1]")):
        r = await resolve(client, key, set_id, keep)
        assert_error(r, 422, "validation_error", field)
    (cs,) = await list_conflicts(client, key, subject_id="nonmember")
    assert cs["status"] == "open" and cs["resolved_at"] is None
    assert {m["status"] for m in cs["members"]} == {"active"}


async def test_resolve_gets_time_for_each_member(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str, settings: Settings
) -> None:
    # Each member not kept is superseded, its indexes written again: a set of 11,000 passed the
    # request's statement timeout, and a retry never helped.
    facts = [{"content": f"Alice is {n}", "key": "age"} for n in range(4)]
    written = await write_facts(client, key, facts, "slow")
    (d,) = await write_facts(client, key, [{"content": "Alice is 99", "key": "age"}], "slow")
    set_id = d["conflict_set_id"]
    assert set_id is not None
    r = await resolve(client, key, set_id, [d["fact_id"]])
    assert r.status_code == 200, r.text
    assert len(r.json()["members"]) == len(written) + 1
    # Set for the resolution's transaction, so the test's (a batch write's was 5,020 ms).
    timeout = await conn.fetchval("SELECT current_setting('statement_timeout')")
    assert timeout == f"{writes.write_timeout_ms(settings, 5)}ms" == "5100ms"


async def retract(client: httpx.AsyncClient, key: str, fact_id: str) -> None:
    r = await client.patch(f"/v1/facts/{fact_id}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text


async def served(client: httpx.AsyncClient, key: str, subject_id: str) -> set[str]:
    packet = await context(client, key, "Where does Alice work?", subject_id, profile="facts_first")
    return {f["fact_id"] for f in packet["facts"]}


@pytest.mark.parametrize("how", ["retracted", "superseded"])
async def test_a_set_left_with_one_active_member_resolves(
    client: httpx.AsyncClient, key: str, how: str
) -> None:
    # As an erasure does: the claim left stands alone, and is served again.
    set_id, a, b = await open_conflict(client, key, subject_id=f"left-{how}")
    assert b not in await served(client, key, f"left-{how}")
    if how == "retracted":
        await retract(client, key, a)
    else:
        await write_facts(client, key, [{"content": "Alice left Acme", "supersedes": a}], f"left-{how}")
    (cs,) = await list_conflicts(client, key, subject_id=f"left-{how}")
    assert cs["conflict_set_id"] == set_id
    assert cs["status"] == "resolved" and cs["resolved_at"] is not None, cs
    assert {m["fact_id"]: m["status"] for m in cs["members"]} == {a: how, b: "active"}
    assert b in await served(client, key, f"left-{how}")


async def test_a_set_with_two_active_members_left_stays_open(client: httpx.AsyncClient, key: str) -> None:
    set_id, a, b = await open_conflict(client, key, subject_id="three")
    (c,) = await write_facts(client, key, [{"content": "Alice works at Initech", "key": "employer"}], "three")
    assert c["conflict_set_id"] == set_id
    await retract(client, key, a)
    (cs,) = await list_conflicts(client, key, subject_id="three")
    assert cs["status"] == "open", cs
    # A retracted member cannot be kept; the set stays as it was.
    assert_error(await resolve(client, key, set_id, [a]), 422, "validation_error", "keep[0]")
    (cs,) = await list_conflicts(client, key, subject_id="three")
    assert cs["status"] == "open" and {m["status"] for m in cs["members"]} == {"retracted", "active"}, cs
    assert not {b, c["fact_id"]} & await served(client, key, "three")
    await retract(client, key, b)
    (cs,) = await list_conflicts(client, key, subject_id="three")
    assert cs["status"] == "resolved", cs
    assert c["fact_id"] in await served(client, key, "three")


@pytest.mark.parametrize(
    ("body", "field"),
    [({"keep": []}, "keep"), ({}, "keep"), ({"keep": ["nope"]}, "keep[0]"), ({"keep": "x"}, "keep")],
    ids=["empty_keep", "missing_keep", "not_uuid", "wrong_type"],
)
async def test_resolve_bad_bodies(
    client: httpx.AsyncClient, key: str, body: dict[str, Any], field: str
) -> None:
    set_id, _, _ = await open_conflict(client, key, subject_id="badbody")
    r = await client.post(f"/v1/conflicts/{set_id}/resolve", json=body, headers=bearer(key))
    assert_error(r, 400, "validation_error", field)
    (cs,) = await list_conflicts(client, key, subject_id="badbody")
    assert cs["status"] == "open"


async def test_resolve_unknown_set_is_404(client: httpx.AsyncClient, key: str) -> None:
    _, a, _ = await open_conflict(client, key, subject_id="unknown")
    r = await resolve(client, key, str(uuid.uuid4()), [a])
    assert_error(r, 404, "not_found")


async def test_the_conflict_list_is_planned_for_its_filters_every_time(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    """Whether a subject (or a status, a set, a cursor) is given decides the right index; the plan
    cache could give a generic plan after five calls on a connection: a seq scan and a sort of
    every set of the project (benchmarks/conflict_sets.py)."""
    facts = [{"content": f"Ann works at {w}", "key": "employer"} for w in "ab"]
    await write_facts(client, key, facts, "plan")
    statement: Any = load_queries().list_conflicts

    async def plans() -> tuple[int, int]:
        # The connection's counts so far: other tests of the session list conflicts on it too.
        row = await load_test_queries().test_prepared_plans(conn, statement=statement.sql)
        return (0, 0) if row is None else (row["generic_plans"], row["custom_plans"])

    generic, custom = await plans()
    for i in range(8):
        sets = await list_conflicts(client, key, **({"subject_id": "plan"} if i % 2 else {}))
        assert len(sets) == 1
    assert await plans() == (generic, custom + 8)
