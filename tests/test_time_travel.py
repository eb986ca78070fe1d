"""Time travel over HTTP (docs/time-travel.md): transaction time on facts, `as_of` on
POST /v1/context, POST /v1/inspect/{trace_id}/replay, and what each fact is worth.

A test runs in one rolled-back transaction whose now() never moves, so every write and call of it
has the same instant. To put an hour between "then" and "now", test_shift_project_times moves
every instant of the project (facts, events, conflict sets, the call log) an hour into the past;
what is written after it happens "now".
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import httpx
import pytest

from service.context.call import PROFILE_WEIGHTS
from service.embedding.embedder import Embedder
from service.settings import Settings
from tests.helpers import (
    PROJECT,
    assert_error,
    bearer,
    context,
    context_and_trace,
    fact_ids,
    get_fact,
    inspect,
    iso,
    post_context,
    write_events,
    write_facts,
)
from tests.helpers.app import make_client
from tests.helpers.sql import load_test_queries

HOUR = 3600.0
QUERY = "where does the user live, what do they do and what do they play"


async def shift_an_hour_back(conn: asyncpg.Connection) -> None:
    await load_test_queries().test_shift_project_times(conn, project_id=PROJECT, seconds=HOUR)


async def resolve(client: httpx.AsyncClient, key: str, set_id: str, keep: list[str]) -> None:
    r = await client.post(f"/v1/conflicts/{set_id}/resolve", json={"keep": keep}, headers=bearer(key))
    assert r.status_code == 200, r.text


async def replay(
    client: httpx.AsyncClient, key: str, trace_id: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    if body is None:
        return await client.post(f"/v1/inspect/{trace_id}/replay", headers=bearer(key))
    return await client.post(f"/v1/inspect/{trace_id}/replay", headers=bearer(key), json=body)


def decisions_of(trace: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (d["item_type"], d["item_id"], d["decision"], d["reason_code"], d["rank"]) for d in trace["decisions"]
    ]


def decision_scores(trace: dict[str, Any]) -> list[float | None]:
    return [d["score"] for d in trace["decisions"]]


def served(packet: dict[str, Any]) -> list[str]:
    return [f["fact_id"] for f in packet["facts"]] + [e["event_id"] for e in packet["episodes"]]


def scores(packet: dict[str, Any]) -> list[float]:
    return [f["score"] for f in packet["facts"]] + [e["score"] for e in packet["episodes"]]


async def seed_a_history(client: httpx.AsyncClient, key: str, subject: str) -> dict[str, str]:
    """A scope as it stood at the first call: facts of which one will be superseded, one
    retracted, one will lose a conflict opened later, two in a conflict open then (resolved
    later), a volatile fact still fresh then, and an event."""
    ids = dict(
        zip(
            ["city", "tea", "job", "cello", "violin", "cat", "mood"],
            await fact_ids(
                client,
                key,
                [
                    {"content": "the user lives in paris", "key": "city"},
                    "the user likes green tea in the morning",
                    {"content": "the user works as a nurse", "key": "job"},
                    {"content": "the user plays the cello", "key": "instrument"},
                    {"content": "the user plays the violin", "key": "instrument"},
                    "the user has a cat called miso",
                    {
                        "content": "the user is tired today",
                        "volatility": "volatile",
                        "stale_after_seconds": 1800,
                    },
                ],
                subject,
            ),
            strict=True,
        )
    )
    (ids["event"],) = await write_events(
        client,
        key,
        [("the user moved flats last spring", iso(datetime.now(UTC) - timedelta(days=200)))],
        subject,
    )
    return ids


async def change_everything(client: httpx.AsyncClient, key: str, subject: str, ids: dict[str, str]) -> None:
    """What happens after the first call: a supersede, a retraction, new facts, a conflict opened
    and resolved, the open conflict resolved, a new event."""
    (berlin,) = await write_facts(
        client,
        key,
        [{"content": "the user lives in berlin", "key": "city", "supersedes": ids["city"]}],
        subject,
    )
    r = await client.patch(f"/v1/facts/{ids['tea']}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text
    await write_facts(
        client, key, ["the user plays the piano at home", "the user lives near a lake"], subject
    )
    (teacher,) = await write_facts(
        client, key, [{"content": "the user works as a teacher", "key": "job"}], subject
    )
    assert teacher["conflict_set_id"] is not None
    await resolve(client, key, teacher["conflict_set_id"], [teacher["fact_id"]])
    cello = await get_fact(client, key, ids["cello"])
    assert cello["conflict_set_id"] is not None
    await resolve(client, key, cello["conflict_set_id"], [ids["cello"]])
    await write_events(client, key, [("the user played piano at a concert", iso(datetime.now(UTC)))], subject)
    assert berlin["status"] == "active"


# --- transaction time -------------------------------------------------------------------------


async def test_status_changes_set_recorded_to(client: httpx.AsyncClient, key: str) -> None:
    subject = "tt-recorded-to"
    ids = await seed_a_history(client, key, subject)
    for name, fact_id in ids.items():
        if name != "event":
            assert (await get_fact(client, key, fact_id))["recorded_to"] is None
    await change_everything(client, key, subject, ids)
    for name, status in [
        ("city", "superseded"),
        ("tea", "retracted"),
        ("job", "superseded"),
        ("violin", "superseded"),
    ]:
        fact = await get_fact(client, key, ids[name])
        assert fact["status"] == status
        assert fact["recorded_to"] is not None, name
        assert fact["recorded_to"] >= fact["recorded_from"]
    for name in ("cello", "cat"):
        assert (await get_fact(client, key, ids[name]))["recorded_to"] is None


# --- as_of on POST /v1/context ----------------------------------------------------------------


@pytest.mark.parametrize("profile", ["unified", "facts_first"])
async def test_as_of_an_earlier_call_returns_what_that_call_served(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str, profile: str
) -> None:
    subject = f"tt-as-of-{profile}"
    ids = await seed_a_history(client, key, subject)
    then, then_trace = await context_and_trace(client, key, QUERY, subject, profile=profile)
    blocked_then = {d["item_id"] for d in then_trace["decisions"] if d["decision"] == "blocked"}
    assert blocked_then == {ids["cello"], ids["violin"]}  # the conflict open then
    assert {ids["city"], ids["tea"], ids["job"], ids["mood"]} <= {f["fact_id"] for f in then["facts"]}
    await shift_an_hour_back(conn)
    await change_everything(client, key, subject, ids)

    now = await context(client, key, QUERY, subject, profile=profile)
    assert served(now) != served(then)  # the memory did change
    assert not {ids["city"], ids["tea"], ids["job"], ids["violin"], ids["mood"]} & {
        f["fact_id"] for f in now["facts"]
    }

    at = (await inspect(client, key, then["trace_id"]))["created_at"]
    past, past_trace = await context_and_trace(client, key, QUERY, subject, profile=profile, as_of=at)
    assert served(past) == served(then)
    assert scores(past) == pytest.approx(scores(then))
    assert [f["fact_id"] for f in past["facts"]] == [f["fact_id"] for f in then["facts"]]
    assert past["warnings"] == then["warnings"]
    assert decisions_of(past_trace) == decisions_of(then_trace)
    assert decision_scores(past_trace) == pytest.approx(decision_scores(then_trace))
    assert past_trace["as_of"] is not None
    assert datetime.fromisoformat(past_trace["as_of"]) == datetime.fromisoformat(at)
    assert then_trace["as_of"] is None


async def test_as_of_sees_staleness_and_events_at_that_instant(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """The volatile fact was fresh at the first call; an hour later it is stale. An event written
    later is not held as of then."""
    subject = "tt-stale"
    ids = await seed_a_history(client, key, subject)
    then = await context(client, key, QUERY, subject)
    await shift_an_hour_back(conn)
    (late_event,) = await write_events(
        client,
        key,
        [("the user plays piano on sundays", iso(datetime.now(UTC) - timedelta(days=400)))],
        subject,
    )
    at = (await inspect(client, key, then["trace_id"]))["created_at"]
    _, now_trace = await context_and_trace(client, key, QUERY, subject)
    assert {(d["item_id"], d["reason_code"]) for d in now_trace["decisions"]} >= {
        (ids["mood"], "volatility_expired")
    }
    assert late_event in {d["item_id"] for d in now_trace["decisions"]}
    _, past_trace = await context_and_trace(client, key, QUERY, subject, as_of=at)
    past = {d["item_id"]: d for d in past_trace["decisions"]}
    assert past[ids["mood"]]["decision"] == "included"
    assert late_event not in past


async def test_a_future_dated_event_is_held_as_of_the_call_that_served_it(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """An event is held once recorded, whenever it occurs: a call serves next week's flight, so
    a replay of that call, as of its own instant, serves it too."""
    subject = "tt-future"
    await seed_a_history(client, key, subject)
    (flight,) = await write_events(
        client,
        key,
        [("Ivy's flight to Lima is scheduled", iso(datetime.now(UTC) + timedelta(days=2)))],
        subject,
    )
    origin, origin_trace = await context_and_trace(client, key, "When is Ivy's flight to Lima?", subject)
    assert flight in {e["event_id"] for e in origin["episodes"]}
    await shift_an_hour_back(conn)
    r = await replay(client, key, origin["trace_id"])
    assert r.status_code == 200, r.text
    assert r.json()["diff"] == {"added": [], "removed": [], "moved": []}
    replayed = await inspect(client, key, r.json()["packet"]["trace_id"])
    assert decisions_of(replayed) == decisions_of(origin_trace)


async def test_as_of_judges_validity_as_it_was_believed_then(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """A supersede rewrites the old fact's valid_to to where its successor starts, which may be
    before an earlier call: "moved on Monday", written on Wednesday. As of Tuesday the old fact
    was still believed, open-ended: it is served as it was (believed_valid_to)."""
    subject = "tt-believed"
    (paris,) = await fact_ids(client, key, [{"content": "the user lives in paris", "key": "city"}], subject)
    tuesday = await context(client, key, "where does the user live", subject)
    assert [f["fact_id"] for f in tuesday["facts"]] == [paris]
    await shift_an_hour_back(conn)
    at = (await inspect(client, key, tuesday["trace_id"]))["created_at"]
    monday = iso(datetime.fromisoformat(at) - timedelta(minutes=30))
    await write_facts(
        client,
        key,
        [{"content": "the user lives in berlin", "key": "city", "supersedes": paris, "valid_from": monday}],
        subject,
    )
    old = await get_fact(client, key, paris)
    assert datetime.fromisoformat(old["valid_to"]) < datetime.fromisoformat(at)  # rewritten
    past = await context(client, key, "where does the user live", subject, as_of=at)
    assert [f["fact_id"] for f in past["facts"]] == [paris]
    assert past["facts"][0]["valid_to"] is None  # as it was served then, not today's row


async def test_one_patch_that_retracts_and_ends_a_fact_is_the_two_in_turn(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """A PATCH of both `status: retracted` and `valid_to` changes the past as a PATCH of the
    valid_to and then one of the status: the correction is not versioned (docs/time-travel.md),
    so a view of an earlier instant sees it. The single PATCH kept the valid_to of before as the
    one believed: the fact was served as of then, open-ended."""
    subject = "tt-patch"
    both, in_turn = await fact_ids(
        client, key, ["the user lives in madrid", "the user works in madrid"], subject
    )
    call = await context(client, key, "madrid", subject)
    assert set(served(call)) == {both, in_turn}
    await shift_an_hour_back(conn)
    at = (await inspect(client, key, call["trace_id"]))["created_at"]
    ended = "1927-01-01T00:00:00Z"
    patches = [(both, {"status": "retracted", "valid_to": ended}), (in_turn, {"valid_to": ended}),
               (in_turn, {"status": "retracted"})]  # fmt: skip
    for fact_id, body in patches:
        r = await client.patch(f"/v1/facts/{fact_id}", json=body, headers=bearer(key))
        assert r.status_code == 200, r.text
    assert served(await context(client, key, "madrid", subject, as_of=at)) == []


async def test_as_of_in_the_future_is_a_validation_error(client: httpx.AsyncClient, key: str) -> None:
    future = iso(datetime.now(UTC) + timedelta(minutes=5))
    r = await post_context(client, key, "anything", "tt-future", as_of=future)
    body = assert_error(r, 422, "validation_error")
    assert body["details"]["field"] == "as_of"
    for malformed in ("yesterday", "2026-01-01T00:00:00"):  # not RFC 3339; no offset
        r = await post_context(client, key, "anything", "tt-future", as_of=malformed)
        assert_error(r, 400, "validation_error")
        assert r.json()["details"]["field"] == "as_of"


# --- replay -----------------------------------------------------------------------------------


async def test_replay_without_overrides_reproduces_the_call(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """By default a replay runs as of the call's own instant, so later writes change nothing.
    Here the scope is small: the vector side is an exact scan. Over a large scope it walks an
    approximate HNSW graph, and a replay with another embedder embeds the query anew: there the
    decisions may differ (docs/time-travel.md)."""
    subject = "tt-replay"
    ids = await seed_a_history(client, key, subject)
    origin, origin_trace = await context_and_trace(client, key, QUERY, subject, budget_tokens=40)
    await shift_an_hour_back(conn)
    await change_everything(client, key, subject, ids)

    r = await replay(client, key, origin["trace_id"])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["diff"] == {"added": [], "removed": [], "moved": []}
    assert body["origin_trace_id"] == origin["trace_id"]
    origin_at = (await inspect(client, key, origin["trace_id"]))["created_at"]  # an hour back now
    assert datetime.fromisoformat(body["as_of"]) == datetime.fromisoformat(origin_at)
    packet = body["packet"]
    assert packet["trace_id"] != origin["trace_id"]
    assert served(packet) == served(origin)
    assert scores(packet) == pytest.approx(scores(origin))
    assert packet["budget_tokens"] == 40
    replay_trace = await inspect(client, key, packet["trace_id"])
    assert replay_trace["replay_of"] == origin["trace_id"]
    assert decisions_of(replay_trace) == decisions_of(origin_trace)
    assert decision_scores(replay_trace) == pytest.approx(decision_scores(origin_trace))
    # An empty JSON object is no override either, nor a body of whitespace, nor JSON null (the
    # OpenAPI document declares the body `ReplayRequest` or null).
    r = await replay(client, key, origin["trace_id"], {})
    assert r.status_code == 200 and r.json()["diff"] == body["diff"]
    blank = {**bearer(key), "content-type": "application/json"}
    for content in (b" \n", b"null"):
        r = await client.post(f"/v1/inspect/{origin['trace_id']}/replay", content=content, headers=blank)
        assert r.status_code == 200 and r.json()["diff"] == body["diff"], r.text
    # A replay of the replay runs as of the same instant (the replay's as_of), and changes nothing.
    again = await replay(client, key, packet["trace_id"])
    assert again.status_code == 200, again.text
    assert again.json()["as_of"] == body["as_of"] and again.json()["diff"] == body["diff"]


async def test_replay_ranks_with_the_calls_text_search_config_and_weights(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str, settings: Settings, hash_embedder: Embedder
) -> None:
    """A call made under HAKI_TEXT_SEARCH_CONFIG=simple records it, and its weights; replayed on a
    deployment that now stems (`english`, the default), the replay still ranks with `simple`. In
    `simple` "runs" does not match "running"; in `english` both are "run", so a replay with the
    deployment's setting gave the fact a text rank the call never gave it (before migration 0019
    a call recorded neither)."""
    subject = "tt-config"
    await write_facts(client, key, ["Ana is running a marathon in May", "Bo paints birds"], subject)
    async with make_client(settings, conn, hash_embedder, text_search_config="simple") as simple:
        origin, origin_trace = await context_and_trace(simple, key, "who runs?", subject)
    assert origin_trace["text_search_config"] == "simple"
    assert origin_trace["weights"] == pytest.approx(list(PROFILE_WEIGHTS["unified"]))
    assert [d["text_rank"] for d in origin_trace["decisions"]] == [0.0, 0.0]
    # The same question asked of the stemming deployment ranks the fact by text: what a replay
    # under the deployment's setting would have done.
    _, stemmed = await context_and_trace(client, key, "who runs?", subject)
    assert stemmed["text_search_config"] == "english"
    assert max(d["text_rank"] for d in stemmed["decisions"]) > 0

    r = await replay(client, key, origin["trace_id"])
    assert r.status_code == 200, r.text
    replay_trace = await inspect(client, key, r.json()["packet"]["trace_id"])
    assert replay_trace["text_search_config"] == "simple"
    assert decisions_of(replay_trace) == decisions_of(origin_trace)
    assert [d["text_rank"] for d in replay_trace["decisions"]] == [0.0, 0.0]
    assert decision_scores(replay_trace) == pytest.approx(decision_scores(origin_trace))
    # Under another profile the replay ranks with that profile's weights, not the call's.
    r = await replay(client, key, origin["trace_id"], {"profile": "facts_first"})
    other = await inspect(client, key, r.json()["packet"]["trace_id"])
    assert other["weights"] == pytest.approx(list(PROFILE_WEIGHTS["facts_first"]))


async def test_replay_with_half_the_budget_drops_exactly_the_lower_ranked_items(
    client: httpx.AsyncClient, key: str
) -> None:
    subject = "tt-half"
    # Eight facts of the same length (the same tokens each), no entity to expand on.
    contents = [f"memory number {i} about tea and cakes" for i in range(8)]
    assert len({len(c) for c in contents}) == 1
    await write_facts(client, key, contents, subject)
    per_item = len(contents[0]) // 4
    origin, origin_trace = await context_and_trace(
        client, key, "tea and cakes", subject, budget_tokens=6 * per_item, include_episodes=False
    )
    assert len(origin["facts"]) == 6
    r = await replay(client, key, origin["trace_id"], {"budget_tokens": 3 * per_item})
    assert r.status_code == 200, r.text
    body = r.json()
    diff = body["diff"]
    assert diff["added"] == [] and diff["moved"] == []
    dropped = [c["item_id"] for c in diff["removed"]]
    assert dropped == [f["fact_id"] for f in origin["facts"][3:]]  # the lower-ranked three
    for change in diff["removed"]:
        assert change["before"]["decision"] == "included"
        assert (change["after"]["decision"], change["after"]["reason_code"]) == ("excluded", "over_budget")
        assert change["after"]["rank"] == change["before"]["rank"]
    assert [f["fact_id"] for f in body["packet"]["facts"]] == [f["fact_id"] for f in origin["facts"][:3]]
    assert body["packet"]["budget_tokens"] == 3 * per_item
    # The replay keeps the original's include_episodes (false) and profile.
    assert body["packet"]["profile"] == origin_trace["profile"]
    # And back: twice the budget adds the three again, as `added`.
    again = await replay(client, key, body["packet"]["trace_id"], {"budget_tokens": 6 * per_item})
    assert [c["item_id"] for c in again.json()["diff"]["added"]] == dropped


async def test_replay_overrides_profile_floor_and_as_of(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    subject = "tt-overrides"
    ids = await seed_a_history(client, key, subject)
    origin = await context(client, key, QUERY, subject)
    await shift_an_hour_back(conn)
    await change_everything(client, key, subject, ids)
    # as_of now: what the memory gives today, against what it gave then.
    r = await replay(
        client, key, origin["trace_id"], {"as_of": iso(datetime.now(UTC)), "profile": "facts_first"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["packet"]["profile"] == "facts_first"
    removed = {c["item_id"] for c in body["diff"]["removed"]}
    assert {ids["city"], ids["tea"], ids["job"]} <= removed
    for change in body["diff"]["removed"]:
        if change["item_id"] in (ids["city"], ids["tea"], ids["job"]):
            assert change["after"] is None  # no longer a candidate at all
    # A floor that no candidate passes excludes every one of them.
    r = await replay(client, key, origin["trace_id"], {"recall_max_distance": 1e-9})
    assert r.status_code == 200, r.text
    packet = r.json()["packet"]
    assert packet["facts"] == [] and packet["episodes"] == []
    assert packet["empty_reason"] == "no_relevant_memory"


@pytest.mark.parametrize(
    "body",
    [
        {"budget_tokens": 0},
        {"budget_tokens": "900"},
        {"profile": "fastest"},
        {"recall_max_distance": -0.1},
        {"as_of": "2999-01-01T00:00:00Z"},
        {"query": "another question"},
    ],
)
async def test_replay_refuses_bad_overrides(
    client: httpx.AsyncClient, key: str, body: dict[str, Any]
) -> None:
    await write_facts(client, key, ["the user drinks coffee"], "tt-bad")
    origin = await context(client, key, "coffee", "tt-bad")
    r = await replay(client, key, origin["trace_id"], body)
    assert r.status_code in (400, 422), r.text  # 422: well-formed, in the future
    assert r.json()["details"]["field"] == next(iter(body))


async def test_a_replay_answers_its_instant_in_utc(client: httpx.AsyncClient, key: str) -> None:
    """An `as_of` override in another offset comes back in UTC, as every instant the API answers
    and as the replay's trace holds it; it came back in the caller's offset."""
    await write_facts(client, key, ["the user drinks coffee"], "tt-utc")
    origin = await context(client, key, "coffee", "tt-utc")
    created = datetime.fromisoformat((await inspect(client, key, origin["trace_id"]))["created_at"])
    local = created.astimezone(timezone(timedelta(hours=-7))).isoformat()
    r = await replay(client, key, origin["trace_id"], {"as_of": local})
    assert r.status_code == 200, r.text
    assert r.json()["as_of"].endswith("Z")
    assert datetime.fromisoformat(r.json()["as_of"]) == created


# --- what each memory is worth ----------------------------------------------------------------


async def test_fact_stats_match_a_count_from_the_raw_traces(client: httpx.AsyncClient, key: str) -> None:
    subject = "tt-stats"
    contents = [f"note {i} about the garden and its roses" for i in range(6)]
    ids = await fact_ids(client, key, [*contents, "the user owns a red bicycle"], subject)
    live: list[str] = []
    for budget, query in [(50, "garden roses"), (20, "garden roses"), (10, "roses"), (30, "the garden")]:
        live.append(
            (await context(client, key, query, subject, budget_tokens=budget, include_episodes=False))[
                "trace_id"
            ]
        )
    # Neither an as-of call nor a replay counts.
    at = (await inspect(client, key, live[0]))["created_at"]
    await context(client, key, "garden roses", subject, as_of=at)
    assert (await replay(client, key, live[0], {"budget_tokens": 5})).status_code == 200

    served: Counter[str] = Counter()
    excluded: Counter[str] = Counter()
    over_budget: Counter[str] = Counter()
    last: dict[str, str] = {}
    for trace_id in live:
        trace = await inspect(client, key, trace_id)
        for d in trace["decisions"]:
            if d["item_type"] != "fact":
                continue
            if d["decision"] == "included":
                served[d["item_id"]] += 1
                last[d["item_id"]] = max(last.get(d["item_id"], ""), trace["created_at"])
            if d["reason_code"] in ("over_budget", "below_relevance_floor"):
                excluded[d["item_id"]] += 1
            if d["reason_code"] == "over_budget":
                over_budget[d["item_id"]] += 1
    assert sum(over_budget.values()) > 0 and sum(served.values()) > 0
    assert served[ids[-1]] == 0  # the bicycle: never served

    def worth(fact: dict[str, Any]) -> tuple[int, int, Any]:
        return fact["served_count"], fact["excluded_count"], fact["last_served_at"]

    for fact_id in ids:
        expected = (served[fact_id], excluded[fact_id], last.get(fact_id))
        fact = await get_fact(client, key, fact_id)
        assert worth(fact)[:2] == expected[:2], fact_id
        assert (fact["last_served_at"] is None) == (expected[2] is None)
        if expected[2] is not None:
            assert datetime.fromisoformat(fact["last_served_at"]) == datetime.fromisoformat(expected[2])
    r = await client.get(
        "/v1/facts", params={"project_id": PROJECT, "subject_id": subject}, headers=bearer(key)
    )
    assert r.status_code == 200, r.text
    assert {f["fact_id"]: worth(f)[:2] for f in r.json()["facts"]} == {
        i: (served[i], excluded[i]) for i in ids
    }
    # The overview counts the same calls.
    r = await client.get("/v1/stats/overview", params={"project_id": PROJECT}, headers=bearer(key))
    assert r.status_code == 200 and r.json()["context_calls"] == len(live), r.text

    async def stats_facts(order: str) -> list[dict[str, Any]]:
        r = await client.get(
            "/v1/stats/facts",
            params={"project_id": PROJECT, "subject_id": subject, "order": order},
            headers=bearer(key),
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["project_id"], body["subject_id"], body["order"]) == (PROJECT, subject, order)
        facts: list[dict[str, Any]] = body["facts"]
        for f in facts:
            assert (f["served_count"], f["excluded_count"], f["over_budget_count"]) == (
                served[f["fact_id"]],
                excluded[f["fact_id"]],
                over_budget[f["fact_id"]],
            )
        return facts

    most_served = await stats_facts("most_served")
    assert [f["fact_id"] for f in most_served] == sorted(ids, key=lambda i: (-served[i], i))
    never = await stats_facts("never_served")
    assert [f["fact_id"] for f in never] == sorted(
        (i for i in ids if served[i] == 0), key=lambda i: (-excluded[i], i)
    )
    assert ids[-1] in [f["fact_id"] for f in never]
    dropped = await stats_facts("most_dropped")
    assert [f["fact_id"] for f in dropped] == sorted(ids, key=lambda i: (-over_budget[i], i))
    r = await client.get(
        "/v1/stats/facts",
        params={"project_id": PROJECT, "order": "most_served", "limit": 2},
        headers=bearer(key),
    )
    assert len(r.json()["facts"]) == 2
    r = await client.get(
        "/v1/stats/facts", params={"project_id": PROJECT, "order": "best"}, headers=bearer(key)
    )
    assert r.status_code == 400, r.text


# --- isolation --------------------------------------------------------------------------------


async def test_another_projects_key_cannot_replay_or_read_the_stats(
    client: httpx.AsyncClient, key: str, other_key: str
) -> None:
    await write_facts(client, key, ["the user sails on weekends"], "tt-iso")
    origin = await context(client, key, "sailing", "tt-iso")
    inspected = await client.get(f"/v1/inspect/{origin['trace_id']}", headers=bearer(other_key))
    replayed = await replay(client, other_key, origin["trace_id"])
    assert replayed.status_code == inspected.status_code == 404
    assert replayed.json()["code"] == inspected.json()["code"]
    overview = await client.get(
        "/v1/stats/overview", params={"project_id": PROJECT}, headers=bearer(other_key)
    )
    facts = await client.get("/v1/stats/facts", params={"project_id": PROJECT}, headers=bearer(other_key))
    assert facts.status_code == overview.status_code == 403
    assert facts.json()["code"] == overview.json()["code"]
    # The owner still can, and the refused replay wrote no trace.
    assert (await replay(client, key, origin["trace_id"])).status_code == 200


# --- the /ui "replay with…" form --------------------------------------------------------------


async def test_ui_replay_form_shows_the_diff(client: httpx.AsyncClient, key: str, other_key: str) -> None:
    subject = "tt-ui"
    contents = [f"memory number {i} about tea and cakes" for i in range(4)]
    await write_facts(client, key, contents, subject)
    per_item = len(contents[0]) // 4
    origin = await context(
        client, key, "tea and cakes", subject, budget_tokens=4 * per_item, include_episodes=False
    )
    r = await client.post("/ui/login", data={"key": key})
    assert r.status_code == 303
    page = await client.get(f"/ui/traces/{origin['trace_id']}")
    assert f'action="/ui/traces/{origin["trace_id"]}/replay"' in page.text
    # The form carries the session's CSRF token (service/api/ui.py).
    csrf = {"csrf_token": re.findall(r'name="csrf_token" value="([^"]+)"', page.text)[0]}
    r = await client.post(
        f"/ui/traces/{origin['trace_id']}/replay",
        data={**csrf, "budget_tokens": str(2 * per_item), "profile": "", "recall_max_distance": ""},
    )
    assert r.status_code == 200, r.text
    assert r.text.count('class="change removed"') == 2
    assert r.text.count('data-after="over_budget"') == 2
    for dropped in origin["facts"][2:]:  # the lower-ranked two, shown with their text
        assert f'data-item-id="{dropped["fact_id"]}"' in r.text and dropped["content"] in r.text
    for bad in (
        {"budget_tokens": "zero"},
        {"budget_tokens": "0"},
        {"profile": "fast"},
        {"recall_max_distance": "3"},
    ):
        r = await client.post(f"/ui/traces/{origin['trace_id']}/replay", data={**csrf, **bad})
        assert r.status_code == 400, bad
    # Another project's key, logged in, cannot replay this trace.
    r = await client.post("/ui/login", data={"key": other_key})
    assert r.status_code == 303
    page = await client.get("/ui/traces")
    csrf = {"csrf_token": re.findall(r'name="csrf_token" value="([^"]+)"', page.text)[0]}
    r = await client.post(f"/ui/traces/{origin['trace_id']}/replay", data=csrf)
    assert r.status_code == 404
    assert contents[0] not in r.text
