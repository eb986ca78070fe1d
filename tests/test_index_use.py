"""The two candidate phases use their indexes: HNSW for the vector top-K, GIN for the text top-K.

Proved by the index scans the statement starts in the current transaction
(pg_stat_get_xact_numscans), on a table large enough that the planner has a real choice.
"""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from service.api.auth import Principal
from service.constants import EPISODE_TOP_K, EXACT_SCAN_MIN_FACTS, MULTI_HOP_MAX_PER_ENTITY, RETRIEVAL_TOP_K
from service.context import assembler
from service.context.model import Probe
from service.memory import erasure
from service.repository import context as repo
from tests.helpers import PROJECT
from tests.helpers.seeding import WEIGHTS, random_unit_vector, seed_scopes
from tests.helpers.sql import load_test_queries

pytestmark = pytest.mark.slow

GIN_INDEX = "facts_scoped_search_gin"


def random_probe(subject_id: str, seed: int, query: str) -> Probe:
    """A probe of the project's `subject_id` with `query` and the random unit vector of `seed`."""
    return Probe(
        project_id=PROJECT,
        subject_id=subject_id,
        embedding=random_unit_vector(seed),
        query=query,
        weights=WEIGHTS,
    )


async def test_candidate_phases_pick_the_hnsw_and_gin_indexes(conn: asyncpg.Connection) -> None:
    t = load_test_queries()
    await seed_scopes(
        conn,
        {
            "idx-a": (10_000, "alpha seeded fact"),
            "idx-b": (10_000, "bravo seeded fact"),
            "idx-c": (10_000, "charlie seeded fact"),
        },
    )
    # One partial HNSW index per scope bucket (migration 0008): the one of idx-b's bucket.
    hnsw_index = await t.test_fact_vector_index(conn, project_id=PROJECT, subject_id="idx-b")
    async with conn.transaction():
        await assembler.open_context_call(conn)
        hnsw_before = await t.test_index_scans(conn, index_name=hnsw_index)
        gin_before = await t.test_index_scans(conn, index_name=GIN_INDEX)
        # The seeded contents end with their row number: "4242" names a handful of facts.
        retrieved = await assembler.retrieve_facts_first(
            conn,
            random_probe("idx-b", 7, "4242"),
        )
        hnsw_scans = await t.test_index_scans(conn, index_name=hnsw_index) - hnsw_before
        gin_scans = await t.test_index_scans(conn, index_name=GIN_INDEX) - gin_before
    assert hnsw_scans >= 1, "the vector top-K did not walk the HNSW index"
    assert gin_scans >= 1, "the full-text top-K did not use the GIN index"
    texts = [r for r in retrieved.candidates if r.text_rank]
    assert texts, "the full-text side found nothing"
    assert all("4242" in r.content.split() for r in texts)


async def test_generic_plans_never_scan_the_whole_table(conn: asyncpg.Connection) -> None:
    """A context call runs under generic plans (open_context_call), built once
    per connection without the scope's size. In a table one large scope dominates, a generic
    plan that guessed from the average scope once hashed a sequential scan of every fact: for a
    tiny scope, whose right plan is a few index probes, that is a whole-table read per call.
    Neither a tiny scope nor the large one may start a sequential scan of facts."""
    t = load_test_queries()
    await seed_scopes(conn, {"big": (10_000, "big seeded fact")})
    # A subject that appeared after the last ANALYZE: the statistics know one scope, all of facts.
    await t.test_seed_random_facts(
        conn, project_id=PROJECT, subject_id="tiny", n=30, content_prefix="tiny seeded fact"
    )
    before = await t.test_index_scans(conn, index_name="facts")  # sequential scans of the table
    # Both profiles' statements, two calls of each in turn.
    for call in range(16):  # past the five custom plans after which PostgreSQL may go generic
        subject_id = "tiny" if call % 2 else "big"
        async with conn.transaction():
            await assembler.open_context_call(conn)
            retrieve = assembler.RETRIEVERS["facts_first" if call % 4 < 2 else "unified"]
            probe = random_probe(subject_id, call, "seeded fact 42")
            retrieved = await retrieve(conn, probe)
            # Multi-hop under the same generic plans: facts_first on a word every fact of the
            # scope holds; unified drops that one (named by more than half of the scope) and
            # expands the next, which one fact of each scope names.
            if call % 4 < 2:
                hops = await repo.multi_hop_facts(conn, probe, entities=["seeded"], exclude_ids=[])
            else:
                # linked_facts reads no query text: the call's own probe.
                linked = await repo.linked_facts(
                    conn, probe, entities=["seeded", "7"], idf=retrieved.idf, open_members=[]
                )
                assert {entity for entity, _ in linked} == {"7"}
                hops = [fact for _, fact in linked] * MULTI_HOP_MAX_PER_ENTITY
        candidates = retrieved.candidates
        assert len(hops) == MULTI_HOP_MAX_PER_ENTITY
        if subject_id == "tiny":
            assert len(candidates) == 30 and all(r.content.startswith("tiny") for r in candidates)
        else:
            assert len(candidates) >= RETRIEVAL_TOP_K
    assert await t.test_index_scans(conn, index_name="facts") == before, "a sequential scan of facts"


