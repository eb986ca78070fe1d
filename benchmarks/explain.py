"""EXPLAIN (ANALYZE, BUFFERS) of every statement of a context call, on the benchmark world.

    .venv/bin/python -m benchmarks.explain                 # seeds the world of the latency benchmark
    .venv/bin/python -m benchmarks.explain --markdown plans.md
    .venv/bin/python -m benchmarks.explain --only unified_candidates   # titles containing it

The statements are the named queries themselves (queries/context.sql), PREPAREd and EXPLAINed
server-side by pg_temp.bench_explain (benchmarks/sql/bench.sql), inside a transaction configured by
open_context_call exactly as the assembler configures it: every statement gets the generic
plan it runs under. Each statement runs twice and the second run is shown (warm buffers, as in a
serving process).

The walks (migration 0017) are SQL functions that the candidate statements and
episode_candidates call: EXPLAIN of those statements shows a Function Scan, so each walk is also
shown as the statement its body is, under its own settings (explain_function).

Both profiles (docs/spec/context-profiles.md): `facts_first` runs episode_candidates and
fact_candidates (the walk of its facts inside); `unified` runs unified_candidates (the walks of
facts and events inside), then linked_facts (its multi-hop inside the budget) where `facts_first` runs
multi_hop_facts; both write insert_context_trace.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgvector import Vector

from benchmarks.seed import load, queries
from benchmarks.sql import load_bench_queries
from benchmarks.trace_usage import call
from benchmarks.world import PROJECT, SMALL, TARGET, WORLD
from service.constants import (
    CANDIDATE_LIMIT,
    ENTITY_SAMPLE_DOCS,
    EPISODE_TOP_K,
    EXACT_SCAN_MIN_FACTS,
    IDF_SAMPLE_DOCS,
    MULTI_HOP_MAX_ENTITIES,
    MULTI_HOP_MAX_MATCHES_PER_ENTITY,
    MULTI_HOP_MAX_PER_ENTITY,
    RECENCY_TAU_SECONDS,
    RETRIEVAL_TOP_K,
    TEXT_MATCH_MAX_WORDS,
    TEXT_MATCHES_PER_WORD,
    TEXT_PROBE_MAX_ROWS,
    TEXT_PROBE_MIN_COST,
    TEXT_PROBE_MIN_POSTINGS,
    TEXT_QUERY_MAX_WORDS,
    WEIGHT_RECENCY,
    WEIGHT_SIMILARITY,
    WEIGHT_TEXT_RANK,
)
from service.context import assembler
from service.context.call import PROFILE_WEIGHTS
from service.context.model import Probe
from service.db import connect, init_connection
from service.db.embedded import embedded_url, release_embedded_server
from service.db.migrations import migrate
from service.db.sql import load_queries
from service.ids import uuid7
from service.repository import context as repo
from service.settings import Settings
from service.structs import Decision
from tests.helpers.sql import parameter_order

VECTOR_LITERAL = re.compile(r"'\[[-0-9.e,]+\]'(::vector)?")


def as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, Vector):
        return str(value.to_text())
    if isinstance(value, list):
        return "{" + ",".join(str(v) for v in value) + "}"
    return str(value)


async def explain(conn: Any, name: str, params: dict[str, Any]) -> str:
    b = load_bench_queries()
    # A production statement, or the benchmarks' own baseline (bench_score_all_facts).
    q = load_queries() if name in load_queries().available_queries else b
    order = parameter_order(q, name)

    def args() -> list[str | None]:
        # EXPLAIN ANALYZE does insert: a new trace each run.
        fresh = {**params, "trace_id": uuid7()} if "trace_id" in params else params
        return [as_text(fresh[p]) for p in order]

    return await _explained(conn, getattr(q, name).sql, args, [])


async def explain_function(conn: Any, function: str, args: list[Any], branch: int | None = None) -> str:
    """A SQL function of the migrations EXPLAINed as the statement its body is (EXPLAIN of a
    call shows one Function Scan): its parameters become $1..$n cast to their types, and its SET
    clauses are applied to the transaction, as they are while it runs. `branch`: the function is
    a graph walk (PL/pgSQL, migration 0022), and the statement is its branch for that bucket."""
    src = await load_bench_queries().bench_function_source(conn, function_name=function)
    body = str(src["body"])
    if branch is not None:
        found = re.search(rf"WHEN {branch} THEN\s+RETURN QUERY\s+(.*?);", body, re.S)
        if found is None:
            raise LookupError(f"{function} has no branch for bucket {branch}")
        body = found.group(1)
    for i, (arg, type_name) in enumerate(zip(src["arg_names"], src["arg_types"], strict=True), start=1):
        # The parameter, not a column or function of the same name (w.top_k, top_k(...)).
        body = re.sub(rf"(?<![.\w]){arg}\b(?!\s*\()", f"(${i}::{type_name})", body)
    return await _explained(conn, body, lambda: [as_text(a) for a in args], list(src["settings"]))


async def _explained(
    conn: Any, statement: str, args: Callable[[], list[str | None]], settings: list[str]
) -> str:
    b = load_bench_queries()
    for _ in range(2):  # the second run is reported: the pages it reads are warm, as in service
        async with conn.transaction():
            await assembler.open_context_call(conn)
            if settings:
                await b.bench_apply_settings(conn, settings=settings)
            lines = [r["line"] async for r in b.bench_explain(conn, statement=statement, args=args())]
    return VECTOR_LITERAL.sub("'[...384 floats...]'", "\n".join(lines))


async def plans(conn: Any) -> list[tuple[str, str]]:
    pool = queries(300)
    keyword = next(x for x in pool if " " not in x.text)  # a one-word query: the GIN side matches
    question = pool[0]
    common = {
        "project_id": PROJECT,
        "top_k": RETRIEVAL_TOP_K,
        "candidate_limit": CANDIDATE_LIMIT,
        "exact_scan_min": EXACT_SCAN_MIN_FACTS,
        "w_similarity": WEIGHT_SIMILARITY,
        "w_text_rank": WEIGHT_TEXT_RANK,
        "w_recency": WEIGHT_RECENCY,
        "tau_seconds": RECENCY_TAU_SECONDS,
        # unified_candidates' bounds, as repository.unified_candidates passes them
        "max_words": TEXT_QUERY_MAX_WORDS,
        "match_words": TEXT_MATCH_MAX_WORDS,
        "text_per_word": TEXT_MATCHES_PER_WORD,
        "event_text_per_word": TEXT_MATCHES_PER_WORD,
        "idf_sample_docs": IDF_SAMPLE_DOCS,
        "probe_rows": TEXT_PROBE_MAX_ROWS,
        "probe_min_cost": TEXT_PROBE_MIN_COST,
        "probe_min_postings": TEXT_PROBE_MIN_POSTINGS,
        "entity_sample_docs": ENTITY_SAMPLE_DOCS,
        "text_config": "english",  # the default of Settings.text_search_config
        "as_of": None,  # a call at the current instant (migration 0012)
    }
    out: list[tuple[str, str]] = []

    def cand(subject: str, query: Any, *, unified: bool = False) -> dict[str, Any]:
        return {
            **common,
            "subject_id": subject,
            "query_embedding": Vector(query.vector),
            "query_text": query.text,
            # facts_first walks no events (its episodes come from episode_candidates)
            "event_top_k": RETRIEVAL_TOP_K if unified else 0,
        }

    # The 10k scope is too big for an exact scan: its walks run their bucket's graph walk.
    target_bucket = await load_bench_queries().bench_scope_bucket(conn, project_id=PROJECT, subject_id=TARGET)
    for subject, label in ((TARGET, "10k scope of 106k facts"), (SMALL, "1k scope (0.9 % of the table)")):
        open_members = await load_bench_queries().bench_open_conflict_facts(
            conn, project_id=PROJECT, subject_id=subject
        )
        out.append(
            (
                f"haki_fact_walk (inside fact_candidates and unified_candidates), {label}, "
                f"query {question.text!r}",
                await explain_function(
                    conn,
                    "haki_fact_walk",
                    [
                        PROJECT,
                        subject,
                        Vector(question.vector),
                        RETRIEVAL_TOP_K,
                        EXACT_SCAN_MIN_FACTS,
                        None,
                        open_members,
                    ],
                ),
            )
        )
        if subject == TARGET:
            out.append(
                (
                    f"haki_fact_graph_walk (inside haki_fact_walk), its branch for the {label}",
                    await explain_function(
                        conn,
                        "haki_fact_graph_walk",
                        [PROJECT, subject, Vector(question.vector), RETRIEVAL_TOP_K, None, open_members],
                        branch=target_bucket,
                    ),
                )
            )
        out.append(
            (
                f"fact_candidates (facts_first), {label}, query {question.text!r}",
                await explain(conn, "fact_candidates", cand(subject, question)),
            )
        )
        out.append(
            (
                f"unified_candidates (unified), {label}, query {question.text!r}",
                await explain(conn, "unified_candidates", cand(subject, question, unified=True)),
            )
        )
    out.append(
        (
            f"fact_candidates (facts_first), 10k scope, one-word query {keyword.text!r} "
            "(the GIN side matches)",
            await explain(conn, "fact_candidates", cand(TARGET, keyword)),
        )
    )
    out.append(
        (
            f"unified_candidates (unified), 10k scope, one-word query {keyword.text!r}",
            await explain(conn, "unified_candidates", cand(TARGET, keyword, unified=True)),
        )
    )
    # Each profile's candidates for the question: facts_first's facts are what multi_hop_facts
    # excludes; unified_candidates hands linked_facts the query's words with their idf, and the
    # open-conflict facts.
    async with conn.transaction():
        await assembler.open_context_call(conn)
        candidates = {
            profile: await retrieve(
                conn,
                Probe(
                    project_id=PROJECT,
                    subject_id=TARGET,
                    embedding=question.vector,
                    query=question.text,
                    weights=PROFILE_WEIGHTS[profile],
                ),
            )
            for profile, retrieve in assembler.RETRIEVERS.items()
        }
    retrieved, unified = candidates["facts_first"], candidates["unified"]
    idf = unified.idf
    open_member_ids = [b.fact_id for b in unified.blocked if b.reason_code == "conflict_open"]
    exclude = [c.item_id for c in retrieved.facts]
    entities = {
        "entities": ["Alice", "Bruno"],
        "per_entity": MULTI_HOP_MAX_PER_ENTITY,
        "match_limit": MULTI_HOP_MAX_MATCHES_PER_ENTITY,
        "max_entities": MULTI_HOP_MAX_ENTITIES,
    }
    out.append(
        (
            "multi_hop_facts (facts_first), 10k scope, entities ['Alice', 'Bruno']",
            await explain(
                conn, "multi_hop_facts", {**cand(TARGET, question), **entities, "exclude_ids": exclude}
            ),
        )
    )
    out.append(
        (
            "linked_facts (unified), 10k scope, entities ['Alice', 'Bruno']",
            await explain(
                conn,
                "linked_facts",
                {
                    **cand(TARGET, question),
                    **entities,
                    "words": list(idf),
                    "idfs": list(idf.values()),
                    "open_member_ids": open_member_ids,
                },
            ),
        )
    )
    # Each profile's event walk of the 10k scope (1,000 of its events among 5,600), then the branch
    # of its graph walk for that scope: `facts_first`'s own vectors; `unified`'s vectors in context
    # (rule 8), the own vectors' graph gated off while none is pending (migration 0037).
    scope_query = [PROJECT, TARGET, Vector(question.vector), EPISODE_TOP_K]
    for walk, graph_walk, caller in (
        ("haki_event_walk", "haki_event_graph_walk", "episode_candidates"),
        ("haki_event_context_walk", "haki_event_context_graph_walk", "unified_candidates"),
    ):
        plan = await explain_function(conn, walk, [*scope_query, EXACT_SCAN_MIN_FACTS, None])
        out.append((f"{walk} (inside {caller}), 10k scope", plan))
        plan = await explain_function(conn, graph_walk, [*scope_query, None], branch=target_bucket)
        out.append((f"{graph_walk} (inside {walk}), its branch for the 10k scope", plan))
    out.append(
        (
            "episode_candidates (facts_first), 10k scope (1,000 of its events among 5,600)",
            await explain(
                conn,
                "episode_candidates",
                {
                    "project_id": PROJECT,
                    "subject_id": TARGET,
                    "query_embedding": Vector(question.vector),
                    "top_k": EPISODE_TOP_K,
                    "exact_scan_min": EXACT_SCAN_MIN_FACTS,
                    "as_of": None,
                },
            ),
        )
    )
    decisions = [
        Decision(
            item_type="fact",
            item_id=uuid.uuid4(),
            decision="included",
            reason_code="packed",
            rank=i + 1,
            score=0.5,
            similarity=0.6,
            text_rank=0.0,
            recency=0.4,
            cosine_distance=0.4,
            tokens=12,
        )
        for i in range(256)
    ]
    traced = call(None)  # what a `unified` call's trace records besides its decisions
    out.append(
        (
            "insert_context_trace, 256 decisions",
            await explain(
                conn,
                "insert_context_trace",
                {
                    "project_id": PROJECT,
                    "trace_id": uuid7(),
                    "subject_id": TARGET,
                    "query": question.text,
                    "profile": "unified",
                    "budget_tokens": 900,
                    "used_tokens": 768,
                    "status": "ok",
                    "warnings": [],
                    "empty_reason": None,
                    "facts_served": 64,
                    "episodes_served": 0,
                    "include_episodes": True,
                    "recall_max_distance": traced.recall_max_distance,
                    "text_search_config": traced.text_search_config,
                    "weights": list(traced.weights),
                    "as_of": None,
                    "replay_of": None,
                    **repo.trace_columns(decisions, await repo.trace_codes(conn)),
                },
            ),
        )
    )
    out.append(
        (
            "bench_score_all_facts (the baseline), 10k scope",
            await explain(conn, "bench_score_all_facts", cand(TARGET, question)),
        )
    )
    return out


async def run(data_dir: Path | None) -> list[tuple[str, str]]:
    own = data_dir is None
    base = Path(tempfile.mkdtemp(prefix="haki-explain-")) if own else data_dir
    assert base is not None
    try:
        settings = Settings(data_dir=base, embed_provider="hash", database_url=embedded_url(base))
        conn = await connect(settings)
        await migrate(conn)
        await init_connection(conn)
        if own:
            await load(conn, PROJECT, WORLD, log=lambda m: print(m, file=sys.stderr))
            await conn.close()
            conn = await connect(settings)
            await init_connection(conn)
        await load_bench_queries().bench_define_explain(conn)
        # Warm the buffers as a serving process would have them (both profiles' statements).
        for query in queries(300)[:50]:
            for profile, retrieve in assembler.RETRIEVERS.items():
                probe = Probe(
                    project_id=PROJECT,
                    subject_id=TARGET,
                    query=query.text,
                    embedding=query.vector,
                    weights=PROFILE_WEIGHTS[profile],
                )
                async with conn.transaction():
                    await assembler.open_context_call(conn)
                    await retrieve(conn, probe)
        result = await plans(conn)
        await conn.close()
        return result
    finally:
        if own:
            release_embedded_server(base)
            shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=None, help="an already seeded world (default: seed one)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the plans here")
    p.add_argument("--only", default=None, help="only the plans whose title contains this text")
    args = p.parse_args(argv)
    result = [(t, plan) for t, plan in asyncio.run(run(args.data_dir)) if not args.only or args.only in t]
    text = "\n\n".join(f"#### {title}\n\n```text\n{plan}\n```" for title, plan in result)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
