"""The Context Assembler, rule by rule (docs/spec/context-assembler.md, docs/spec/api.md "Read side").

Every test goes through HTTP on the real PostgreSQL. Retrieval behaviour runs on the real
all-MiniLM-L6-v2 model (`model_client`); where only the SQL mechanics matter the hash embedder
is enough. Where a test depends on how the model places texts, it first checks that
precondition with the same embedder, so a failure names the data, not the assembler.
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec
import pytest

from service.constants import (
    CANDIDATE_LIMIT,
    EPISODE_TOP_K,
    FACTS_FIRST_QUERY_MAX_WORDS,
    MULTI_HOP_MAX_ENTITIES,
    MULTI_HOP_MAX_PER_ENTITY,
    RETRIEVAL_TOP_K,
    WEIGHT_RECENCY,
    WEIGHT_TEXT_RANK,
)
from service.context.entities import extract_entities
from service.embedding.embedder import Embedder, EmbedderError, Vector
from service.repository import conflicts as conflicts_repo
from service.repository import context as context_repo
from service.settings import Settings
from tests.helpers import (
    ONE_HIT_TEXT_RANK,
    OTHER_PROJECT,
    PROJECT,
    assert_error,
    assert_packet_matches_trace,
    bearer,
    by_item,
    candidate_decisions,
    context,
    context_and_trace,
    cosine_distances,
    days_from_now,
    expected_score,
    fact_ids,
    inspect,
    post_context,
    stats,
    tokens_of,
    write_events,
    write_facts,
)
from tests.helpers.app import make_client

# This module is the reference of the `facts_first` profile (docs/spec/context-profiles.md): every
# rule of docs/spec/context-assembler.md exactly. Its clients serve that profile by default; the
# `unified` profile's rules are tested in test_context_unified.py.
FACTS_FIRST = "facts_first"


@pytest.fixture(scope="session")
def settings(settings: Settings) -> Settings:
    return msgspec.structs.replace(settings, context_profile=FACTS_FIRST)


# --- rule 1: hard filters ---------------------------------------------------------------------


async def test_hard_filters_never_serve_nor_trace_filtered_facts(
    client: httpx.AsyncClient, key: str, other_key: str
) -> None:
    subject = "hard-filters"
    kept, retracted, old, expired, expired_by_patch = await fact_ids(
        client,
        key,
        [
            "tea: the user drinks green tea",
            "tea: the user drank black tea",
            "tea: the user likes mint tea",
            {
                "content": "tea: the user drank oolong tea",
                "valid_from": "2020-01-01T00:00:00Z",
                "valid_to": "2021-01-01T00:00:00Z",
            },
            "tea: the user drank rooibos tea",
        ],
        subject,
    )
    (new,) = await fact_ids(
        client, key, [{"content": "tea: the user likes jasmine tea", "supersedes": old}], subject
    )
    r = await client.patch(f"/v1/facts/{retracted}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text
    r = await client.patch(
        f"/v1/facts/{expired_by_patch}", json={"valid_to": days_from_now(-1 / 24)}, headers=bearer(key)
    )
    assert r.status_code == 200, r.text
    other_subject = await fact_ids(client, key, ["tea: another subject drinks tea"], "hard-filters-2")
    other_project = await fact_ids(
        client, other_key, ["tea: project b drinks tea"], subject, project_id=OTHER_PROJECT
    )
    hidden = {retracted, old, expired, expired_by_patch, *other_subject, *other_project}

    packet, trace = await context_and_trace(client, key, "tea", subject)

    assert {f["fact_id"] for f in packet["facts"]} == {kept, new}
    assert all(f["reason_code"] == "packed" for f in packet["facts"])
    assert set(by_item(trace)) == {kept, new}
    assert not hidden & {d["item_id"] for d in trace["decisions"]}
    assert packet["status"] == "ok" and packet["warnings"] == []
    assert_packet_matches_trace(packet, trace)


@pytest.mark.model
async def test_open_conflict_blocks_members_with_exact_warning(
    model_client: httpx.AsyncClient, key: str
) -> None:
    client, subject = model_client, "conflict"
    (cat,) = await fact_ids(client, key, ["Alice has a cat named Tom."], subject)
    acme_res, globex_res = await write_facts(
        client,
        key,
        [
            {"content": "Alice works at Acme.", "key": "employer"},
            {"content": "Alice works at Globex.", "key": "employer"},
        ],
        subject,
    )
    acme, globex = acme_res["fact_id"], globex_res["fact_id"]
    conflict_set_id = globex_res["conflict_set_id"] or acme_res["conflict_set_id"]
    assert conflict_set_id is not None

    packet, trace = await context_and_trace(client, key, "Where does Alice work?", subject)

    assert [f["fact_id"] for f in packet["facts"]] == [cat]
    assert packet["warnings"] == ["open_conflict: 2 fact(s) hidden pending conflict resolution"]
    assert packet["status"] == "degraded"
    decided = by_item(trace)
    for fid in (acme, globex):
        d = decided[fid]
        assert (d["decision"], d["reason_code"]) == ("blocked", "conflict_open")
        assert d["rank"] is None and d["score"] is None
    assert trace["status"] == "degraded"
    assert trace["warnings"] == packet["warnings"]
    assert_packet_matches_trace(packet, trace)

    r = await client.post(
        f"/v1/conflicts/{conflict_set_id}/resolve", json={"keep": [acme]}, headers=bearer(key)
    )
    assert r.status_code == 200, r.text

    packet, trace = await context_and_trace(client, key, "Where does Alice work?", subject)
    assert packet["facts"][0]["fact_id"] == acme
    assert {f["fact_id"] for f in packet["facts"]} == {acme, cat}
    assert globex not in by_item(trace)
    assert packet["warnings"] == [] and packet["status"] == "ok"
    assert not [d for d in trace["decisions"] if d["decision"] == "blocked"]


@pytest.mark.model
async def test_stale_volatile_fact_is_blocked_volatility_expired(
    model_client: httpx.AsyncClient, key: str
) -> None:
    client, subject = model_client, "volatile"
    stale, fresh, stable = await fact_ids(
        client,
        key,
        [
            {
                "content": "Alice is currently in Paris.",
                "volatility": "volatile",
                "valid_from": "2020-01-01T00:00:00Z",
                "stale_after_seconds": 60,
            },
            {
                "content": "Alice is currently in Rome.",
                "volatility": "volatile",
                "stale_after_seconds": 86400,
            },
            "Alice likes jazz.",
        ],
        subject,
    )

    packet, trace = await context_and_trace(client, key, "Where is Alice right now?", subject)

    assert {f["fact_id"] for f in packet["facts"]} == {fresh, stable}
    assert len(packet["warnings"]) == 1
    assert packet["warnings"][0].startswith("volatility_expired: 1 fact(s)")
    assert packet["status"] == "degraded"
    d = by_item(trace)[stale]
    assert (d["decision"], d["reason_code"], d["rank"], d["score"]) == (
        "blocked",
        "volatility_expired",
        None,
        None,
    )
    assert_packet_matches_trace(packet, trace)


async def test_conflict_and_volatility_warnings_are_both_reported(
    client: httpx.AsyncClient, key: str
) -> None:
    subject = "both-warnings"
    await write_facts(
        client,
        key,
        [
            {"content": "Bob lives in Oslo.", "key": "city"},
            {"content": "Bob lives in Bergen.", "key": "city"},
            {
                "content": "Bob is at the gym.",
                "volatility": "volatile",
                "valid_from": "2020-01-01T00:00:00Z",
                "stale_after_seconds": 60,
            },
            {
                "content": "Bob is at home.",
                "volatility": "volatile",
                "valid_from": "2020-01-02T00:00:00Z",
                "stale_after_seconds": 60,
            },
        ],
        subject,
    )
    packet, trace = await context_and_trace(client, key, "Bob", subject)
    assert packet["facts"] == []
    assert packet["status"] == "degraded"
    assert len(packet["warnings"]) == 2
    assert "open_conflict: 2 fact(s) hidden pending conflict resolution" in packet["warnings"]
    assert [w for w in packet["warnings"] if w.startswith("volatility_expired: 2 fact(s)")]
    reasons = sorted(d["reason_code"] for d in trace["decisions"])
    assert reasons == ["conflict_open"] * 2 + ["volatility_expired"] * 2
    # An empty packet caused by blocked facts is not the recall gate's empty packet.
    assert packet["empty_reason"] is None


async def test_no_warning_means_status_ok(client: httpx.AsyncClient, key: str) -> None:
    await write_facts(client, key, ["Carol plays chess."], "ok-status")
    packet, trace = await context_and_trace(client, key, "chess", "ok-status")
    assert len(packet["facts"]) == 1
    assert packet["warnings"] == [] and packet["status"] == "ok"
    assert trace["warnings"] == [] and trace["status"] == "ok"


# --- rule 2: the hybrid score -----------------------------------------------------------------


@pytest.mark.model
async def test_hybrid_score_is_the_weighted_sum_of_its_parts(
    model_client: httpx.AsyncClient, local_embedder: Embedder, key: str
) -> None:
    client, subject = model_client, "score"
    contents = {
        "cello_15d": ("Alice plays the cello in an orchestra.", days_from_now(-15)),
        "cello_now": ("Alice bought a new cello bow.", None),
        "oslo_60d": ("The weather in Oslo was rainy.", days_from_now(-60)),
    }
    ids = {}
    for name, (content, valid_from) in contents.items():
        body: dict[str, Any] = {"content": content}
        if valid_from is not None:
            body["valid_from"] = valid_from
        (ids[name],) = await fact_ids(client, key, [body], subject)

    query = "cello"
    packet, trace = await context_and_trace(client, key, query, subject)
    decided = by_item(trace)
    assert set(decided) == set(ids.values())
    served = {f["fact_id"]: f for f in packet["facts"]}
    assert set(served) == set(ids.values())

    texts = [c for c, _ in contents.values()]
    model_distance = dict(
        zip(ids.values(), await cosine_distances(local_embedder, query, texts), strict=True)
    )
    for fid, d in decided.items():
        assert d["decision"] == "included"
        assert d["score"] == pytest.approx(expected_score(d), abs=1e-9)
        assert served[fid]["score"] == pytest.approx(d["score"], abs=1e-12)
        assert d["similarity"] == pytest.approx(1.0 - d["cosine_distance"], abs=1e-9)
        assert d["cosine_distance"] == pytest.approx(model_distance[fid], abs=1e-4)
        assert 0.0 <= d["text_rank"] < 1.0

    assert decided[ids["cello_15d"]]["recency"] == pytest.approx(math.exp(-0.5), abs=1e-3)
    assert decided[ids["oslo_60d"]]["recency"] == pytest.approx(math.exp(-2.0), abs=1e-3)
    # No valid_from: recency counts from recorded_from, set by the server to the current time.
    assert decided[ids["cello_now"]]["recency"] == pytest.approx(1.0, abs=1e-6)
    # Normalised ts_rank_cd: a one-word hit is 0.1 / (1 + 0.1); no hit is 0.
    assert decided[ids["cello_15d"]]["text_rank"] == pytest.approx(ONE_HIT_TEXT_RANK, abs=1e-6)
    assert decided[ids["cello_now"]]["text_rank"] == pytest.approx(ONE_HIT_TEXT_RANK, abs=1e-6)
    assert decided[ids["oslo_60d"]]["text_rank"] == 0.0
    # Pack order is score order.
    assert [f["score"] for f in packet["facts"]] == sorted(
        (f["score"] for f in packet["facts"]), reverse=True
    )


async def test_recency_is_clamped_at_one_for_future_valid_from(client: httpx.AsyncClient, key: str) -> None:
    subject = "future"
    future, past = await fact_ids(
        client,
        key,
        [
            {"content": "Dave will move to Madrid.", "valid_from": days_from_now(10)},
            {"content": "Dave lived in Porto.", "valid_from": days_from_now(-30)},
        ],
        subject,
    )
    _, trace = await context_and_trace(client, key, "Dave", subject)
    decided = by_item(trace)
    assert decided[future]["recency"] == 1.0
    assert decided[past]["recency"] == pytest.approx(math.exp(-1.0), abs=1e-3)
    for d in decided.values():
        assert d["score"] == pytest.approx(expected_score(d), abs=1e-9)


@pytest.mark.model
async def test_full_text_hit_outranks_unrelated_fact(model_client: httpx.AsyncClient, key: str) -> None:
    client, subject = model_client, "fulltext"
    hit, unrelated = await fact_ids(
        client, key, ["The spare key code is zq7vtx.", "The cat sleeps on the sofa."], subject
    )
    packet, trace = await context_and_trace(client, key, "zq7vtx", subject)
    assert [f["fact_id"] for f in packet["facts"]] == [hit, unrelated]
    decided = by_item(trace)
    assert decided[hit]["rank"] == 1 and decided[unrelated]["rank"] == 2
    assert decided[hit]["text_rank"] > 0.0 and decided[unrelated]["text_rank"] == 0.0
    assert decided[hit]["score"] > decided[unrelated]["score"]


# --- rule 3: two-phase retrieval ----------------------------------------------------------------


def _gibberish(n: int, avoid: str) -> list[str]:
    """n distinct 6-letter strings over the letters of `avoid`: close to it for the model, no
    full-text match."""
    rnd = random.Random(7)
    out: dict[str, None] = {}
    while len(out) < n:
        word = "".join(rnd.choice(sorted(set(avoid))) for _ in range(len(avoid)))
        if word != avoid:
            out[word] = None
    return list(out)


@pytest.mark.model
async def test_two_phase_text_only_and_vector_only_facts_are_both_candidates(
    model_client: httpx.AsyncClient, local_embedder: Embedder, key: str
) -> None:
    client, subject, token = model_client, "two-phase", "zq7vtx"
    distractors = _gibberish(120, token)
    text_only = (
        "we walked along the beach at sunset and ate ice cream with the kids while the dog "
        f"{token} chased seagulls."
    )
    # Precondition on the model: more than RETRIEVAL_TOP_K facts are closer to the query than the
    # full-text hit, so the vector phase alone can never return it.
    distances = await cosine_distances(local_embedder, token, [*distractors, text_only])
    closer = sum(1 for d in distances[:-1] if d < distances[-1])
    assert closer >= RETRIEVAL_TOP_K + 20, (closer, distances[-1])

    distractor_ids = await fact_ids(client, key, distractors, subject)
    (text_id,) = await fact_ids(client, key, [text_only], subject)

    packet, trace = await context_and_trace(client, key, token, subject)
    candidates = candidate_decisions(trace)
    by_id = {d["item_id"]: d for d in candidates}
    # Phase 1: exactly RETRIEVAL_TOP_K rows by vector, plus the one full-text hit.
    assert len(candidates) == RETRIEVAL_TOP_K + 1
    assert text_id in by_id
    assert by_id[text_id]["text_rank"] > 0.0
    vector_only = [d for d in candidates if d["item_id"] != text_id]
    assert len(vector_only) == RETRIEVAL_TOP_K
    assert all(d["item_id"] in set(distractor_ids) and d["text_rank"] == 0.0 for d in vector_only)
    # The vector side is (HNSW-approximately) the closest facts of the scope.
    true_top = {fid for _, fid in sorted(zip(distances[:-1], distractor_ids, strict=True))[:RETRIEVAL_TOP_K]}
    assert len(true_top & {d["item_id"] for d in vector_only}) >= RETRIEVAL_TOP_K - 4
    # Phase 2 ranks the union by score.
    scores = [d["score"] for d in candidates]
    assert scores == sorted(scores, reverse=True)
    assert [d["rank"] for d in candidates] == list(range(1, len(candidates) + 1))
    assert text_id in {f["fact_id"] for f in packet["facts"]}


# --- rule 4: the token budget -------------------------------------------------------------------


async def test_budget_defaults_to_900(client: httpx.AsyncClient, key: str) -> None:
    await write_facts(client, key, ["Erin collects stamps."], "budget-default")
    packet, trace = await context_and_trace(client, key, "stamps", "budget-default")
    assert packet["budget_tokens"] == 900
    assert trace["budget_tokens"] == 900


@pytest.mark.parametrize(
    "budget",
    [
        0,
        -1,
        1.5,
        "10",
        True,
        None,
        "ten",
        [10],
    ],
    ids=repr,
)
async def test_budget_must_be_a_positive_integer(client: httpx.AsyncClient, key: str, budget: Any) -> None:
    await write_facts(client, key, ["Erin collects stamps."], "budget-bad")
    r = await post_context(client, key, "stamps", "budget-bad", budget_tokens=budget)
    body = assert_error(r, 400, "budget_exceeded")
    assert body.get("details", {}).get("field") == "budget_tokens"
    # A refused call is not logged.
    s = await stats(client, key)
    assert s.status_code == 200 and s.json()["context_calls"] == 0


async def test_tokens_are_len_over_4_at_least_1(client: httpx.AsyncClient, key: str) -> None:
    subject = "tokens"
    contents = ["x", "seven c", "eight ch", "é" * 8 + " accents", "q" * 43, "w" * 400]
    ids = await fact_ids(client, key, contents, subject)
    packet, trace = await context_and_trace(client, key, "tokens", subject, budget_tokens=10_000)
    served = {f["fact_id"]: f["tokens"] for f in packet["facts"]}
    decided = by_item(trace)
    expected = {"x": 1, "seven c": 1, "eight ch": 2, "é" * 8 + " accents": 4, "q" * 43: 10, "w" * 400: 100}
    for fid, content in zip(ids, contents, strict=True):
        assert served[fid] == expected[content] == tokens_of(content)
        assert decided[fid]["tokens"] == expected[content]
    assert packet["used_tokens"] == sum(expected.values())


@pytest.mark.model
async def test_facts_packed_by_decreasing_score_and_over_budget_excluded(
    model_client: httpx.AsyncClient, key: str
) -> None:
    client, subject = model_client, "packing"
    contents = [
        "Frank runs marathons.",
        "Frank ran the Berlin marathon in under three hours last autumn, his personal best so far.",
        "Frank trains for marathons six days a week.",
        "Frank's marathon shoes are blue.",
        "Frank likes pizza.",
        "Frank once ran a marathon dressed as a banana to raise money for the children's hospital.",
    ]
    await write_facts(client, key, contents, subject)
    budget = 30
    packet, trace = await context_and_trace(
        client, key, "Frank marathon", subject, budget_tokens=budget, include_episodes=False
    )
    candidates = candidate_decisions(trace)
    assert len(candidates) == len(contents)
    scores = [d["score"] for d in candidates]
    assert scores == sorted(scores, reverse=True)
    # Greedy by decreasing score: a fact is packed iff it still fits in what is left.
    remaining = budget
    for d in candidates:
        if d["tokens"] <= remaining:
            assert (d["decision"], d["reason_code"]) == ("included", "packed"), d
            remaining -= d["tokens"]
        else:
            assert (d["decision"], d["reason_code"]) == ("excluded", "over_budget"), d
    assert [d["reason_code"] for d in candidates].count("over_budget") >= 1
    packed_in_rank_order = [d["item_id"] for d in candidates if d["decision"] == "included"]
    assert [f["fact_id"] for f in packet["facts"]] == packed_in_rank_order
    assert packet["used_tokens"] == budget - remaining <= budget
    assert_packet_matches_trace(packet, trace)


# --- rule 5: the recall gate --------------------------------------------------------------------

GATE = 0.6
COOKING_FACTS = [
    "Alice bakes sourdough bread every Sunday.",
    "Alice's favourite dish is lasagna.",
    "Alice grows basil on her balcony.",
]
COOKING_EVENTS = [
    ("Alice baked a chocolate cake for her sister's birthday.", "2024-03-02T15:00:00Z"),
    ("Alice went to a pasta-making class.", "2024-04-10T18:00:00Z"),
    ("Alice baked two loaves of sourdough bread on Sunday morning.", "2024-05-12T09:00:00Z"),
]
UNRELATED_QUERY = "What is the boiling point of tungsten in kelvin?"


async def _cooking_scope(client: httpx.AsyncClient, key: str, subject: str) -> None:
    await write_facts(client, key, COOKING_FACTS, subject)
    await write_events(client, key, COOKING_EVENTS, subject)


@pytest.mark.model
async def test_recall_gate_empties_an_unrelated_query(
    settings: Settings, conn: Any, local_embedder: Embedder, key: str
) -> None:
    texts = COOKING_FACTS + [c for c, _ in COOKING_EVENTS]
    distances = await cosine_distances(local_embedder, UNRELATED_QUERY, texts)
    assert min(distances) > GATE, distances  # precondition: nothing is relevant
    async with make_client(settings, conn, local_embedder, recall_max_distance=GATE) as client:
        await _cooking_scope(client, key, "gate")
        packet, trace = await context_and_trace(client, key, UNRELATED_QUERY, "gate")
    assert packet["facts"] == [] and packet["episodes"] == []
    assert packet["empty_reason"] == "no_relevant_memory"
    assert packet["status"] == "ok" and packet["warnings"] == []
    assert packet["used_tokens"] == 0
    assert trace["empty_reason"] == "no_relevant_memory"
    assert len(trace["decisions"]) == len(texts)
    assert {d["item_type"] for d in trace["decisions"]} == {"fact", "episode"}
    for d in trace["decisions"]:
        assert (d["decision"], d["reason_code"]) == ("excluded", "below_relevance_floor"), d
        assert d["cosine_distance"] > GATE


@pytest.mark.model
async def test_recall_gate_zero_is_disabled(model_client: httpx.AsyncClient, key: str) -> None:
    await _cooking_scope(model_client, key, "gate-off")
    packet, trace = await context_and_trace(model_client, key, UNRELATED_QUERY, "gate-off")
    assert len(packet["facts"]) == len(COOKING_FACTS)
    assert len(packet["episodes"]) == len(COOKING_EVENTS)
    assert packet["empty_reason"] is None
    assert not [d for d in trace["decisions"] if d["reason_code"] == "below_relevance_floor"]


@pytest.mark.model
async def test_recall_gate_excludes_facts_and_episodes_beyond_the_floor(
    settings: Settings, conn: Any, local_embedder: Embedder, key: str
) -> None:
    query, gate = "What bread does Alice bake on Sundays?", 0.3
    texts = COOKING_FACTS + [c for c, _ in COOKING_EVENTS]
    distances = await cosine_distances(local_embedder, query, texts)
    # Precondition: the floor splits both the facts and the episodes, none of them close to it.
    assert min(distances[: len(COOKING_FACTS)]) <= gate < max(distances[: len(COOKING_FACTS)]), distances
    assert min(distances[len(COOKING_FACTS) :]) <= gate < max(distances[len(COOKING_FACTS) :]), distances
    assert min(abs(d - gate) for d in distances) > 0.02, distances
    async with make_client(settings, conn, local_embedder, recall_max_distance=gate) as client:
        await _cooking_scope(client, key, "gate-split")
        packet, trace = await context_and_trace(client, key, query, "gate-split")
    assert packet["empty_reason"] is None and packet["status"] == "ok"
    assert len(trace["decisions"]) == len(texts)
    for d in trace["decisions"]:
        if d["cosine_distance"] > gate:
            assert (d["decision"], d["reason_code"]) == ("excluded", "below_relevance_floor"), d
        else:
            assert (d["decision"], d["reason_code"]) == ("included", "packed"), d
    assert packet["facts"] and packet["episodes"]
    assert_packet_matches_trace(packet, trace)


async def test_empty_packet_without_gate_has_no_empty_reason(client: httpx.AsyncClient, key: str) -> None:
    # No candidate at all.
    packet = await context(client, key, "anything", "nobody-here")
    assert packet["facts"] == [] and packet["episodes"] == []
    assert packet["empty_reason"] is None and packet["status"] == "ok"
    # Candidates, but none fits the budget: over_budget, not the gate.
    await write_facts(client, key, ["Gina paints large watercolour landscapes."], "too-small")
    packet, trace = await context_and_trace(client, key, "watercolour", "too-small", budget_tokens=1)
    assert packet["facts"] == [] and packet["empty_reason"] is None
    assert [d["reason_code"] for d in trace["decisions"]] == ["over_budget"]


# --- rule 6: multi-hop expansion ----------------------------------------------------------------

PEOPLE = [
    "my neighbour", "my cousin", "her brother", "his sister", "our landlord", "my old roommate",
    "the new intern", "my best friend", "her husband", "his aunt", "my dentist's son", "the mail carrier",
]  # fmt: skip
JOBS = [
    "works at a bakery downtown", "works at the hospital on weekends", "works at a bank in the city centre",
    "works at a small law firm", "works at the public library", "works at a car factory",
    "works at the local school", "works at a software startup", "works at the train station",
    "works at a grocery store",
]  # fmt: skip
WORK_DISTRACTORS = [f"{p} {j}." for p in PEOPLE for j in JOBS]  # lower case: no entity
ALICE = "Alice works at Acme."
LYON = "Acme is headquartered in Lyon."
ACME_MORE = [
    "Acme sells rubber ducks.",
    "Acme was founded long ago.",
    "Acme makes anvils and rockets.",
    "Acme has a blue logo.",
    "Acme sponsors a cycling team.",
    "Acme owns three warehouses.",
    "Acme stock rose last year.",
]
MULTI_HOP_QUERY = "Where does Alice work?"


async def _multi_hop_scope(
    client: httpx.AsyncClient, local_embedder: Embedder, key: str, subject: str
) -> tuple[str, str, list[str]]:
    """Alice's fact, 120 work distractors, and 8 Acme facts none of which is a candidate."""
    texts = [ALICE, *WORK_DISTRACTORS, LYON, *ACME_MORE]
    distances = await cosine_distances(local_embedder, MULTI_HOP_QUERY, texts)
    others = sorted(distances[: 1 + len(WORK_DISTRACTORS)])
    acme = distances[1 + len(WORK_DISTRACTORS) :]
    # Precondition: every Acme fact is clearly outside the vector top-K (and shares no word set
    # with the query, which needs all of where/does/alice/work for a full-text hit).
    assert min(acme) > others[RETRIEVAL_TOP_K + 10], (min(acme), others[RETRIEVAL_TOP_K + 10])
    assert distances[0] == min(distances)
    (alice,) = await fact_ids(client, key, [ALICE], subject)
    await write_facts(client, key, WORK_DISTRACTORS, subject)
    # Written first, the Lyon fact has the smallest UUIDv7 of the equally ranked Acme facts.
    (lyon,) = await fact_ids(client, key, [LYON], subject)
    more = await fact_ids(client, key, ACME_MORE, subject)
    return alice, lyon, more


