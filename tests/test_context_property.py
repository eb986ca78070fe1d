"""Property test of the ContextPacket invariants over random scopes (hash embedder, real SQL).

Hypothesis drives an async test directly: pytest-asyncio runs each example's coroutine on the
session loop, the same loop as the `conn`/`client` fixtures. The fixtures are shared by the
examples of one run (one rolled-back transaction), so every example writes to a fresh subject
and only ever looks at that scope.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from service.api import auth
from service.constants import EPISODE_TOP_K
from service.context.call import PROFILE_WEIGHTS
from tests.helpers import (
    OTHER_PROJECT,
    PROJECT,
    assert_packet_matches_trace,
    bearer,
    by_item,
    context_and_trace,
    days_from_now,
    tokens_of,
    write_events,
    write_facts,
)

# Capitalised words give multi-hop something to expand on; repeated words give full-text hits.
WORDS = [
    "tea",
    "coffee",
    "works",
    "lives",
    "likes",
    "cat",
    "garden",
    "Paris",
    "Lyon",
    "Acme",
    "Globex",
    "Alice",
]
FATES = ["active", "active", "retracted", "superseded", "expired", "stale", "conflict", "volatile", "future"]
HIDDEN_FATES = {"retracted", "superseded", "expired"}
BLOCKED_FATES = {"conflict": "conflict_open", "stale": "volatility_expired"}

text_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(" ".join)
scope_st = st.fixed_dictionaries(
    {
        "facts": st.lists(st.tuples(text_st, st.sampled_from(FATES)), max_size=14),
        "events": st.lists(text_st, max_size=EPISODE_TOP_K + 3),
        "other_subject": st.lists(text_st, max_size=3),
        "other_project": st.lists(text_st, max_size=3),
        "query": st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
        "budget": st.integers(min_value=1, max_value=250),
        "include_episodes": st.booleans(),
    }
)


def _fact_body(i: int, text: str, fate: str) -> dict[str, Any]:
    body: dict[str, Any] = {"content": f"{text} n{i}"}
    if fate == "expired":
        body |= {"valid_from": "2020-01-01T00:00:00Z", "valid_to": "2021-01-01T00:00:00Z"}
    elif fate == "stale":
        body |= {"volatility": "volatile", "valid_from": "2020-01-01T00:00:00Z", "stale_after_seconds": 60}
    elif fate == "volatile":
        body |= {"volatility": "volatile", "stale_after_seconds": 86400}
    elif fate == "future":
        body |= {"valid_from": days_from_now(3)}
    elif fate == "conflict":
        body |= {"key": f"slot{i}"}
    return body


async def _build_scope(
    client: httpx.AsyncClient, key: str, other_key: str, scope: dict[str, Any], subject: str
) -> tuple[dict[str, str], set[str], set[str]]:
    """Writes the scope; returns {fact_id: expected blocked reason or 'servable'}, the ids that
    must never appear in the trace, and the scope's event ids."""
    facts = scope["facts"]
    fate_of: dict[str, str] = {}
    hidden: set[str] = set()
    if facts:
        ids = [
            r["fact_id"]
            for r in await write_facts(
                client, key, [_fact_body(i, t, f) for i, (t, f) in enumerate(facts)], subject
            )
        ]
        for i, (fid, (text, fate)) in enumerate(zip(ids, facts, strict=True)):
            if fate == "retracted":
                r = await client.patch(f"/v1/facts/{fid}", json={"status": "retracted"}, headers=bearer(key))
                assert r.status_code == 200, r.text
            elif fate == "superseded":
                (new,) = await write_facts(
                    client, key, [{"content": f"{text} n{i} replaced", "supersedes": fid}], subject
                )
                fate_of[new["fact_id"]] = "servable"
            elif fate == "conflict":
                (rival,) = await write_facts(
                    client, key, [{"content": f"{text} n{i} rival", "key": f"slot{i}"}], subject
                )
                assert rival["conflict_set_id"] is not None
                fate_of[rival["fact_id"]] = "conflict_open"
            if fate in HIDDEN_FATES:
                hidden.add(fid)
            else:
                fate_of[fid] = BLOCKED_FATES.get(fate, "servable")
    if scope["other_subject"]:
        hidden |= {
            r["fact_id"] for r in await write_facts(client, key, scope["other_subject"], subject + "-x")
        }
    if scope["other_project"]:
        hidden |= {
            r["fact_id"]
            for r in await write_facts(client, other_key, scope["other_project"], subject, OTHER_PROJECT)
        }
    events: set[str] = set()
    if scope["events"]:
        events = set(
            await write_events(client, key, [(t, "2024-01-01T00:00:00Z") for t in scope["events"]], subject)
        )
    return fate_of, hidden, events


