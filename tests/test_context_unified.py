"""The `unified` profile, rule by rule (docs/spec/context-profiles.md), and what both profiles share.

Each test is named after the rule it checks and compares with `facts_first` where the rule is
what tells them apart, so it fails without the rule. Through HTTP on the real PostgreSQL, with
the hash embedder (bag of words: texts that share words are close) or no embedder at all where
only the text side matters; the retrieval quality of the real model is measured by
benchmarks/locomo.py.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import msgspec
import numpy as np
import pytest

from service.constants import (
    EMBED_DIM,
    ENTITY_SAMPLE_DOCS,
    EPISODE_TOP_K,
    IDF_SAMPLE_DOCS,
    MULTI_HOP_MAX_MATCHES_PER_ENTITY,
    TEXT_PROBE_MAX_ROWS,
    TEXT_PROBE_MIN_COST,
    TEXT_PROBE_MIN_POSTINGS,
    UNIFIED_WEIGHT_RECENCY,
    UNIFIED_WEIGHT_SIMILARITY,
    UNIFIED_WEIGHT_TEXT_RANK,
)
from service.context import assembler
from service.context.call import PROFILE_WEIGHTS
from service.context.model import Candidate, Probe, outcomes, pack, preview
from service.db.sql import load_queries
from service.embedding.embedder import Embedder, EmbedderError, Vector
from service.repository import context as repo
from service.repository import events as events_repo
from service.repository.context import TextBounds
from service.settings import Settings, SettingsError
from service.structs import EventIn, WriteEventsRequest
from tests.helpers import (
    PROJECT,
    assert_error,
    assert_packet_matches_trace,
    bearer,
    by_item,
    context,
    context_and_trace,
    fact_ids,
    post_context,
    tokens_of,
    write_events,
    write_facts,
)
from tests.helpers.app import make_client
from tests.helpers.sql import load_test_queries, parameter_order

OLD = "2024-01-01T00:00:00Z"


class DownEmbedder:
    """Implements the Embedder protocol and always fails: the call has the text side alone."""

    name = "hash"  # the hash model failing: the scope's vectors are of its space
    dim = 384

    async def embed(self, texts: Sequence[str], **_: object) -> list[Vector]:
        raise EmbedderError("down")

    async def aclose(self) -> None:
        return None


def bm25_idf(docs: int, df: int) -> float:
    return math.log(1.0 + (docs - df + 0.5) / (df + 0.5))


def decisions_of(trace: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    return [d for d in trace["decisions"] if d["reason_code"] == reason]


# --- profiles ---------------------------------------------------------------------------------


async def test_profiles_default_to_unified_and_a_call_may_name_either(
    client: httpx.AsyncClient, settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    await write_facts(client, key, ["Maya works as a nurse."], "profiles")
    for asked, served in ((None, "unified"), ("unified", "unified"), ("facts_first", "facts_first")):
        extra = {} if asked is None else {"profile": asked}
        packet, trace = await context_and_trace(client, key, "What does Maya do?", "profiles", **extra)
        assert packet["profile"] == trace["profile"] == served
    # The deployment default is HAKI_CONTEXT_PROFILE; a call still overrides it.
    async with make_client(settings, conn, hash_embedder, context_profile="facts_first") as ff:
        assert (await context(ff, key, "Maya", "profiles"))["profile"] == "facts_first"
        assert (await context(ff, key, "Maya", "profiles", profile="unified"))["profile"] == "unified"


@pytest.mark.parametrize("bad", ["newest", "", "UNIFIED", 1, ["unified"]])
async def test_profiles_any_other_value_is_a_validation_error(
    client: httpx.AsyncClient, key: str, bad: Any
) -> None:
    body = assert_error(await post_context(client, key, "q", profile=bad), 400, "validation_error")
    assert body["details"]["field"] == "profile"


def test_profiles_setting_reads_haki_context_profile() -> None:
    assert Settings.from_env({}).context_profile == "unified"
    assert Settings.from_env({"HAKI_CONTEXT_PROFILE": "facts_first"}).context_profile == "facts_first"
    with pytest.raises(SettingsError):
        Settings.from_env({"HAKI_CONTEXT_PROFILE": "newest"})
    assert Settings.from_env({}).text_search_config == "english"
    assert Settings.from_env({"HAKI_TEXT_SEARCH_CONFIG": "simple"}).text_search_config == "simple"
    with pytest.raises(SettingsError):
        Settings.from_env({"HAKI_TEXT_SEARCH_CONFIG": "french"})


# --- rule 1: the OR text query, ranked by IDF share -------------------------------------------


async def test_or_text_query_matches_any_word_and_ranks_by_idf_share(
    client: httpx.AsyncClient, settings: Settings, conn: asyncpg.Connection, key: str
) -> None:
    subject = "or-query"
    pottery, tea, dog, other = await fact_ids(
        client,
        key,
        [
            "Caroline joined a pottery class.",
            "Caroline likes tea.",
            "Caroline walked the dog.",
            "Melanie painted a sunrise.",
        ],
        subject,
    )
    query = "When did Caroline join the pottery class?"
    async with make_client(settings, conn, DownEmbedder()) as down:
        packet, trace = await context_and_trace(down, key, query, subject)
        # facts_first ANDs every word (websearch_to_tsquery): no fact holds them all.
        assert (await context(down, key, query, subject, profile="facts_first"))["facts"] == []
    decided = by_item(trace)
    # Stop words (when, did, the) are left out; stems match: "join" finds "joined".
    docs = 4
    idf = {"carolin": bm25_idf(docs, 3), "join": bm25_idf(docs, 1), "pottery": bm25_idf(docs, 1)}
    idf["class"] = idf["pottery"]
    total = sum(idf.values())
    assert decided[pottery]["text_rank"] == pytest.approx(1.0, abs=1e-9)
    for fid in (tea, dog):
        assert decided[fid]["text_rank"] == pytest.approx(idf["carolin"] / total, abs=1e-9)
    assert other not in decided  # matches no word, and there is no vector side
    assert packet["facts"][0]["fact_id"] == pottery
    for d in trace["decisions"]:
        assert d["score"] == pytest.approx(
            UNIFIED_WEIGHT_TEXT_RANK * d["text_rank"] + UNIFIED_WEIGHT_RECENCY * d["recency"]
        )
    assert_packet_matches_trace(packet, trace)


async def test_or_text_query_stems_english_words_unless_configured_simple(
    client: httpx.AsyncClient, settings: Settings, conn: asyncpg.Connection, key: str
) -> None:
    subject = "stemming"
    (painting,) = await fact_ids(client, key, ["Melanie finished her paintings of sunsets."], subject)
    async with make_client(settings, conn, DownEmbedder()) as down:
        stemmed = await context(down, key, "Which sunset has she painted?", subject)
    async with make_client(settings, conn, DownEmbedder(), text_search_config="simple") as simple:
        _, trace = await context_and_trace(simple, key, "Which sunset has she painted?", subject)
        assert [f["fact_id"] for f in (await context(simple, key, "paintings", subject))["facts"]] == [
            painting
        ]
    assert [f["fact_id"] for f in stemmed["facts"]] == [painting]
    assert trace["decisions"] == []  # "sunset" and "painted" are not the words of the fact


async def test_or_text_query_of_stop_words_only_leaves_the_vector_side(
    client: httpx.AsyncClient, settings: Settings, conn: asyncpg.Connection, key: str
) -> None:
    subject = "stop-words"
    (fid,) = await fact_ids(client, key, ["What is the plan?"], subject)
    for query in ("what is the", "and or not -", '"" OR'):
        packet, trace = await context_and_trace(client, key, query, subject)
        assert [f["fact_id"] for f in packet["facts"]] == [fid]  # found by the vector side
        assert by_item(trace)[fid]["text_rank"] == 0.0
        async with make_client(settings, conn, DownEmbedder()) as down:
            empty = await context(down, key, query, subject)
        assert empty["facts"] == [] and empty["status"] == "degraded"


async def test_or_text_query_reads_a_bounded_idf_sample(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """The statistics do not grow with the scope: with a sample of 20 documents and 10 postings
    a word, no step of the statement reads more facts than that, in a scope of 300 facts that
    all carry the word (a count of its postings would read 300)."""
    subject = "idf-bounded"
    await write_facts(client, key, [f"common word number {i}" for i in range(300)], subject)
    plan = await explain(
        conn,
        "unified_candidates",
        **unified_text_side(subject, "common", TextBounds(match_words=8, per_word=10, sample_docs=20)),
    )
    reads = [n["Actual Rows"] for n in plan_nodes(plan) if n.get("Relation Name") == "facts"]
    assert reads and max(reads) <= 20, reads
    assert IDF_SAMPLE_DOCS >= 8  # the other tests expect exact statistics for their small scopes


async def test_the_statistics_sample_takes_events_of_one_instant_by_id(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """Of 40 events at one instant, haki_scope_sample keeps the greater ids, whatever order their
    rows were written in (here the greatest first, so a sample by where rows lie would keep
    others), and reads about as many rows as it keeps, not the instant's 40 (migration 0038)."""
    subject = "sample-ties"
    await write_events(client, key, [("an older turn", "2026-01-01T00:00:00Z")], subject)
    at = datetime(2030, 1, 1, tzinfo=UTC)
    ids = sorted((uuid.uuid4() for _ in range(40)), reverse=True)
    words = ["alpha", "bravo"] + [f"filler{i}" for i in range(38)]
    vector = np.full(EMBED_DIM, 1.0 / math.sqrt(EMBED_DIM), dtype=np.float32)
    for word, event_id in zip(words, ids, strict=True):
        req = WriteEventsRequest(
            project_id=PROJECT, subject_id=subject, events=[EventIn(content=word, occurred_at=at)]
        )
        await events_repo.insert_events(conn, req, [event_id], [vector])
    t = load_test_queries()
    # Whether the index serves the order, not what the statistics of the moment prefer: on a
    # fresh table a scan of the scope and a sort cost about the same and read all 41 rows.
    for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort", "enable_incremental_sort"):
        await conn.execute(f"SET LOCAL {setting} = off")
    before = await t.test_rows_read(conn, table_name="events")
    sample = [
        r["words"]
        async for r in t.test_scope_sample(conn, project_id=PROJECT, subject_id=subject, sample_docs=2)
    ]
    read = await t.test_rows_read(conn, table_name="events") - before
    assert sorted(sample) == ["'alpha':1", "'bravo':1"]
    assert read <= 8, f"{read} rows of events read for a sample of 2"