@pytest.mark.model
async def test_multi_hop_expansion_serves_linked_fact(
    model_client: httpx.AsyncClient, local_embedder: Embedder, key: str
) -> None:
    client, subject = model_client, "multi-hop"
    alice, lyon, more = await _multi_hop_scope(client, local_embedder, key, subject)
    packet, trace = await context_and_trace(
        client, key, MULTI_HOP_QUERY, subject, include_episodes=False, budget_tokens=2000
    )

    assert packet["facts"][0]["fact_id"] == alice
    served = {f["fact_id"]: f for f in packet["facts"]}
    assert served[lyon]["reason_code"] == "multi_hop_expansion"
    candidates = candidate_decisions(trace)
    assert len(candidates) == RETRIEVAL_TOP_K
    acme_ids = {lyon, *more}
    assert not acme_ids & {d["item_id"] for d in candidates}
    hops = [d for d in trace["decisions"] if d["rank"] is not None and d["rank"] > len(candidates)]
    # One entity ("Acme": "Alice" is a query word), at most MULTI_HOP_MAX_PER_ENTITY facts for it.
    assert len(hops) == MULTI_HOP_MAX_PER_ENTITY
    assert {d["item_id"] for d in hops} <= acme_ids
    assert hops[0]["item_id"] == lyon
    assert [d["rank"] for d in hops] == list(range(len(candidates) + 1, len(candidates) + 1 + len(hops)))
    for d in hops:
        assert (d["decision"], d["reason_code"]) == ("included", "multi_hop_expansion")
        assert d["score"] == pytest.approx(expected_score(d), abs=1e-9)
    # Multi-hop rows follow the main pack in the packet too.
    reasons = [f["reason_code"] for f in packet["facts"]]
    assert reasons == sorted(reasons, key=lambda r: r == "multi_hop_expansion")
    assert_packet_matches_trace(packet, trace)