@hsettings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scope=scope_st)
@pytest.mark.parametrize("profile", ["unified", "facts_first"])
async def test_packet_invariants_hold_for_random_scopes(
    client: httpx.AsyncClient, conn: asyncpg.Connection, scope: dict[str, Any], profile: str
) -> None:
    subject = f"prop-{uuid.uuid4()}"
    # Fresh keys per example: the per-key rate limit must not shape the property.
    _, key = await auth.create_key(conn, PROJECT)
    _, other_key = await auth.create_key(conn, OTHER_PROJECT)
    fate_of, hidden, events = await _build_scope(client, key, other_key, scope, subject)

    packet, trace = await context_and_trace(
        client,
        key,
        scope["query"],
        subject,
        budget_tokens=scope["budget"],
        include_episodes=scope["include_episodes"],
        profile=profile,
    )
    assert packet["profile"] == trace["profile"] == profile

    # The budget is a ceiling, and exactly the served items spend it.
    assert packet["budget_tokens"] == scope["budget"]
    assert packet["used_tokens"] <= packet["budget_tokens"]
    served = packet["facts"] + packet["episodes"]
    assert packet["used_tokens"] == sum(item["tokens"] for item in served)
    assert all(item["tokens"] == tokens_of(item["content"]) for item in served)
    # Every served item is traced `included`, and nothing else is.
    assert_packet_matches_trace(packet, trace)

    decided = by_item(trace)
    # The trace never names a hard-filtered fact, nor anything outside the scope.
    assert not hidden & set(decided)
    assert set(decided) <= set(fate_of) | events
    # Blocked facts are exactly the open-conflict and stale-volatile ones, with the warnings' counts.
    blocked = {i: d["reason_code"] for i, d in decided.items() if d["decision"] == "blocked"}
    assert blocked == {i: r for i, r in fate_of.items() if r != "servable"}
    n_conflict = sum(1 for r in blocked.values() if r == "conflict_open")
    n_stale = sum(1 for r in blocked.values() if r == "volatility_expired")
    expected_warnings = set()
    if n_conflict:
        expected_warnings.add(f"open_conflict: {n_conflict} fact(s) hidden pending conflict resolution")
    warnings = set(packet["warnings"])
    assert {w for w in warnings if not w.startswith("volatility_expired")} == expected_warnings
    assert sum(1 for w in warnings if w.startswith(f"volatility_expired: {n_stale} fact(s)")) == (
        1 if n_stale else 0
    )
    assert len(packet["warnings"]) == len(expected_warnings) + (1 if n_stale else 0)
    assert packet["status"] == ("degraded" if packet["warnings"] else "ok")
    assert packet["empty_reason"] is None  # the recall gate is off

    # Scores, ranks and pack order.
    for d in trace["decisions"]:
        if d["item_type"] == "fact" and d["decision"] != "blocked":
            w_similarity, w_text_rank, w_recency = PROFILE_WEIGHTS[profile]  # type: ignore[index]
            parts = w_similarity * d["similarity"] + w_text_rank * d["text_rank"] + w_recency * d["recency"]
            # A unified multi-hop expansion may rank at the score of the kept item that names its
            # entity; one left out keeps the reason it was left out for (over_budget, ...).
            lifted = profile == "unified" and d["item_type"] == "fact"
            assert math.isclose(d["score"], parts, abs_tol=1e-9) or (lifted and d["score"] > parts)
            # facts_first: ts_rank_cd normalised to rank/(rank+1); unified: a share of the idf.
            assert 0.0 <= d["text_rank"] < 1.0 or (profile == "unified" and d["text_rank"] == 1.0)
            assert 0.0 <= d["recency"] <= 1.0
    packed_scores = [f["score"] for f in packet["facts"] if f["reason_code"] == "packed"]
    assert packed_scores == sorted(packed_scores, reverse=True)
    # Every servable fact is decided: the scopes here are far below RETRIEVAL_TOP_K.
    assert {i for i, r in fate_of.items() if r == "servable"} <= set(decided)
    traced = [d["item_id"] for d in trace["decisions"] if d["item_type"] == "episode"]
    if not scope["include_episodes"]:
        assert not traced
    elif profile == "facts_first":
        # Facts first, expansion next, then the EPISODE_TOP_K closest events.
        reasons = [f["reason_code"] for f in packet["facts"]]
        assert reasons == sorted(reasons, key=lambda r: r == "multi_hop_expansion")
        assert set(traced) <= events and len(traced) == min(len(events), EPISODE_TOP_K)
    else:
        # One ranking: every event of these small scopes is a candidate, and no text is served twice.
        assert set(traced) == events
        texts = [" ".join(i["content"].split()).casefold() for i in served]
        assert len(texts) == len(set(texts))
        ranked = [
            d["score"]
            for d in trace["decisions"]
            if d["decision"] != "blocked" and d["reason_code"] != "multi_hop_expansion"
        ]
        assert ranked == sorted(ranked, reverse=True)