@pytest.mark.parametrize("statistics", ["every subject tiny", "one subject"])
async def test_walks_keep_their_plan_whatever_the_statistics(
    conn: asyncpg.Connection, statistics: str
) -> None:
    """Migration 0017: the vector walks run one generic plan for every scope, and choose between
    an exact scan and their bucket's graph when they run. Under statistics that guess every
    scope tiny (where a plan picked by estimates sorts all of a big scope's facts) or every scope
    the whole table (where it reads the whole table for a small one), a big scope still walks its
    bucket's graphs, a small one is still read through its own index, and neither starts a
    sequential scan. Facts and events alike, through the walks and the statement of the episodes."""
    t = load_test_queries()
    await seed_scopes(conn, {"walk-big": (2_000, "big seeded fact"), "walk-small": (30, "small seeded fact")})
    for subject_id, n in (("walk-big", 1_500), ("walk-small", 20)):
        await t.test_seed_random_events(
            conn, project_id=PROJECT, subject_id=subject_id, n=n, content_prefix="seeded event"
        )
    if statistics == "every subject tiny":
        await t.test_pretend_every_subject_tiny(conn)
    else:
        await t.test_pretend_one_subject(conn)
    fact_graph = await t.test_fact_vector_index(conn, project_id=PROJECT, subject_id="walk-big")
    event_graph = await t.test_event_vector_index(conn, project_id=PROJECT, subject_id="walk-big")
    watched = [fact_graph, event_graph, "facts", "events"]  # a table's scans are sequential ones
    scopes = (("walk-big", 2_000, 1_500), ("walk-small", 30, 20))
    for call, (subject_id, facts, events) in enumerate(scopes * 2):
        probe = random_probe(subject_id, call, "seeded")
        async with conn.transaction():
            await assembler.open_context_call(conn)
            await t.test_track_pl_functions(conn)
            before = {name: await t.test_index_scans(conn, index_name=name) for name in watched}
            graph_walks_before = [
                await t.test_function_calls(conn, function_name=f"haki_{kind}_graph_walk")
                for kind in ("fact", "event")
            ]
            walked = await t.test_vector_walks(
                conn,
                project_id=PROJECT,
                subject_id=subject_id,
                query_embedding=probe.embedding,
                top_k=RETRIEVAL_TOP_K,
                exact_scan_min=EXACT_SCAN_MIN_FACTS,
            )
            episodes = await repo.episode_candidates(conn, probe, top_k=EPISODE_TOP_K)
            scans = {name: await t.test_index_scans(conn, index_name=name) - before[name] for name in watched}
            graph_walks = [
                await t.test_function_calls(conn, function_name=f"haki_{kind}_graph_walk") - calls
                for kind, calls in zip(("fact", "event"), graph_walks_before, strict=True)
            ]
        assert walked is not None
        assert walked["facts"] == min(facts, RETRIEVAL_TOP_K)
        assert walked["events"] == min(events, RETRIEVAL_TOP_K)
        assert len(episodes) == min(events, EPISODE_TOP_K)
        assert scans["facts"] == scans["events"] == 0, scans
        walks = 1 if subject_id == "walk-big" else 0
        assert (scans[fact_graph], scans[event_graph]) == (walks, 2 * walks), scans
        # Migration 0022: a small scope never enters the graph walk (it stays behind the exact
        # scan's one-time filter); a big one enters it once per walk.
        assert graph_walks == [walks, 2 * walks], graph_walks