@pytest.mark.model
async def test_multi_hop_rows_are_never_gated(
    settings: Settings, conn: Any, local_embedder: Embedder, key: str
) -> None:
    gate = 0.65
    async with make_client(settings, conn, local_embedder, recall_max_distance=gate) as client:
        alice, lyon, _ = await _multi_hop_scope(client, local_embedder, key, "multi-hop-gate")
        packet, trace = await context_and_trace(
            client, key, MULTI_HOP_QUERY, "multi-hop-gate", include_episodes=False, budget_tokens=2000
        )
    decided = by_item(trace)
    assert decided[alice]["decision"] == "included"
    assert decided[lyon]["cosine_distance"] > gate  # farther than the floor...
    assert (decided[lyon]["decision"], decided[lyon]["reason_code"]) == ("included", "multi_hop_expansion")
    assert lyon in {f["fact_id"] for f in packet["facts"]}
    gated = [d for d in candidate_decisions(trace) if d["cosine_distance"] > gate]
    assert gated and all(d["reason_code"] == "below_relevance_floor" for d in gated)
    assert packet["empty_reason"] is None


@pytest.mark.model
async def test_multi_hop_serves_a_linked_candidate_the_gate_left_out(
    settings: Settings, conn: Any, local_embedder: Embedder, key: str
) -> None:
    """Multi-hop rows are never gated, so a linked fact is served whether or not the vector side
    happened to reach it: one that is a candidate, left out by the gate, comes back as a
    multi_hop_expansion, decided once. Before, only linked facts beyond the top K could."""
    gate, subject = 0.65, "multi-hop-gated-candidate"
    async with make_client(settings, conn, local_embedder, recall_max_distance=gate) as client:
        alice, lyon = await fact_ids(client, key, [ALICE, LYON], subject)
        packet, trace = await context_and_trace(
            client, key, MULTI_HOP_QUERY, subject, include_episodes=False, budget_tokens=2000
        )
    decided = by_item(trace)  # each item once
    assert decided[alice]["reason_code"] == "packed"
    assert decided[lyon]["cosine_distance"] > gate and decided[lyon]["rank"] > 2
    assert (decided[lyon]["decision"], decided[lyon]["reason_code"]) == ("included", "multi_hop_expansion")
    assert [f["fact_id"] for f in packet["facts"]] == [alice, lyon]
    assert_packet_matches_trace(packet, trace)


