"""One compact record per context call (migration 0026): the decisions of a call are arrays on its
context_calls row, read back exactly as they were written, beside the traces written before it
(one context_traces row per decision), which every reader still reads until they age out."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID

import asyncpg
import httpx
import msgspec
import pytest

from service.context.call import ContextCall
from service.db.sql import load_queries
from service.ids import uuid7
from service.memory import retention
from service.repository import context as repo
from service.settings import Settings
from service.structs import ContextPacket, ContextRequest, Decision
from tests.helpers import PROJECT, bearer, context, get_fact, inspect, iso, write_events, write_facts
from tests.helpers.app import SingleConnectionPool
from tests.helpers.sql import load_test_queries, parameter_order

FACTS = [f"the user keeps note {i} about the garden, its roses and the old oak tree" for i in range(24)]


async def seeded(client: httpx.AsyncClient, key: str, subject: str) -> list[str]:
    facts = await write_facts(client, key, FACTS, subject)
    await write_events(
        client, key, [("we talked about the roses in the garden", iso(datetime.now(UTC)))], subject
    )
    return [f["fact_id"] for f in facts]


async def form(conn: asyncpg.Connection, trace_id: str | UUID) -> dict[str, Any]:
    row = await load_test_queries().test_trace_form(conn, project_id=PROJECT, trace_id=UUID(str(trace_id)))
    assert row is not None
    return dict(row)


@pytest.mark.parametrize("profile", ["unified", "facts_first"])
async def test_a_call_is_one_row_whose_arrays_hold_every_decision(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str, profile: str
) -> None:
    await seeded(client, key, "garden")
    packet = await context(client, key, "roses in the garden", "garden", budget_tokens=60, profile=profile)
    trace = await inspect(client, key, packet["trace_id"])
    decisions = trace["decisions"]
    stored = await form(conn, packet["trace_id"])
    assert stored["rows"] == 0 and stored["compact"] == len(decisions) > 0
    facts = [d for d in decisions if d["item_type"] == "fact"]
    assert stored["served"] == sum(d["decision"] == "included" for d in facts) > 0
    assert stored["over_budget"] == sum(d["reason_code"] == "over_budget" for d in facts) > 0
    assert stored["below_floor"] == sum(d["reason_code"] == "below_relevance_floor" for d in facts)
    # Similarity is always 1 - cosine distance: none is stored.
    assert stored["no_similarity_stored"]
    # The trace answers what the packet served, to the last bit.
    served = {f["fact_id"]: f["score"] for f in packet["facts"]}
    for d in facts:
        if d["item_id"] in served:
            assert d["score"] == served[d["item_id"]]


def _call(subject: str, weights: tuple[float, float, float] = (0.7, 0.2, 0.1)) -> ContextCall:
    req = ContextRequest(project_id=PROJECT, subject_id=subject, query="anything", profile="unified")
    return msgspec.structs.replace(ContextCall.of(req, Settings()), weights=weights)


def _packet() -> ContextPacket:
    return ContextPacket(
        trace_id=uuid7(),
        profile="unified",
        status="ok",
        warnings=[],
        empty_reason=None,
        budget_tokens=500,
        used_tokens=10,
        facts=[],
        episodes=[],
    )


def _d(item_id: UUID, decision: str, reason: str, rank: int | None, **values: Any) -> Decision:
    parts = dict(score=None, similarity=None, text_rank=None, recency=None, cosine_distance=None, tokens=7)
    return Decision(
        item_type=values.pop("item_type", "fact"),
        item_id=item_id,
        decision=decision,  # type: ignore[arg-type]
        reason_code=reason,
        rank=rank,
        **{**parts, **values},
    )


async def test_every_value_comes_back_exactly_derived_or_not(conn: asyncpg.Connection) -> None:
    w = (0.7, 0.2, 0.1)
    ids = [uuid7() for _ in range(9)]
    cd, tr, rec = 0.1 + 0.2, 1 / 3, math.exp(-0.5)
    hybrid = w[0] * (1 - cd) + w[1] * tr + w[2] * rec
    stand_in = {"score": 0.75, "similarity": 0.5, "text_rank": 0.0, "recency": 0.5, "cosine_distance": 0.5}
    written = [
        # Derivable: score and similarity are not stored.
        _d(
            ids[0],
            "included",
            "packed",
            1,
            score=hybrid,
            similarity=1 - cd,
            text_rank=tr,
            recency=rec,
            cosine_distance=cd,
            tokens=2000,
        ),
        # A lifted expansion: a score of its own.
        _d(
            ids[1],
            "included",
            "multi_hop_expansion",
            2,
            score=0.987654321,
            similarity=1 - cd,
            text_rank=0.0,
            recency=rec,
            cosine_distance=cd,
        ),
        # A `facts_first` episode: score = similarity, no text rank nor recency.
        _d(
            ids[2],
            "excluded",
            "over_budget",
            300,
            item_type="episode",
            score=1 - 0.25,
            similarity=1 - 0.25,
            cosine_distance=0.25,
        ),
        # No query vector: no distance, no similarity.
        _d(
            ids[3],
            "excluded",
            "below_relevance_floor",
            4,
            score=w[1] * 0.5 + w[2] * 1e-300,
            text_rank=0.5,
            recency=1e-300,
        ),
        _d(
            ids[4],
            "excluded",
            "already_served",
            5,
            score=5e-324,
            similarity=0.5,
            text_rank=0.0,
            recency=1.0,
            cosine_distance=0.25,
        ),
        _d(ids[5], "blocked", "conflict_open", None),
        _d(ids[6], "blocked", "volatility_expired", None, tokens=1),
        # A stand-in: the episode it replaced, then the fact at the same rank and its score.
        _d(
            ids[7],
            "excluded",
            "replaced_by_stand_in",
            6,
            item_type="episode",
            **{**stand_in, "text_rank": 1.0},
        ),
        _d(ids[8], "included", "stand_in", 6, **{**stand_in, "similarity": 0.25, "cosine_distance": 0.75}),
    ]
    call, packet = _call("exact", w), _packet()
    await repo.insert_context_trace(conn, call, packet, written)
    found = await repo.get_inspection(conn, PROJECT, packet.trace_id)
    assert found is not None and found.decisions == written
    stored = await form(conn, packet.trace_id)
    assert (stored["served"], stored["over_budget"], stored["below_floor"]) == (3, 0, 1)
    assert not stored["no_score_stored"] and not stored["no_similarity_stored"]


async def test_an_unknown_decision_is_refused_and_nothing_is_written(conn: asyncpg.Connection) -> None:
    call, packet = _call("refused"), _packet()
    bad = [_d(uuid7(), "excluded", "no_such_reason", 1, score=0.5, cosine_distance=0.5)]
    with pytest.raises(asyncpg.CheckViolationError):
        async with conn.transaction():  # a savepoint: the test's transaction survives the error
            await repo.insert_context_trace(conn, call, packet, bad)
    assert await repo.get_inspection(conn, PROJECT, packet.trace_id) is None


async def _old_form_copy(conn: asyncpg.Connection, trace: dict[str, Any], subject: str) -> str:
    """The same decisions written as a call traced before migration 0026."""
    trace_id = uuid7()
    await load_test_queries().test_insert_row_trace(
        conn,
        project_id=PROJECT,
        trace_id=trace_id,
        subject_id=subject,
        query=trace["query"],
        profile=trace["profile"],
        weights=trace["weights"],
        decisions=msgspec.json.encode(trace["decisions"]).decode(),
    )
    return str(trace_id)


async def test_traces_of_before_are_read_erased_counted_and_purged_beside_the_new_form(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str, settings: Settings
) -> None:
    subject = "both-forms"
    await seeded(client, key, subject)
    packet = await context(client, key, "roses in the garden", subject, budget_tokens=60)
    new = await inspect(client, key, packet["trace_id"])
    old_id = await _old_form_copy(conn, new, subject)
    assert (await form(conn, old_id))["rows"] == len(new["decisions"])

    # GET /v1/inspect and the /ui trace page read the old form through the new path.
    old = await inspect(client, key, old_id)
    assert old["decisions"] == new["decisions"]

    # What a fact is worth counts both forms: every served fact twice, every dropped one twice.
    served = [
        d["item_id"] for d in new["decisions"] if d["item_type"] == "fact" and d["decision"] == "included"
    ]
    dropped = [
        d["item_id"]
        for d in new["decisions"]
        if d["reason_code"] == "over_budget" and d["item_type"] == "fact"
    ]
    assert served and dropped
    for fid in served:
        fact = await get_fact(client, key, fid)
        assert fact["served_count"] == 2 and fact["excluded_count"] == 0
    fact = await get_fact(client, key, dropped[0])
    assert fact["served_count"] == 0 and fact["excluded_count"] == 2

    # Erasing a served fact takes its decision out of both forms, the rest keeps its order.
    erased = served[0]
    r = await client.delete(f"/v1/facts/{erased}", headers=bearer(key))
    assert r.status_code == 200 and r.json()["decisions"] == 2, r.text
    rest = [d for d in new["decisions"] if d["item_id"] != erased]
    assert (await inspect(client, key, packet["trace_id"]))["decisions"] == rest
    assert (await inspect(client, key, old_id))["decisions"] == rest
    stored = await form(conn, packet["trace_id"])
    assert stored["compact"] == len(rest) and stored["served"] == len(served) - 1
    for fid in served[1:]:
        assert (await get_fact(client, key, fid))["served_count"] == 2

    # The retention purge takes both forms and counts their decisions.
    await load_test_queries().test_backdate_all_context_calls(conn, project_id=PROJECT, days=40)
    purge = msgspec.structs.replace(settings, trace_retention_days=30)
    purged = await retention.purge_once(SingleConnectionPool(conn), purge, pause_ratio=0)
    assert purged.context_calls == 2 and purged.decisions == 2 * len(rest)
    for tid in (packet["trace_id"], old_id):
        assert (await client.get(f"/v1/inspect/{tid}", headers=bearer(key))).status_code == 404


async def test_subject_erasure_counts_the_decisions_of_both_forms(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    subject = "erased-both"
    await seeded(client, key, subject)
    packet = await context(client, key, "the old oak tree", subject, budget_tokens=40)
    new = await inspect(client, key, packet["trace_id"])
    await _old_form_copy(conn, new, subject)
    r = await client.delete(f"/v1/subjects/{subject}", params={"project_id": PROJECT}, headers=bearer(key))
    assert r.status_code == 200, r.text
    assert r.json()["context_calls"] == 2 and r.json()["decisions"] == 2 * len(new["decisions"])


async def test_what_a_fact_is_worth_reads_the_usage_indexes(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    """GET /v1/stats/facts reads each fact's counted calls through the GIN indexes on the slices
    of decision_ids, never the arrays of every call (the plan of its statement)."""
    subject = "worth"
    ids = await seeded(client, key, subject)
    for budget in (30, 60, 90):
        await context(client, key, "roses in the garden", subject, budget_tokens=budget)
    stats = await repo.stats_facts(conn, PROJECT, subject, "most_served", 50)
    assert sum(f.served_count for f in stats.facts) > 0 and len(stats.facts) == len(ids)
    # A project with a history: many calls, about other facts.
    others = [uuid7() for _ in range(3000)]
    for i in range(300):
        ds = [
            _d(
                others[(i * 37 + j * 11) % 3000],
                "excluded",
                "over_budget",
                j + 1,
                score=0.5,
                cosine_distance=0.5,
                text_rank=0.0,
                recency=0.5,
            )
            for j in range(32)
        ]
        await repo.insert_context_trace(conn, _call("history"), _packet(), ds)
    await load_test_queries().test_analyze_context_calls(conn)
    q = load_queries()
    params = {"project_id": PROJECT, "subject_id": subject, "order_by": "most_served", "page_size": 50}
    async with conn.transaction():
        raw = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + cast(Any, q).stats_facts.sql,
            *[params[p] for p in parameter_order(q, "stats_facts")],
        )
    plan = json.dumps(raw if isinstance(raw, list) else json.loads(raw))
    assert all(f'"Index Name": "{name}"' in plan for name in INDEXES), plan


INDEXES = ("context_calls_served_facts", "context_calls_over_budget_facts", "context_calls_below_floor_facts")


async def test_the_trace_commits_durably_with_the_call(conn: asyncpg.Connection) -> None:
    """The call's terms leave synchronous_commit on: its commit waits for the WAL flush, so a
    returned packet's trace survives a crash (docs/spec/context-profiles.md)."""
    from service.context import assembler

    async with conn.transaction():
        await assembler.open_context_call(conn)
        row = await load_test_queries().test_call_settings(conn)
        assert row is not None and row["synchronous_commit"] == "on"


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["unified", "facts_first"])
async def test_a_call_of_more_decisions_than_a_smallint_counts(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str, profile: str
) -> None:
    """Every blocked fact is traced: a scope of 33,000 stale facts made every call a 500 (its
    positions overflowed smallint[]). Such a call keeps them in decision_positions_wide (migration
    0043); inspect reads them in the assembler's order, and erasing one of its facts prunes them."""
    subject = f"stale-{profile}"
    stale = repo.SMALLINT_MAX + 233
    t = load_test_queries()
    await t.test_prepare_bulk_load(conn)
    await t.test_drop_fact_vector_index(conn)  # back with the test's rollback
    await t.test_seed_stale_facts(conn, project_id=PROJECT, subject_id=subject, n=stale)
    (kept,) = await write_facts(client, key, ["the one fresh fact"], subject)
    packet = await context(client, key, "the one fresh fact", subject, profile=profile)
    assert [f["fact_id"] for f in packet["facts"]] == [kept["fact_id"]]
    assert packet["warnings"] == [
        f"volatility_expired: {stale} fact(s) hidden because their volatile information is stale"
    ]
    decisions = (await inspect(client, key, packet["trace_id"]))["decisions"]
    assert len(decisions) == stale + 1 and decisions[0]["item_id"] == kept["fact_id"]
    assert {d["reason_code"] for d in decisions[1:]} == {"volatility_expired"}
    gone = decisions[-1]["item_id"]
    assert (await client.delete(f"/v1/facts/{gone}", headers=bearer(key))).status_code == 200
    after = (await inspect(client, key, packet["trace_id"]))["decisions"]
    assert after == decisions[:-1]