async def test_every_bucket_has_a_graph_walk_branch(conn: asyncpg.Connection) -> None:
    """Migration 0022: a graph walk runs the branch of its scope's bucket, and a bucket without one
    raises (its CASE has no ELSE). Every bucket has its branch, for facts and for events: a scope
    of each bucket walks its graph and finds its own rows, and no other scope's. A branch with
    another bucket's constant finds none; the count is not exact, since an HNSW walk may miss a
    row of a graph that the whole suite's rows (dead ones included) fill."""
    t = load_test_queries()
    rows = [r async for r in t.test_subject_per_bucket(conn, project_id=PROJECT)]
    assert [r["bucket"] for r in rows] == list(range(rows[0]["buckets"]))
    subjects = [r["subject_id"] for r in rows]
    for subject_id in subjects:
        await t.test_seed_random_facts(
            conn, project_id=PROJECT, subject_id=subject_id, n=2, content_prefix="bucket fact"
        )
        await t.test_seed_random_events(
            conn, project_id=PROJECT, subject_id=subject_id, n=3, content_prefix="bucket event"
        )
    for i, subject_id in enumerate(subjects):
        async with conn.transaction():
            await assembler.open_context_call(conn)
            walked = await t.test_graph_walks(
                conn, project_id=PROJECT, subject_id=subject_id, query_embedding=random_unit_vector(i)
            )
        assert walked is not None
        assert 1 <= walked["facts"] <= 2 and 1 <= walked["events"] <= 3, (subject_id, dict(walked))


async def test_no_text_index_keeps_a_pending_list(conn: asyncpg.Connection) -> None:
    """Migration 0013: every GIN index of the memory tables has fastupdate off, so no search
    reads an unsorted pending list after bulk writes (docs/performance.md, "Full text under
    writes")."""
    rows = await conn.fetch(
        """
        SELECT c.relname AS index_name, c.reloptions AS options
        FROM pg_catalog.pg_index AS i
        JOIN pg_catalog.pg_class AS c ON c.oid = i.indexrelid
        JOIN pg_catalog.pg_am AS am ON am.oid = c.relam
        WHERE am.amname = 'gin' AND i.indrelid IN ('facts'::regclass, 'events'::regclass)
        ORDER BY 1
        """
    )
    assert {r["index_name"] for r in rows} >= {
        "facts_scoped_search_gin",
        "facts_scoped_english_gin",
        "events_scoped_search_gin",
        "events_scoped_english_gin",
    }
    for r in rows:
        assert "fastupdate=off" in (r["options"] or []), r["index_name"]


async def test_a_page_of_subjects_reads_the_page_not_the_project(conn: asyncpg.Connection) -> None:
    """GET /v1/subjects grouped every row of the project after its cursor for each page: 63 ms
    for a page of 3 at 106k facts, and more with every fact. A page now reads its subjects' rows
    and one index descent per subject."""
    t = load_test_queries()
    await seed_scopes(conn, {"zz-big": (5_000, "big seeded fact")})
    for i in range(12):
        await t.test_seed_random_facts(
            conn, project_id=PROJECT, subject_id=f"s{i:02}", n=3, content_prefix="small"
        )
    principal = Principal(project_id=PROJECT, key_id=uuid.uuid4())
    before = await t.test_rows_read(conn, table_name="facts")
    page = await erasure.list_subjects(conn, principal, PROJECT, 5, None)
    read = await t.test_rows_read(conn, table_name="facts") - before
    assert [(s.subject_id, s.facts) for s in page.subjects] == [(f"s{i:02}", 3) for i in range(5)]
    assert page.next_cursor is not None
    assert read < 100, f"{read} rows of facts read for a page of 5 subjects of 3 facts"


async def test_stand_ins_are_read_through_their_index(conn: asyncpg.Connection) -> None:
    """Unified rule 7: the episode candidates' stand-ins are looked up through facts_source_event
    (one probe per episode) under the call's generic plan, never by a scan of the scope's facts."""
    t = load_test_queries()
    await seed_scopes(conn, {"stand-big": (2_000, "seeded fact")})
    await t.test_seed_random_events(
        conn, project_id=PROJECT, subject_id="stand-big", n=1_500, content_prefix="seeded event"
    )
    before = await t.test_index_scans(conn, index_name="facts")
    for call in range(8):
        async with conn.transaction():
            await assembler.open_context_call(conn)
            retrieved = await assembler.retrieve_unified(
                conn, random_probe("stand-big", call, "seeded event 42")
            )
        assert any(c.item_type == "episode" for c in retrieved.candidates)
        assert retrieved.stand_ins == {}  # no seeded fact names an event
    assert await t.test_index_scans(conn, index_name="facts_source_event") >= 8, (
        "stand-ins without their index"
    )
    assert await t.test_index_scans(conn, index_name="facts") == before, "a sequential scan of facts"