async def test_facts_first_ranks_a_query_by_its_first_words(client: httpx.AsyncClient, key: str) -> None:
    """The text side reads FACTS_FIRST_QUERY_MAX_WORDS words of a query (its cost grows faster
    than its words): a fact holding those words matches a longer query, whose later words it
    lacks; with every word ANDed it would rank 0."""
    subject = "long-query"
    words = [f"w{i}x" for i in range(FACTS_FIRST_QUERY_MAX_WORDS + 36)]
    (held,) = await fact_ids(client, key, [" ".join(words[:FACTS_FIRST_QUERY_MAX_WORDS])], subject)
    packet, trace = await context_and_trace(client, key, " ".join(words), subject, profile="facts_first")
    assert by_item(trace)[held]["text_rank"] > 0
    assert [f["fact_id"] for f in packet["facts"]] == [held]


async def test_a_fact_decided_blocked_is_not_found_again_by_multi_hop(
    client: httpx.AsyncClient, conn: Any, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """facts_first reads the scope in several statements: a conflict resolved after the call
    traced its members blocked must not let multi-hop serve one of them (decided twice, and
    served while its warning calls it hidden). The resolution is made to land between them."""
    subject = "multi-hop-blocked"
    await write_facts(client, key, ["Alice works at Acme."], subject)
    claims = [{"content": f"Acme is in {city}.", "key": "hq"} for city in ("Lyon", "Paris")]
    lyon, _ = await fact_ids(client, key, claims, subject)
    listed = await client.get("/v1/conflicts", params={"subject_id": subject}, headers=bearer(key))
    (conflict,) = listed.json()["conflicts"]
    set_id, multi_hop_facts = uuid.UUID(conflict["conflict_set_id"]), context_repo.multi_hop_facts

    async def resolved_first(c: Any, *args: Any, **kwargs: Any) -> Any:
        await conflicts_repo.resolve_conflict_set(c, PROJECT, set_id, [uuid.UUID(lyon)])
        return await multi_hop_facts(c, *args, **kwargs)

    monkeypatch.setattr(context_repo, "multi_hop_facts", resolved_first)
    query = "Where does Alice work?"
    packet, trace = await context_and_trace(client, key, query, subject, profile="facts_first")
    decided = by_item(trace)  # each item once
    assert (decided[lyon]["decision"], decided[lyon]["reason_code"]) == ("blocked", "conflict_open")
    assert lyon not in {f["fact_id"] for f in packet["facts"]}


async def test_multi_hop_is_skipped_when_no_budget_remains(client: httpx.AsyncClient, key: str) -> None:
    subject = "multi-hop-full"
    fact = "Henri works at Initech."  # 23 chars -> 5 tokens
    # Hash embedder: the fillers share two query words, the Initech facts none, so the vector
    # top-K is Henri's fact and fillers only, and the Initech facts are reachable by multi-hop only.
    fillers = [f"someone works at place {i}" for i in range(RETRIEVAL_TOP_K + 16)]
    await write_facts(client, key, [fact, *fillers], subject)
    initech = await fact_ids(client, key, [f"Initech fact number {i}." for i in range(3)], subject)

    # Control: with room left, the Initech facts come in by multi-hop.
    _, trace = await context_and_trace(client, key, "Henri works at", subject, budget_tokens=5000)
    hops = [d["item_id"] for d in trace["decisions"] if d["reason_code"] == "multi_hop_expansion"]
    assert sorted(hops) == sorted(initech)

    packet, trace = await context_and_trace(
        client, key, "Henri works at", subject, budget_tokens=tokens_of(fact), include_episodes=False
    )
    assert [f["content"] for f in packet["facts"]] == [fact]
    assert not set(initech) & {d["item_id"] for d in trace["decisions"]}


def test_extract_entities_ranks_by_frequency_and_keeps_at_most_the_limit() -> None:
    texts = ["Acme hired Bob.", "Bob met Carol at Acme.", "Bob left Dover."]
    assert extract_entities(texts, "unrelated", MULTI_HOP_MAX_ENTITIES) == ["Bob", "Acme"]
    assert extract_entities(texts, "unrelated", 10) == ["Bob", "Acme", "Carol", "Dover"]
    # Ties keep first-seen order.
    assert extract_entities(["Zed met Yan.", "Yan met Zed."], "q", 2) == ["Zed", "Yan"]


def test_extract_entities_skips_sentence_starters_and_query_words() -> None:
    texts = [
        "The cat met Alice in Paris.",
        "Le chat et Marie sont amis.",
        "Et puis Marie est partie.",
        "Les enfants de Marie.",
        "And then Alice left. After that, Alice slept.",
    ]
    # "The", "Le", "Et", "Les", "And", "After" start sentences; "Alice" is in the query.
    assert extract_entities(texts, "where is ALICE now?", 5) == ["Marie", "Paris"]
    assert extract_entities(texts, "who is there", 2) == ["Alice", "Marie"]


def test_extract_entities_pattern() -> None:
    # Capitalised words of 3+ letters only: no all-caps acronyms, no 2-letter words; accents ok.
    assert extract_entities(["Al and ACME met Élodie at Zoë's."], "x", 5) == ["Élodie", "Zoë"]
    assert extract_entities([], "x", 2) == []


# --- rule 7: episodes ---------------------------------------------------------------------------

HIKING_EVENTS = [
    ("Alice went hiking in the Alps with her brother.", "2024-06-01T09:00:00Z"),
    ("Alice hiked up a volcano in Iceland.", "2024-07-03T09:00:00Z"),
    ("Alice bought new hiking boots.", "2024-05-20T12:00:00Z"),
    ("Alice camped near a mountain lake after a long trek.", "2024-08-11T20:00:00Z"),
    ("Alice walked the coastal trail for three days.", "2024-09-09T10:00:00Z"),
    ("Alice climbed a steep ridge at dawn.", "2024-09-21T06:00:00Z"),
    ("Alice had dinner with colleagues.", "2024-02-02T19:00:00Z"),
    ("Alice paid her electricity bill.", "2024-02-05T08:00:00Z"),
    ("Alice watched a movie about sharks.", "2024-03-07T21:00:00Z"),
    ("Alice repaired her bicycle.", "2024-03-15T16:00:00Z"),
    ("Alice renewed her passport.", "2024-04-01T11:00:00Z"),
    ("Alice baked cookies for the office.", "2024-04-20T14:00:00Z"),
]
HIKING_FACTS = ["Alice loves the mountains.", "Alice owns a golden retriever."]
HIKING_QUERY = "When did Alice go hiking?"


@pytest.mark.model
async def test_episodes_are_the_top_k_closest_after_the_facts(
    model_client: httpx.AsyncClient, local_embedder: Embedder, key: str
) -> None:
    client, subject = model_client, "episodes"
    assert len(HIKING_EVENTS) > EPISODE_TOP_K
    event_ids = await write_events(client, key, HIKING_EVENTS, subject)
    await write_facts(client, key, HIKING_FACTS, subject)
    other_scope = await write_events(client, key, HIKING_EVENTS[:2], "episodes-other")
    distances = await cosine_distances(local_embedder, HIKING_QUERY, [c for c, _ in HIKING_EVENTS])
    by_distance = sorted(zip(distances, event_ids, strict=True))
    expected = [eid for _, eid in by_distance[:EPISODE_TOP_K]]
    assert by_distance[EPISODE_TOP_K - 1][0] < by_distance[EPISODE_TOP_K][0] - 1e-3  # no tie at the cut

    packet, trace = await context_and_trace(client, key, HIKING_QUERY, subject)
    episodes = [d for d in trace["decisions"] if d["item_type"] == "episode"]
    assert [d["item_id"] for d in episodes] == expected
    assert [d["rank"] for d in episodes] == list(range(1, EPISODE_TOP_K + 1))
    assert not set(other_scope) & {d["item_id"] for d in trace["decisions"]}
    for d in episodes:
        assert d["score"] == pytest.approx(1.0 - d["cosine_distance"], abs=1e-9)
        assert d["decision"] == "included"
    assert [e["event_id"] for e in packet["episodes"]] == expected
    # Facts are decided (and packed) before any episode.
    kinds = [d["item_type"] for d in trace["decisions"] if d["decision"] != "blocked"]
    assert kinds == ["fact"] * len(HIKING_FACTS) + ["episode"] * EPISODE_TOP_K
    assert_packet_matches_trace(packet, trace)


@pytest.mark.model
async def test_episodes_only_get_the_budget_left_by_facts(model_client: httpx.AsyncClient, key: str) -> None:
    client, subject = model_client, "episodes-budget"
    await write_events(client, key, HIKING_EVENTS, subject)
    await write_facts(client, key, HIKING_FACTS, subject)
    facts_tokens = sum(tokens_of(f) for f in HIKING_FACTS)

    # A budget of exactly the facts: every fact is packed, no episode fits.
    packet, trace = await context_and_trace(client, key, HIKING_QUERY, subject, budget_tokens=facts_tokens)
    assert len(packet["facts"]) == len(HIKING_FACTS) and packet["episodes"] == []
    episodes = [d for d in trace["decisions"] if d["item_type"] == "episode"]
    assert len(episodes) == EPISODE_TOP_K
    assert all((d["decision"], d["reason_code"]) == ("excluded", "over_budget") for d in episodes)

    # A little more: the episodes share what is left, greedily in distance order.
    budget = facts_tokens + 20
    packet, trace = await context_and_trace(client, key, HIKING_QUERY, subject, budget_tokens=budget)
    assert len(packet["facts"]) == len(HIKING_FACTS)
    remaining = budget - facts_tokens
    episodes = [d for d in trace["decisions"] if d["item_type"] == "episode"]
    for d in episodes:
        if d["tokens"] <= remaining:
            assert d["decision"] == "included", d
            remaining -= d["tokens"]
        else:
            assert (d["decision"], d["reason_code"]) == ("excluded", "over_budget"), d
    assert 0 < len(packet["episodes"]) < EPISODE_TOP_K
    assert packet["used_tokens"] == budget - remaining
    assert_packet_matches_trace(packet, trace)


async def test_include_episodes_false_serves_and_traces_no_episode(
    client: httpx.AsyncClient, key: str
) -> None:
    subject = "no-episodes"
    await write_events(client, key, HIKING_EVENTS[:3], subject)
    await write_facts(client, key, HIKING_FACTS, subject)
    packet, trace = await context_and_trace(client, key, HIKING_QUERY, subject, include_episodes=False)
    assert packet["episodes"] == []
    assert len(packet["facts"]) == len(HIKING_FACTS)
    assert not [d for d in trace["decisions"] if d["item_type"] == "episode"]
    # Default: included.
    packet = await context(client, key, HIKING_QUERY, subject)
    assert len(packet["episodes"]) == 3


# --- rule 8: the trace ----------------------------------------------------------------------------


async def test_trace_has_one_call_and_one_decision_per_item(client: httpx.AsyncClient, key: str) -> None:
    subject = "trace"
    served_ids = await fact_ids(client, key, ["Ivan speaks Polish.", "Ivan speaks German."], subject)
    blocked = await fact_ids(
        client,
        key,
        [
            {"content": "Ivan lives in Krakow.", "key": "city"},
            {"content": "Ivan lives in Gdansk.", "key": "city"},
        ],
        subject,
    )
    events = await write_events(client, key, [("Ivan visited Warsaw.", "2024-01-01T10:00:00Z")], subject)

    packet = await context(client, key, "Ivan", subject)
    # GET /v1/inspect works right away.
    trace = await inspect(client, key, packet["trace_id"])
    assert trace["trace_id"] == packet["trace_id"]
    assert (trace["project_id"], trace["subject_id"], trace["query"]) == (PROJECT, subject, "Ivan")
    created = datetime.fromisoformat(trace["created_at"])
    assert created.tzinfo is not None and abs(created - datetime.now(UTC)) < timedelta(hours=1)
    decided = by_item(trace)
    assert set(decided) == {*served_ids, *blocked, *events}
    assert_packet_matches_trace(packet, trace)
    assert {f["fact_id"] for f in packet["facts"]} == set(served_ids)
    assert [e["event_id"] for e in packet["episodes"]] == events
    # Blocked facts come last, without rank or score.
    assert [d["decision"] for d in trace["decisions"]][-2:] == ["blocked", "blocked"]
    # One context_calls row per call.
    s = (await stats(client, key)).json()
    assert s["context_calls"] == 1
    await context(client, key, "Ivan", subject)
    s = (await stats(client, key)).json()
    assert s["context_calls"] == 2


async def test_inspect_unknown_trace_is_404_not_found(client: httpx.AsyncClient, key: str) -> None:
    r = await client.get(f"/v1/inspect/{uuid.uuid4()}", headers=bearer(key))
    assert_error(r, 404, "not_found")
    r = await client.get("/v1/inspect/not-a-uuid", headers=bearer(key))
    assert r.status_code in (400, 404), r.text
    r = await client.get(f"/v1/inspect/{uuid.uuid4()}")
    assert_error(r, 401, "unauthorized")


async def test_inspect_of_another_projects_trace_is_not_found(
    client: httpx.AsyncClient, key: str, other_key: str
) -> None:
    secret = "Judy's locker code is 4471"
    (fid,) = await fact_ids(client, key, [secret], "secret")
    packet = await context(client, key, "Judy locker code", "secret")
    assert [f["fact_id"] for f in packet["facts"]] == [fid]
    r = await client.get(f"/v1/inspect/{packet['trace_id']}", headers=bearer(other_key))
    assert r.status_code in (403, 404), r.text
    assert r.json()["code"] in ("forbidden", "not_found")
    for leaked in (secret, "Judy locker code", fid, '"secret"'):
        assert leaked not in r.text
    # The owner still sees it.
    await inspect(client, key, packet["trace_id"])


# --- rule 9: stats --------------------------------------------------------------------------------


async def test_stats_overview_exact_values(client: httpx.AsyncClient, key: str, other_key: str) -> None:
    empty = (await stats(client, key)).json()
    assert empty["project_id"] == PROJECT
    assert {k: empty[k] for k in ("context_calls", "injection_rate", "hit_rate", "avg_used_tokens",
                                   "facts_active", "open_conflicts")} == {
        "context_calls": 0, "injection_rate": 0.0, "hit_rate": 0.0, "avg_used_tokens": 0.0,
        "facts_active": 0, "open_conflicts": 0,
    }  # fmt: skip

    tea = "Ken drinks green tea."
    tea_id, acme, _ = await fact_ids(
        client,
        key,
        [
            tea,
            {"content": "Ken works at Acme.", "key": "employer"},
            {"content": "Ken works at Initech.", "key": "employer"},
        ],
        "ken",
    )
    event = "Ken flew to Rome for a conference."
    await write_events(client, key, [(event, "2024-05-05T10:00:00Z")], "ken-events")
    (conflict,) = (
        await client.get(
            "/v1/conflicts", params={"project_id": PROJECT, "status": "open"}, headers=bearer(key)
        )
    ).json()["conflicts"]

    a = await context(client, key, "tea", "ken", include_episodes=False)  # serves the tea fact
    b = await context(client, key, "tea", "nobody")  # serves nothing
    c = await context(client, key, "Rome", "ken-events")  # serves an episode only: not an injection
    assert [f["fact_id"] for f in a["facts"]] == [tea_id] and a["used_tokens"] == tokens_of(tea)
    assert b["facts"] == [] and b["episodes"] == [] and b["used_tokens"] == 0
    assert c["facts"] == [] and len(c["episodes"]) == 1 and c["used_tokens"] == tokens_of(event)

    s = (await stats(client, key)).json()
    assert s["context_calls"] == 3
    assert s["injection_rate"] == pytest.approx(1 / 3, abs=1e-12)
    assert s["hit_rate"] == s["injection_rate"]
    assert s["avg_used_tokens"] == pytest.approx((tokens_of(tea) + 0 + tokens_of(event)) / 3, abs=1e-9)
    assert s["facts_active"] == 3
    assert s["open_conflicts"] == 1

    r = await client.post(
        f"/v1/conflicts/{conflict['conflict_set_id']}/resolve", json={"keep": [acme]}, headers=bearer(key)
    )
    assert r.status_code == 200, r.text
    r = await client.patch(f"/v1/facts/{tea_id}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text
    s = (await stats(client, key)).json()
    assert (s["facts_active"], s["open_conflicts"], s["context_calls"]) == (1, 0, 3)

    # Another project's key: forbidden, and that project's own stats do not count proj-a.
    assert_error(await stats(client, other_key), 403, "forbidden")
    theirs = (await stats(client, other_key, OTHER_PROJECT)).json()
    assert (theirs["context_calls"], theirs["facts_active"]) == (0, 0)


# --- rule 10: embedder failure --------------------------------------------------------------------


class FailingEmbedder:
    """Implements the Embedder protocol; every embed() fails like a dead provider."""

    name = "hash"  # the hash model failing: the scope's vectors are of its space
    dim = 384

    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.calls = 0

    async def embed(self, texts: Sequence[str], **_: object) -> list[Vector]:
        self.calls += 1
        raise self.exc

    async def aclose(self) -> None:
        return None


class SlowEmbedder:
    """Implements the Embedder protocol; answers far later than HAKI_EMBED_TIMEOUT_SECONDS."""

    name = "hash"  # the hash model failing: the scope's vectors are of its space
    dim = 384

    async def embed(self, texts: Sequence[str], **_: object) -> list[Vector]:
        await asyncio.sleep(30)
        raise AssertionError("the assembler should have given up waiting")

    async def aclose(self) -> None:
        return None


async def _embedder_down_scope(client: httpx.AsyncClient, key: str, subject: str) -> tuple[str, str]:
    hit, miss = await fact_ids(client, key, ["The wifi password is zq7vtx.", "Lena likes tea."], subject)
    await write_events(
        client, key, [("Lena changed the wifi password zq7vtx.", "2024-01-01T00:00:00Z")], subject
    )
    return hit, miss


def _assert_full_text_only(packet: dict[str, Any], trace: dict[str, Any], hit: str) -> None:
    assert packet["status"] == "degraded"
    assert len(packet["warnings"]) == 1 and packet["warnings"][0].startswith("embedding_unavailable")
    assert [f["fact_id"] for f in packet["facts"]] == [hit]
    assert packet["episodes"] == []  # episodes need the query vector
    (d,) = trace["decisions"]
    assert d["item_id"] == hit and (d["decision"], d["reason_code"]) == ("included", "packed")
    assert d["similarity"] is None and d["cosine_distance"] is None
    assert d["text_rank"] == pytest.approx(ONE_HIT_TEXT_RANK, abs=1e-6)
    assert d["score"] == pytest.approx(
        WEIGHT_TEXT_RANK * d["text_rank"] + WEIGHT_RECENCY * d["recency"], abs=1e-9
    )
    assert_packet_matches_trace(packet, trace)


@pytest.mark.parametrize(
    "exc", [EmbedderError("provider down"), RuntimeError("unexpected")], ids=["EmbedderError", "RuntimeError"]
)
async def test_embedder_failure_degrades_to_full_text(
    client: httpx.AsyncClient, settings: Settings, conn: Any, key: str, exc: Exception
) -> None:
    subject = "embedder-down"
    hit, _ = await _embedder_down_scope(client, key, subject)  # written with a working embedder
    failing = FailingEmbedder(exc)
    async with make_client(settings, conn, failing) as down:
        packet, trace = await context_and_trace(down, key, "zq7vtx", subject)
        # Nothing matches the text: an empty, degraded packet, still a 200.
        empty = await context(down, key, "nothing matches this", subject)
    assert failing.calls == 2
    _assert_full_text_only(packet, trace, hit)
    assert empty["facts"] == [] and empty["status"] == "degraded" and empty["empty_reason"] is None


async def test_embedder_timeout_degrades_to_full_text(
    client: httpx.AsyncClient, settings: Settings, conn: Any, key: str
) -> None:
    subject = "embedder-slow"
    hit, _ = await _embedder_down_scope(client, key, subject)
    async with make_client(settings, conn, SlowEmbedder(), embed_timeout_seconds=0.2) as slow:
        started = asyncio.get_running_loop().time()
        packet, trace = await context_and_trace(slow, key, "zq7vtx", subject)
        assert asyncio.get_running_loop().time() - started < 5
    _assert_full_text_only(packet, trace, hit)


async def test_embedder_failure_with_recall_gate_still_serves_full_text(
    client: httpx.AsyncClient, settings: Settings, conn: Any, key: str
) -> None:
    # Without a query vector there is no cosine distance to hold against the floor.
    subject = "embedder-down-gate"
    hit, _ = await _embedder_down_scope(client, key, subject)
    async with make_client(
        settings, conn, FailingEmbedder(EmbedderError("down")), recall_max_distance=0.3
    ) as down:
        packet, trace = await context_and_trace(down, key, "zq7vtx", subject)
    _assert_full_text_only(packet, trace, hit)


def test_constants_match_the_spec() -> None:
    assert (RETRIEVAL_TOP_K, CANDIDATE_LIMIT, EPISODE_TOP_K) == (64, 256, 8)
    assert (MULTI_HOP_MAX_ENTITIES, MULTI_HOP_MAX_PER_ENTITY) == (2, 5)