async def test_or_text_query_matches_only_its_rarest_words(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """A long query costs a bounded number of reads: candidates are matched on its
    match_words rarest words. With 2 of them, of 20 words of which 18 every fact holds, no step
    reads more facts than 2 x 10 postings (matching every word would read 20 x 10)."""
    subject = "rare-words"
    common = [f"w{i}x" for i in range(18)]
    await write_facts(client, key, [" ".join(common) + f" fact {i}" for i in range(60)], subject)
    await write_facts(client, key, ["zebra appears once", "quokka appears once"], subject)
    query = " ".join([*common, "zebra", "quokka"])
    bounds = TextBounds(match_words=2, per_word=10, sample_docs=256)
    plan = await explain(conn, "unified_candidates", **unified_text_side(subject, query, bounds))
    # The text side matches zebra's and quokka's facts, nothing else.
    found = await repo.unified_candidates(conn, text_probe(subject, query), text=bounds)
    assert sorted(c.content for c in found.candidates) == ["quokka appears once", "zebra appears once"]
    # The postings' reads: bitmap scans of facts by their text (the pool's fetch by id, a bitmap
    # scan too once facts has statistics, reads the matched facts again and is not one).
    read = [
        n["Actual Rows"] * n["Actual Loops"]
        for n in plan_nodes(plan)
        if n.get("Relation Name") == "facts"
        and n.get("Node Type") == "Bitmap Heap Scan"
        and "search_vector" in n.get("Recheck Cond", "")
    ]
    assert read and sum(read) == 2, read


async def test_common_word_of_a_big_scope_reads_the_newest_facts(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """haki_text_probe (migration 0013): a word that many facts of a big scope name is matched
    from the scope's newest facts, not from its GIN postings, whose bitmap is built whole. With
    the size thresholds at 0 (this scope made "big"), the 10 matches kept for a word that all 120
    facts name are the 10 newest; from the postings they are others (the oldest first)."""
    subject = "probe-newest"
    for batch in range(3):
        await write_facts(client, key, [f"coffee note {batch} {i}" for i in range(40)], subject)
    await conn.execute("ANALYZE facts")  # the planner statistics haki_scope_facts_estimate reads
    newest = {
        r["fact_id"]
        for r in await conn.fetch(
            "SELECT fact_id FROM facts WHERE project_id = $1 AND subject_id = $2 "
            "ORDER BY fact_id DESC LIMIT 10",
            PROJECT,
            subject,
        )
    }

    def coffee(min_postings: float, sample_docs: int = 100) -> TextBounds:
        """The text side's bounds on "coffee", the probe's cost threshold at 0 (this scope is
        "big"), with a sample of sample_docs facts (full at 100: the scope holds 120)."""
        return TextBounds(
            match_words=8,
            per_word=10,
            sample_docs=sample_docs,
            probe_min_cost=0.0,
            probe_min_postings=min_postings,
        )

    async def matched(min_postings: float, sample_docs: int = 100) -> set[Any]:
        found = await repo.unified_candidates(
            conn, text_probe(subject, "coffee"), text=coffee(min_postings, sample_docs)
        )
        return {c.item_id for c in found.candidates}

    assert await matched(0.0) == newest
    assert await matched(float("inf")) != newest  # the postings' order, without the probe
    # A sample that is not full holds the whole scope (migration 0021): no probe, whatever the
    # thresholds, and no read of the planner's statistics.
    assert await matched(0.0, sample_docs=256) != newest
    # haki_newest_servable_facts is inlined (no function scan of its own), so that on a big scope
    # its ordered index scan stops at the caller's LIMIT instead of reading probe_rows rows.
    plan = await explain(conn, "unified_candidates", **unified_text_side(subject, "coffee", coffee(0.0)))
    functions = [n.get("Function Name") for n in plan_nodes(plan) if n.get("Node Type") == "Function Scan"]
    assert "haki_newest_servable_facts" not in functions, functions


async def test_facts_first_multi_hop_reads_a_common_name_from_the_newest_facts(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str
) -> None:
    """haki_entity_probes (migration 0039) bounds facts_first's multi-hop as linked_facts': a name
    that all 120 facts of a "big" scope carry (the probe's size thresholds at 0) is matched from
    the scope's 10 newest facts; from the postings it would be others (the oldest first), read
    after a bitmap of all 120."""
    subject = "probe-multi-hop"
    for batch in range(3):
        await write_facts(client, key, [f"Zora met friend {batch} {i}" for i in range(39)], subject)
        await write_facts(client, key, [f"Quill waved {batch}"], subject)
    await conn.execute("ANALYZE facts")  # the planner statistics haki_scope_facts_estimate reads
    rows = await conn.fetch(
        "SELECT fact_id, content FROM facts WHERE project_id = $1 AND subject_id = $2 ORDER BY fact_id DESC",
        PROJECT,
        subject,
    )
    zora_order = [r["fact_id"] for r in rows if r["content"].startswith("Zora")]
    weights = PROFILE_WEIGHTS["facts_first"]
    probe = Probe(project_id=PROJECT, subject_id=subject, query="who", embedding=None, weights=weights)

    async def read(entity: str, min_postings: float) -> set[Any]:
        hops = await repo.multi_hop_facts(
            conn,
            probe,
            entities=[entity],
            exclude_ids=[],
            per_entity=10,
            match_limit=10,
            text_probe={"probe_rows": 1000, "probe_min_cost": 0.0, "probe_min_postings": min_postings},
        )
        return {c.item_id for c in hops}

    # Every "Zora" fact ranks alike, so the 10 read are the 10 kept.
    assert await read("Zora", 0.0) == set(zora_order[:10])
    assert await read("Zora", float("inf")) != set(zora_order[:10])  # the postings' order
    quill = {r["fact_id"] for r in rows if r["content"].startswith("Quill")}
    assert await read("Quill", 0.0) == quill  # a rarer name: its 3 facts, none lost


async def test_probe_rule_picks_the_newest_facts_only_where_gin_costs_more(
    conn: asyncpg.Connection,
) -> None:
    """haki_text_probe with the shipped thresholds: a word in 2.2 % of a 1M-fact scope (GIN:
    22,000 postings) is probed, the same word in a 10k scope (220 postings) or with no statistics
    is not, nor a word too rare to find 64 matches within half of TEXT_PROBE_MAX_ROWS."""

    async def probe(share: float, facts: float | None) -> bool:
        picked: bool = await conn.fetchval(
            "SELECT public.haki_text_probe($1, $2, 64, $3, $4, $5)",
            share, facts, TEXT_PROBE_MAX_ROWS, TEXT_PROBE_MIN_COST, TEXT_PROBE_MIN_POSTINGS,
        )  # fmt: skip
        return picked

    assert await probe(0.022, 1_000_000) is True
    assert await probe(0.022, 10_000) is False
    assert await probe(0.5, 10_000) is True  # a speaker's name: 5,000 postings, 128 rows
    assert await probe(0.022, None) is False
    assert await probe(0.01, 10_000_000) is False  # 6,400 rows expected: more than half the cap


async def test_a_scope_smaller_than_its_sample_never_reads_its_size(conn: asyncpg.Connection) -> None:
    """haki_probe_scope_facts (migration 0021): a text sample that holds fewer texts than its
    limit holds every fact of the scope, so no word of it reaches TEXT_PROBE_MIN_POSTINGS and the
    planner's statistics are not read (0.2-0.3 ms of a small scope's call). A full sample still
    reads them when the table is big enough for the word."""
    # The rule is exact only while both samples' limits stay below the probe's postings floor.
    assert max(IDF_SAMPLE_DOCS, ENTITY_SAMPLE_DOCS) < TEXT_PROBE_MIN_POSTINGS
    await conn.execute(
        "INSERT INTO facts (project_id, fact_id, subject_id, content, embedding) "
        "SELECT $1, gen_random_uuid(), 'sized', 'note ' || i, array_fill(0.1::real, ARRAY[384])::vector "
        "FROM generate_series(1, 300) AS i",
        PROJECT,
    )
    await conn.execute("ANALYZE facts")

    async def size(sample_texts: int, sample_limit: int) -> float | None:
        facts: float | None = await conn.fetchval(
            "SELECT public.haki_probe_scope_facts($1, 'sized', 1.0, $2, $3, 64, $4, 0.0, 0.0)",
            PROJECT, sample_texts, sample_limit, TEXT_PROBE_MAX_ROWS,
        )  # fmt: skip
        return facts

    assert await size(256, 256) is not None and await size(256, 256) >= 300  # type: ignore[operator]
    assert await size(255, 256) is None
    assert await size(0, 128) is None


# --- rule 2: events' full-text side -----------------------------------------------------------


async def test_events_text_side_serves_episodes_without_a_query_vector(
    client: httpx.AsyncClient, settings: Settings, conn: asyncpg.Connection, key: str
) -> None:
    subject = "event-text"
    pottery, _ = await write_events(
        client,
        key,
        [("Caroline went to a pottery workshop.", OLD), ("Melanie ran a marathon.", OLD)],
        subject,
    )
    async with make_client(settings, conn, DownEmbedder()) as down:
        packet, trace = await context_and_trace(down, key, "pottery", subject)
        assert (await context(down, key, "pottery", subject, profile="facts_first"))["episodes"] == []
    assert [e["event_id"] for e in packet["episodes"]] == [pottery]
    (d,) = trace["decisions"]
    assert (d["item_type"], d["decision"], d["text_rank"]) == ("episode", "included", 1.0)
    assert d["similarity"] is None and d["recency"] is not None
    assert packet["episodes"][0]["score"] == pytest.approx(
        UNIFIED_WEIGHT_TEXT_RANK + UNIFIED_WEIGHT_RECENCY * d["recency"]
    )


# --- rule 3: one ranking, one budget ----------------------------------------------------------


async def test_shared_budget_packs_facts_and_episodes_by_one_score(
    client: httpx.AsyncClient, key: str
) -> None:
    subject = "shared-budget"
    (fact,) = await fact_ids(client, key, ["Alice likes green tea."], subject)
    event = "Alice pruned the garden roses in March."
    (episode,) = await write_events(client, key, [(event, OLD)], subject)
    query = "When were the garden roses pruned?"
    budget = tokens_of(event)  # room for one of the two
    packet, trace = await context_and_trace(client, key, query, subject, budget_tokens=budget)
    decided = by_item(trace)
    assert decided[episode]["score"] > decided[fact]["score"]
    assert [e["event_id"] for e in packet["episodes"]] == [episode] and packet["facts"] == []
    assert (decided[episode]["rank"], decided[fact]["rank"]) == (1, 2)  # one ranking
    assert decided[fact]["reason_code"] == "over_budget"
    # facts_first packs the fact first and the episode no longer fits.
    ff = await context(client, key, query, subject, budget_tokens=budget, profile="facts_first")
    assert [f["fact_id"] for f in ff["facts"]] == [fact] and ff["episodes"] == []


async def test_shared_budget_no_longer_caps_episodes_at_episode_top_k(
    client: httpx.AsyncClient, key: str
) -> None:
    subject = "many-episodes"
    n = EPISODE_TOP_K + 4
    await write_events(client, key, [(f"Garden visit number {i}.", OLD) for i in range(n)], subject)
    packet = await context(client, key, "garden visit", subject, budget_tokens=10_000)
    assert len(packet["episodes"]) == n
    ff = await context(client, key, "garden visit", subject, budget_tokens=10_000, profile="facts_first")
    assert len(ff["episodes"]) == EPISODE_TOP_K


# --- rule 4: no turn twice --------------------------------------------------------------------


async def test_already_served_excludes_an_event_already_in_the_packet(
    client: httpx.AsyncClient, key: str
) -> None:
    subject = "already-served"
    (event,) = await write_events(client, key, [("Bob adopted a cat named Tom.", OLD)], subject)
    extracted, sibling = await fact_ids(
        client,
        key,
        [
            {"content": "Bob adopted a cat named Tom", "source_event_id": event},
            {"content": "Bob has a cat.", "source_event_id": event},
        ],
        subject,
    )
    packet, trace = await context_and_trace(client, key, "Bob adopted a cat named Tom", subject)
    decided = by_item(trace)
    served = [
        d for d in (decided[event], decided[extracted], decided[sibling]) if d["decision"] == "included"
    ]
    assert len(served) == 1  # one of the three stands for the turn
    repeats = decisions_of(trace, "already_served")
    assert len(repeats) == 2 and all(d["rank"] > served[0]["rank"] for d in repeats)
    assert_packet_matches_trace(packet, trace)
    # facts_first serves the turn as often as it appears.
    ff = await context(client, key, "Bob adopted a cat named Tom", subject, profile="facts_first")
    assert len(ff["facts"]) + len(ff["episodes"]) == 3


async def test_already_served_counts_the_same_text_once(client: httpx.AsyncClient, key: str) -> None:
    subject = "same-text"
    first, again, spaced = await fact_ids(
        client,
        key,
        ["Maya is allergic to peanuts.", "Maya is allergic to peanuts.", "  maya IS allergic\tto peanuts. "],
        subject,
    )
    packet, trace = await context_and_trace(client, key, "peanut allergy", subject)
    assert len(packet["facts"]) == 1
    assert len(decisions_of(trace, "already_served")) == 2
    assert {d["item_id"] for d in trace["decisions"]} == {first, again, spaced}
    ff = await context(client, key, "peanut allergy", subject, profile="facts_first")
    assert len(ff["facts"]) == 3


# --- rule 5: multi-hop inside the one budget --------------------------------------------------


def test_preview_stops_once_full_and_serves_what_the_pack_serves() -> None:
    """preview (what a unified pack would serve, before multi-hop) stops once no item left can
    fit the budget left; it still serves exactly the items a whole pack includes: random lists
    with duplicated ids, shared events and texts, the recall gate and tight budgets."""
    rng = random.Random(20261201)
    stopped_early = 0
    for _ in range(400):
        items = [
            Candidate(
                item_type=rng.choice(["fact", "episode"]),
                item_id=uuid.UUID(int=rng.randrange(10**6)),
                content=rng.choice(["Alice  likes tea", "alice likes TEA", "Bruno"]) + str(rng.randrange(4)),
                tokens=rng.randint(1, 40),
                score=1.0,
                similarity=None,
                text_rank=None,
                recency=None,
                cosine_distance=rng.random(),
                source_event_id=rng.choice([None, uuid.UUID(int=rng.randrange(5))]),
                expansion=rng.random() < 0.1,
            )
            for _ in range(rng.randint(0, 50))
        ]
        items += items[: rng.randint(0, 3)]
        budget, gate = rng.randint(0, 300), rng.choice([0.0, 0.6])
        # Some episodes have a stand-in: another item of the list, or a fact of its own.
        stand_ins = {
            c.item_id: rng.choice(
                [*items, msgspec.structs.replace(c, item_type="fact", tokens=rng.randint(1, 40))]
            )
            for c in items
            if c.item_type == "episode" and rng.random() < 0.3
        }
        decided = outcomes(items, budget, gate, dedupe=True, stand_ins=stand_ins)
        assert preview(items, budget, gate, stand_ins) == [
            o.item for o in decided if o.decision == "included"
        ]
        stopped_early += len(outcomes(items, budget, gate, dedupe=True, until_full=True)) < len(decided)
    assert stopped_early > 100  # the stop is exercised, not only the whole walk


def test_a_linked_fact_is_lifted_by_the_best_kept_item_naming_its_entity_as_a_word() -> None:
    """Unified rule 5 (assembler.lift_linked): a linked fact joins the ranking at the score of the
    best kept item whose words include its entity: "Annabel met Bruno's sister" (0.9) names
    Bruno as a word and holds "Ann" only inside a longer word, so Bruno's fact is lifted to 0.9
    and Ann's to the 0.4 of "Ann and Bruno" (a substring test would have given it 0.9)."""

    def item(content: str, score: float, *, n: int) -> Candidate:
        return Candidate(
            item_type="fact", item_id=uuid.UUID(int=n), content=content, tokens=5, score=score,
            similarity=None, text_rank=None, recency=None, cosine_distance=0.5,
        )  # fmt: skip

    kept = [item("Annabel met Bruno's sister", 0.9, n=1), item("Ann and Bruno", 0.4, n=2)]
    ann, bruno = item("Ann lives in Lyon", 0.2, n=3), item("Bruno lives in Oslo", 0.1, n=4)
    ranked = assembler.lift_linked(kept, [("Ann", ann), ("Bruno", bruno)], kept, 0.0)
    by_id = {c.item_id: c for c in ranked}
    assert (by_id[bruno.item_id].score, by_id[bruno.item_id].expansion) == (0.9, True)
    # Ann is a word only of the 0.4 item: lifted to that, not to Annabel's 0.9.
    assert (by_id[ann.item_id].score, by_id[ann.item_id].expansion) == (0.4, True)
    assert [c.item_id for c in ranked] == [kept[0].item_id, bruno.item_id, kept[1].item_id, ann.item_id]


def test_a_linked_candidate_the_gate_would_leave_out_is_served_as_an_expansion() -> None:
    """Linked facts are never gated (unified rule 5, as facts_first's multi-hop rows): a
    candidate that ranks above the kept item naming its entity, on its own words, but lies past
    the recall floor is served as a `multi_hop_expansion` at its own score. Not linked, or with
    the gate off, it stays an ordinary candidate."""

    def item(content: str, score: float, distance: float, *, n: int) -> Candidate:
        return Candidate(
            item_type="fact", item_id=uuid.UUID(int=n), content=content, tokens=5, score=score,
            similarity=1 - distance, text_rank=None, recency=None, cosine_distance=distance,
        )  # fmt: skip

    kept = item("Alice met Bruno at the office", 0.5, 0.3, n=1)
    far = item("Bruno ordered forty office chairs", 0.7, 0.9, n=2)
    gate = 0.6
    by_id = {c.item_id: c for c in assembler.lift_linked([kept, far], [("Bruno", far)], [kept], gate)}
    assert (by_id[far.item_id].score, by_id[far.item_id].expansion) == (0.7, True)
    decided = {o.item.item_id: o for o in outcomes(list(by_id.values()), 100, gate, dedupe=True)}
    assert (decided[far.item_id].decision, decided[far.item_id].reason_code) == (
        "included",
        "multi_hop_expansion",
    )
    assert not assembler.lift_linked([kept, far], [("Bruno", far)], [kept], 0.0)[0].expansion
    unlinked = assembler.lift_linked([kept, far], [], [kept], gate)
    decided = {o.item.item_id: o for o in outcomes(unlinked, 100, gate, dedupe=True)}
    assert decided[far.item_id].reason_code == "below_relevance_floor"


async def test_multi_hop_under_a_full_budget_serves_linked_facts(client: httpx.AsyncClient, key: str) -> None:
    """The main pack fills the budget, and the entity-linked fact still gets in: it joins the
    ranking before packing (facts_first only expands with budget left, so it cannot)."""
    subject = "multi-hop-full"
    # 70 near matches: more than the vector top-K, so the linked fact is not a candidate. Bruno
    # is named by 2 of the 72 facts: an informative entity.
    fillers = [f"Alice met a client at the Acme office on day {i}." for i in range(70)]
    (linked,) = await fact_ids(client, key, ["Bruno was born in Lyon in 1990."], subject)
    (kept,) = await fact_ids(client, key, ["Alice met Bruno at the Acme office."], subject)
    await write_facts(client, key, fillers, subject)
    query = "Who did Alice meet at the Acme office?"
    budget = 5 * tokens_of(fillers[0])
    packet, trace = await context_and_trace(client, key, query, subject, budget_tokens=budget)
    hops = decisions_of(trace, "multi_hop_expansion")
    assert [d["item_id"] for d in hops] == [linked]
    served = [f["fact_id"] for f in packet["facts"]]
    assert served[:2] == [kept, linked]  # ranked at the score of the fact that names Bruno
    assert hops[0]["score"] == by_item(trace)[kept]["score"] > hops[0]["similarity"]
    assert packet["budget_tokens"] - packet["used_tokens"] < tokens_of(fillers[0])  # the budget is full
    assert_packet_matches_trace(packet, trace)
    ff = await context(client, key, query, subject, budget_tokens=budget, profile="facts_first")
    assert all(f["reason_code"] == "packed" for f in ff["facts"])


# --- rule 7: stand-ins ------------------------------------------------------------------------


def _item(
    kind: str, n: int, tokens: int, score: float, *, event: int | None = None, text: str = ""
) -> Candidate:
    return Candidate(
        item_type="fact" if kind == "fact" else "episode", item_id=uuid.UUID(int=n),
        content=text or f"item {n}", tokens=tokens, score=score, similarity=0.5, text_rank=0.0,
        recency=1.0, cosine_distance=0.5,
        source_event_id=uuid.UUID(int=event) if event is not None else None,
        recorded_from=datetime(2024, 1, 1, tzinfo=UTC), occurred_at=datetime(2024, 1, 1, tzinfo=UTC),
    )  # fmt: skip


def test_a_stand_in_takes_its_episodes_rank_and_score_and_is_decided_once() -> None:
    """An episode about to be served is replaced by the cheaper fact of its turn: the episode is
    traced `replaced_by_stand_in`, the fact `packed` (a served fact's reason is one of the
    contract's two) at the same rank and the episode's score; the fact's own later place is not
    decided again, and the tokens saved serve one more item."""
    episode = _item("episode", 1, 30, 0.9)
    fact = _item("fact", 2, 10, 0.2, event=1)
    other = _item("episode", 3, 25, 0.5)
    items = [episode, other, fact]
    plain = outcomes(items, 40, 0.0, dedupe=True)
    assert [(o.item.item_id, o.reason_code) for o in plain] == [
        (episode.item_id, "packed"), (other.item_id, "over_budget"), (fact.item_id, "already_served"),
    ]  # fmt: skip
    decided = outcomes(items, 40, 0.0, dedupe=True, stand_ins={episode.item_id: fact})
    assert [(o.item.item_id, o.reason_code, o.rank) for o in decided] == [
        (episode.item_id, "replaced_by_stand_in", 1),
        (fact.item_id, "packed", 1),
        (other.item_id, "packed", 2),
    ]
    served = decided[1].item
    assert (served.score, served.similarity, served.tokens, served.stands_in) == (0.9, 0.5, 10, True)
    packed = pack(items, 40, 0.0, dedupe=True, stand_ins={episode.item_id: fact})
    assert [f.reason_code for f in packed.facts] == ["packed"] and packed.used_tokens == 35


def test_a_stand_in_is_used_only_when_cheaper_fitting_and_new() -> None:
    """No stand-in that costs as much as its episode, that does not fit what is left (the
    episode is then decided as itself), that was decided before, or whose text is served."""
    episode = _item("episode", 1, 20, 0.9)

    def reasons(stand_in: Candidate, budget: int, before: Sequence[Candidate] = ()) -> list[str]:
        decided = outcomes(
            [*before, episode], budget, 0.0, dedupe=True, stand_ins={episode.item_id: stand_in}
        )
        return [o.reason_code for o in decided[len(before) :]]

    assert reasons(_item("fact", 2, 20, 0.1, event=1), 100) == ["packed"]
    assert reasons(_item("fact", 2, 5, 0.1, event=1), 4) == ["over_budget"]
    assert reasons(_item("fact", 2, 5, 0.1, event=1), 10) == ["replaced_by_stand_in", "packed"]
    gated = _item("fact", 2, 5, 0.95, event=1)
    assert outcomes([gated, episode], 100, 0.4, dedupe=True, stand_ins={episode.item_id: gated})[
        0
    ].reason_code == ("below_relevance_floor")
    assert reasons(
        _item("fact", 2, 5, 0.1, event=1, text="Same text"),
        100,
        [_item("fact", 9, 5, 0.95, text="same  TEXT")],
    ) == ["packed"]


async def test_stand_ins_serve_a_turn_through_its_cheapest_servable_fact(
    client: httpx.AsyncClient, key: str
) -> None:
    """End to end: the turn that matches the query is served as its cheapest servable fact, at
    its score; a retracted or conflicting fact of the turn never stands in; inspect shows both
    decisions at one rank; facts_first has no stand-ins."""
    subject = "stand-ins"
    turn = "Melanie: I went swimming with the kids at the lake near Oslo yesterday afternoon, so much fun!"
    (event,) = await write_events(client, key, [(turn, OLD)], subject)
    cheapest, longer, retracted = await fact_ids(
        client,
        key,
        [
            {"content": "Melanie swims with her kids.", "source_event_id": event},
            {"content": "Melanie took her children to a lake near Oslo.", "source_event_id": event},
            {"content": "Melanie swims.", "source_event_id": event},
        ],
        subject,
    )
    gone = await client.patch(f"/v1/facts/{retracted}", json={"status": "retracted"}, headers=bearer(key))
    assert gone.status_code == 200, gone.text
    query = "swimming with the kids at the lake near Oslo yesterday afternoon"
    packet, trace = await context_and_trace(client, key, query, subject)
    decided = by_item(trace)
    assert packet["episodes"] == []
    assert packet["facts"][0]["fact_id"] == cheapest and packet["facts"][0]["reason_code"] == "packed"
    replaced, stand_in = decided[event], decided[cheapest]
    assert (replaced["decision"], replaced["reason_code"]) == ("excluded", "replaced_by_stand_in")
    assert (stand_in["decision"], stand_in["reason_code"]) == ("included", "packed")
    assert stand_in["rank"] == replaced["rank"] == 1
    assert stand_in["score"] == replaced["score"] > stand_in["similarity"] * UNIFIED_WEIGHT_SIMILARITY
    assert decided[longer]["reason_code"] == "already_served" and retracted not in decided
    assert_packet_matches_trace(packet, trace)
    ff = await context(client, key, query, subject, profile="facts_first")
    assert {f["reason_code"] for f in ff["facts"]} == {"packed"} and ff["episodes"]


# --- both profiles: bounded multi-hop reads ---------------------------------------------------


@pytest.mark.parametrize("text_query", ["websearch", "words"])
async def test_bounded_multi_hop_reads_per_entity(
    conn: asyncpg.Connection, client: httpx.AsyncClient, key: str, text_query: str
) -> None:
    """A name carried by 200 facts costs at most match_limit reads an entity: with a limit of 7,
    no step of the statement reads more facts than that (without the bound, 200)."""
    subject = "hop-bounded"
    await write_facts(client, key, [f"Bruno visited place {i}." for i in range(200)], subject)
    plan = await explain(
        conn,
        "multi_hop_facts",
        project_id=PROJECT,
        subject_id=subject,
        entities=["Bruno"],
        exclude_ids=[],
        per_entity=5,
        match_limit=7,
        entity_sample_docs=ENTITY_SAMPLE_DOCS,
        **repo.TEXT_PROBE,
        query_embedding=None,
        query_text="Who is Bruno?",
        text_query=text_query,
        w_similarity=UNIFIED_WEIGHT_SIMILARITY,
        w_text_rank=UNIFIED_WEIGHT_TEXT_RANK,
        w_recency=UNIFIED_WEIGHT_RECENCY,
        tau_seconds=30 * 86400.0,
    )
    reads = [n for n in plan_nodes(plan) if n.get("Relation Name") == "facts"]
    # The match step (the GIN postings of facts) reads at most 7; the entity sample of the
    # probe (migration 0039) its ENTITY_SAMPLE_DOCS newest facts; nothing reads all 200.
    matches = [n["Actual Rows"] for n in reads if n.get("Node Type") == "Bitmap Heap Scan"]
    assert matches and max(matches) <= 7, matches
    assert max(n["Actual Rows"] for n in reads) <= ENTITY_SAMPLE_DOCS < 200, reads
    assert MULTI_HOP_MAX_MATCHES_PER_ENTITY <= 256


# --- EXPLAIN helpers (test SQL lives with its tests) ------------------------------------------


async def explain(conn: asyncpg.Connection, name: str, **params: Any) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, FORMAT JSON) of a named query with these parameters, in a savepoint."""
    q = load_queries()
    sql = getattr(q, name).sql
    params = {"as_of": None, **params}  # a call at the current instant (migration 0012)
    args = [params[p] for p in parameter_order(q, name)]
    async with conn.transaction():
        raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
    plan: dict[str, Any] = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    return plan


def text_probe(subject: str, query_text: str) -> Probe:
    """A unified call on its text side alone: no query vector, so nothing is walked."""
    weights = (UNIFIED_WEIGHT_SIMILARITY, UNIFIED_WEIGHT_TEXT_RANK, UNIFIED_WEIGHT_RECENCY)
    return Probe(project_id=PROJECT, subject_id=subject, query=query_text, embedding=None, weights=weights)


def unified_text_side(subject: str, query_text: str, text: TextBounds) -> dict[str, Any]:
    """unified_candidates' parameters for its text side alone, with the bounds the test sets."""
    return repo.unified_candidates_args(text_probe(subject, query_text), text=text)


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)
