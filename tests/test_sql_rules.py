"""The spec's rules are written once in SQL (issue 17), as inlinable functions of the migrations,
and every statement calls them.

1. Each rule function inlines: a statement that calls it plans as the copy it replaces (no
   function call left in the plan, so the planner sees the columns and indexes the copy showed it).
2. No statement of queries/, tests/sql/ or benchmarks/sql/ spells a rule out again, unless it
   names the exception in a comment (`-- Keeps a copy of <rule>: <why>`).
3. No `--` comment of those files holds a `:word`: aiosql reads it as a parameter (a name the
   statement does not declare fails the load; a declared one is silently counted).
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from tests.helpers.sql import SQL_FOLDERS, Statement, all_statements

# A rule function and a statement that calls it on columns (constant arguments would fold the
# call whether or not it inlines). Set-returning functions are read in FROM.
INLINED: dict[str, str] = {
    "haki_text_rank": "SELECT public.haki_text_rank(f.search_vector, websearch_to_tsquery('simple', f.key)) "
    "FROM facts AS f",
    "haki_tokens": "SELECT public.haki_tokens(f.content) FROM facts AS f",
    "haki_recency": "SELECT public.haki_recency(f.recorded_from, 60.0, f.valid_to) FROM facts AS f",
    "haki_fact_recency": "SELECT public.haki_fact_recency(f.valid_from, f.recorded_from, 60.0, f.valid_to) "
    "FROM facts AS f",
    "haki_hybrid_score": "SELECT public.haki_hybrid_score(f.stale_after_s, f.stale_after_s, f.stale_after_s, "
    "0.5, 0.3, 0.2) FROM (SELECT extract(epoch FROM stale_after)::float8 AS stale_after_s FROM facts) AS f",
    "haki_fact_servable": "SELECT f.fact_id FROM facts AS f WHERE public.haki_fact_servable(f.status, "
    "f.valid_to, f.volatility, f.valid_from, f.recorded_from, f.stale_after, f.recorded_to, "
    "f.believed_valid_to, f.valid_to)",
    "haki_fact_servable ": "SELECT f.fact_id FROM facts AS f WHERE public.haki_fact_servable(f.status, "
    "f.valid_to, f.volatility, f.valid_from, f.recorded_from, f.stale_after)",
    "haki_fact_stale": "SELECT f.fact_id FROM facts AS f WHERE public.haki_fact_stale(f.volatility, "
    "f.valid_from, f.recorded_from, f.stale_after, f.valid_to)",
    "haki_valid_to_at": "SELECT public.haki_valid_to_at(f.valid_to, f.recorded_to, f.believed_valid_to, "
    "f.valid_from) FROM facts AS f",
    "haki_event_held": "SELECT e.event_id FROM events AS e WHERE public.haki_event_held(e.occurred_at, "
    "e.recorded_at, e.occurred_at)",
    "haki_text_vector": "SELECT public.haki_text_vector(f.key::regconfig, f.search_vector, "
    "f.search_vector_english) FROM facts AS f",
    "haki_fact_rows": "SELECT r.fact_id FROM public.haki_fact_rows('p') AS r WHERE r.subject_id = 's'",
    "haki_open_conflict_members": "SELECT f.fact_id FROM facts AS f WHERE NOT EXISTS "
    "(SELECT 1 FROM public.haki_open_conflict_members(f.project_id) AS o WHERE o.fact_id = f.fact_id)",
    "haki_fact_postings": "SELECT p.fact_id FROM facts AS f CROSS JOIN LATERAL public.haki_fact_postings("
    "f.project_id, f.subject_id, 'simple'::regconfig, plainto_tsquery('simple', f.key), f.valid_to) AS p",
    "haki_event_postings": "SELECT p.event_id FROM events AS e CROSS JOIN LATERAL public.haki_event_postings("
    "e.project_id, e.subject_id, 'english'::regconfig, plainto_tsquery('english', e.content), "
    "e.occurred_at) AS p",
    "haki_event_postings_for": "SELECT p.event_id FROM events AS e CROSS JOIN LATERAL "
    "public.haki_event_postings_for(e.project_id, e.subject_id, e.content::regconfig, "
    "plainto_tsquery('simple', e.content), e.occurred_at) AS p",
}


async def plan_text(conn: asyncpg.Connection, sql: str) -> str:
    rows = await conn.fetch(f"EXPLAIN (VERBOSE, COSTS OFF) {sql}")
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize("function", list(INLINED), ids=str.strip)
async def test_rule_function_inlines(conn: asyncpg.Connection, function: str) -> None:
    plan = await plan_text(conn, INLINED[function])
    assert function.strip() not in plan, f"{function.strip()} is called, not inlined:\n{plan}"


async def test_the_inlining_check_catches_a_function_call(conn: asyncpg.Connection) -> None:
    """A SET clause stops inlining: the same body then shows up as a call in the plan."""
    await conn.execute(
        "CREATE FUNCTION pg_temp.tokens_not_inlined(content text) RETURNS integer "
        "LANGUAGE sql IMMUTABLE SET search_path = public "
        "AS $$ SELECT greatest(1, char_length(content) / 4) $$"
    )
    plan = await plan_text(conn, "SELECT pg_temp.tokens_not_inlined(f.content) FROM facts AS f")
    assert "tokens_not_inlined" in plan


# The postings functions (migration 0016) and the GIN indexes each call must reach: a constant
# configuration folds haki_text_vector to the indexed column, and haki_event_postings_for, whose
# configuration is a parameter in the generic plans of unified_candidates, keep one branch a
# configuration on its own index behind a one-time filter. Each case: a statement, its
# parameters' types and values (a generic plan does not read them), the indexes.
POSTINGS: dict[str, tuple[str, str, str, set[str]]] = {
    "fact simple": (
        "SELECT p.fact_id FROM public.haki_fact_postings($1, $2, 'simple'::regconfig, "
        "plainto_tsquery('simple', $3), NULL) AS p",
        "text, text, text",
        "'p', 's', 'word'",
        {"facts_scoped_search_gin"},
    ),
    "fact english": (
        "SELECT p.fact_id FROM public.haki_fact_postings($1, $2, 'english'::regconfig, "
        "plainto_tsquery('english', $3), NULL) AS p",
        "text, text, text",
        "'p', 's', 'word'",
        {"facts_scoped_english_gin"},
    ),
    "event configured": (
        "SELECT p.event_id FROM public.haki_event_postings_for($1, $2, $4, "
        "plainto_tsquery('simple', $3), NULL) AS p LIMIT 8",
        "text, text, text, regconfig",
        "'p', 's', 'word', 'english'",
        {"events_scoped_search_gin", "events_scoped_english_gin"},
    ),
}


@pytest.mark.parametrize("case", list(POSTINGS))
async def test_postings_read_the_index_of_their_configuration(conn: asyncpg.Connection, case: str) -> None:
    sql, types, values, indexes = POSTINGS[case]
    await conn.execute("SET LOCAL enable_seqscan = off")  # the question is whether an index matches
    await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")  # as the context statements run
    await conn.execute(f"PREPARE postings_plan ({types}) AS {sql}")
    try:
        rows = await conn.fetch(f"EXPLAIN (COSTS OFF) EXECUTE postings_plan ({values})")
    finally:
        await conn.execute("DEALLOCATE postings_plan")  # a prepared statement outlives the transaction
    plan = "\n".join(r[0] for r in rows)
    assert "$1" in plan, f"not a generic plan:\n{plan}"
    assert set(re.findall(r"Bitmap Index Scan on (\w+)", plan)) == indexes, plan
    assert plan.count("One-Time Filter") == (len(indexes) if len(indexes) > 1 else 0), plan


# The rules as statements used to spell them out; each names the function that holds it now.
RULE_COPIES: dict[str, tuple[re.Pattern[str], str]] = {
    "text rank": (re.compile(r"\bts_rank_cd\s*\(", re.I), "haki_text_rank"),
    "token estimate": (re.compile(r"\bchar_length\s*\([^)]*\)\s*/\s*4", re.I), "haki_tokens"),
    "recency": (re.compile(r"\bexp\s*\(", re.I), "haki_recency / haki_fact_recency"),
    "stale volatile": (
        re.compile(r"volatility\s*=\s*'volatile'", re.I),
        "haki_fact_stale / haki_fact_servable",
    ),
    "servable": (
        re.compile(r"status\s*=\s*'active'[^;]*?valid_to\s+IS\s+NULL\s+OR", re.I | re.S),
        "haki_fact_servable",
    ),
    "open conflict": (
        re.compile(r"\bconflict_members\b[^;]*?\bconflict_sets\b[^;]*?status\s*=\s*'open'", re.I | re.S),
        "haki_open_conflict_members / haki_open_conflict_facts",
    ),
    "hybrid score": (re.compile(r":w_similarity\b[^,]*\*", re.I), "haki_hybrid_score"),
}
KEEPS_A_COPY = re.compile(r"--\s*Keeps a copy of (?P<rule>[\w ]+?):\s*\S")


def rule_copies(query: Statement) -> list[str]:
    named = {m.group("rule").strip() for m in KEEPS_A_COPY.finditer(query.text)}
    return [
        f"{rule} (call {function})"
        for rule, (pattern, function) in RULE_COPIES.items()
        if pattern.search(query.sql) and rule not in named
    ]


@pytest.mark.parametrize("query", all_statements(), ids=lambda q: q.label)
def test_no_statement_spells_a_rule_out(query: Statement) -> None:
    copies = rule_copies(query)
    assert not copies, f"{query.label} writes out: " + "; ".join(copies)


def test_the_rule_copy_check_catches_copies() -> None:
    def stmt(sql: str, text: str = "") -> Statement:
        return Statement("queries", "x.sql", "x", "-- x", sql, text or sql)

    assert rule_copies(stmt("SELECT ts_rank_cd(f.search_vector, q.tsq, 32) FROM facts AS f"))
    assert rule_copies(stmt("SELECT greatest(1, char_length(f.content) / 4) FROM facts AS f"))
    assert rule_copies(stmt("SELECT 1 FROM facts AS f WHERE NOT (f.volatility = 'volatile' AND x)"))
    assert rule_copies(
        stmt("SELECT 1 FROM conflict_members AS cm JOIN conflict_sets AS cs ON true WHERE cs.status = 'open'")
    )
    assert rule_copies(stmt("SELECT :w_similarity::float8 * coalesce(1 - d, 0) FROM t"))
    named = "-- Keeps a copy of text rank: measured 2x faster spelled out\n"
    assert not rule_copies(stmt("SELECT ts_rank_cd(v, q, 32) FROM facts", named + "SELECT ..."))
    assert not rule_copies(stmt("SELECT public.haki_text_rank(f.search_vector, q.tsq) FROM facts AS f"))


# aiosql's own pattern for a parameter (aiosql.utils.VAR_REF): a colon not after a colon, then
# a word; `::type` casts are not parameters.
COMMENT_PARAMETER = re.compile(r"(?:^|[^:]):\w")


def comment_parameters(text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if "--" in line:
            comment = line.split("--", 1)[1]
            if COMMENT_PARAMETER.search(comment):
                found.append(f"line {n}: {line.strip()}")
    return found


@pytest.mark.parametrize(
    "path",
    [p for root, _ in SQL_FOLDERS.values() for p in sorted(root.glob("*.sql"))],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_no_parameter_inside_a_comment(path: Path) -> None:
    found = comment_parameters(path.read_text())
    assert not found, f"{path.name}: `:word` inside a comment is an aiosql parameter: " + "; ".join(found)


def test_the_comment_check_catches_parameters() -> None:
    assert comment_parameters("    -- (which cannot know LIMIT :top_k) expected")
    assert comment_parameters("SELECT 1 -- at most :n rows")
    assert not comment_parameters("SELECT :a::int -- casts to ::int, at 10 h 30")
    assert not comment_parameters("SELECT :a::int AS x")


async def test_the_bucket_indexes_of_migration_0008_follow_haki_scope_buckets(
    conn: asyncpg.Connection,
) -> None:
    """Migration 0008 writes its 32 partial HNSW indexes out by hand, one a bucket and table; it
    is applied and cannot change (sha256 check), so this holds them to the one definition of the
    bucket count: exactly one index per bucket of each table, its predicate naming its bucket."""
    buckets = await conn.fetchval("SELECT public.haki_scope_buckets()")
    rows = await conn.fetch(
        "SELECT t.relname AS table_name, i.relname AS index_name, "
        "pg_get_expr(x.indpred, x.indrelid) AS pred "
        "FROM pg_index AS x JOIN pg_class AS i ON i.oid = x.indexrelid "
        "JOIN pg_class AS t ON t.oid = x.indrelid JOIN pg_am AS am ON am.oid = i.relam "
        "WHERE am.amname = 'hnsw' AND t.relname IN ('facts', 'events')"
    )
    found = set()
    for r in rows:
        m = re.search(r"haki_scope_bucket\(project_id, subject_id\) = (\d+)\)?$", r["pred"] or "")
        assert m, f"{r['index_name']}: not a bucket index ({r['pred']})"
        assert r["index_name"].endswith(f"_{int(m.group(1)):02d}"), r["index_name"]
        found.add((r["table_name"], int(m.group(1))))
    assert found == {(t, n) for t in ("facts", "events") for n in range(buckets)}
    assert len(rows) == 2 * buckets
