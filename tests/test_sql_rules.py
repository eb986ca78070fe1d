"""The spec's rules are written once in SQL, as the inlinable functions of
migrations/rules.sql, and every statement and every other function calls them.

1. Each rule function inlines: a statement that calls it plans as the copy it replaces (no
   function call left in the plan, so the planner sees the columns and indexes the copy showed it).
2. No statement of queries/, tests/sql/ or benchmarks/sql/ spells a rule out again, unless it
   names the exception in a comment (`-- Keeps a copy of <rule>: <why>`).
3. No function body in the database (pg_proc.prosrc) spells a rule out again either, except the
   function that is the rule's one definition, or a body that names the exception the same way.
4. rules.sql is repeatable and explained: CREATE OR REPLACE and COMMENT ON only, each function
   under a comment citing docs/spec/, and no index or constraint built on one of its functions.
5. No `--` comment of those files holds a `:word`: aiosql reads it as a parameter (a name the
   statement does not declare fails the load; a declared one is silently counted).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from tests.helpers.sql import REPO, SQL_FOLDERS, Statement, all_statements, load_test_queries, strip_comments

RULES_SQL = REPO / "migrations" / "rules.sql"
RULE_FUNCTION = re.compile(r"^CREATE OR REPLACE FUNCTION public\.(?P<name>\w+)\(", re.M)


def rule_functions() -> list[str]:
    """The functions of migrations/rules.sql, in the file's order."""
    return RULE_FUNCTION.findall(RULES_SQL.read_text(encoding="utf-8"))


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
    "haki_fact_believed": "SELECT f.fact_id FROM facts AS f WHERE public.haki_fact_believed(f.status, "
    "f.recorded_from, f.recorded_to, f.valid_to)",
    "haki_fact_valid": "SELECT f.fact_id FROM facts AS f WHERE public.haki_fact_valid(f.valid_to, "
    "f.recorded_to, f.believed_valid_to, f.valid_from)",
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
    "haki_open_conflict_members_at": "SELECT m.fact_id FROM facts AS f CROSS JOIN LATERAL "
    "public.haki_open_conflict_members_at(f.project_id, f.valid_to) AS m WHERE m.subject_id = f.subject_id",
    "haki_blocked_facts": "SELECT b.fact_id FROM facts AS f CROSS JOIN LATERAL "
    "public.haki_blocked_facts(f.project_id, f.subject_id, ARRAY[f.fact_id], f.valid_to) AS b",
    "haki_scope_sample": "SELECT s.sv FROM facts AS f CROSS JOIN LATERAL public.haki_scope_sample("
    "f.project_id, f.subject_id, f.key::regconfig, 8, f.valid_to) AS s",
    "haki_query_df": "SELECT d.df FROM facts AS f CROSS JOIN LATERAL public.haki_query_df(f.project_id, "
    "f.subject_id, f.content, f.key::regconfig, 8, 8, f.valid_to) AS d",
    "haki_query_words": "SELECT w.word FROM facts AS f CROSS JOIN LATERAL public.haki_query_words("
    "f.content, f.key::regconfig, 8) AS w",
    "haki_bm25_idf": "SELECT public.haki_bm25_idf(c.n, c.n) FROM (SELECT count(*) AS n FROM facts) AS c",
    "haki_text_probe": "SELECT public.haki_text_probe(s.x, s.x, 64, 8192, s.x, s.x) "
    "FROM (SELECT extract(epoch FROM stale_after)::float8 AS x FROM facts) AS s",
    "haki_fact_postings": "SELECT p.fact_id FROM facts AS f CROSS JOIN LATERAL public.haki_fact_postings("
    "f.project_id, f.subject_id, 'simple'::regconfig, plainto_tsquery('simple', f.key), f.valid_to) AS p",
    "haki_text_matches": "SELECT m.fact_id FROM facts AS f CROSS JOIN LATERAL public.haki_text_matches("
    "f.project_id, f.subject_id, f.key::regconfig, plainto_tsquery('simple', f.key), f.status = 'active', "
    "ARRAY[f.fact_id], 64, 8192, f.valid_to) AS m",
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
    assert re.search(rf"\b{function.strip()}\(", plan) is None, (
        f"{function.strip()} is called, not inlined:\n{plan}"
    )


# The rule functions that cannot inline, and why.
NOT_INLINED = {
    "haki_open_conflict_facts": "an aggregate, which only a FROM item inlines: called once a statement",
    "haki_conflict_claims": "an aggregate: called once for each conflict set a change leaves, a few at most",
}


def test_every_rule_function_is_held_to_inlining() -> None:
    """A new function of rules.sql gets its case in INLINED, or its reason in NOT_INLINED."""
    assert set(rule_functions()) <= {f.strip() for f in INLINED} | set(NOT_INLINED)


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
    "believed at an instant": (
        re.compile(r"\brecorded_to\s+IS\s+NULL\s+OR\s+[\w.]*recorded_to\s*>", re.I),
        "haki_fact_believed / haki_fact_servable",
    ),
    "open at an instant": (
        re.compile(r"\bresolved_at\s+IS\s+NULL\s+OR\s+[\w.]*resolved_at\s*>", re.I),
        "haki_open_conflict_members_at / haki_open_conflict_facts",
    ),
    # The trace's derived values (migrations 0026, 0032): frozen, not rules of rules.sql.
    "trace similarity": (
        re.compile(r"\bhaki_trace_(?:value|exception)\s*\([^()]*,\s*1\s*-", re.I),
        "haki_trace_similarity",
    ),
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
    assert rule_copies(stmt("SELECT public.haki_trace_value(u.similarity, 1 - u.distance) FROM t"))
    assert rule_copies(stmt("SELECT 1 FROM facts AS f WHERE f.recorded_to IS NULL OR f.recorded_to > :at"))
    assert rule_copies(
        stmt("SELECT 1 FROM conflict_sets AS cs WHERE cs.resolved_at IS NULL OR cs.resolved_at > :at")
    )
    named = "-- Keeps a copy of text rank: measured 2x faster spelled out\n"
    assert not rule_copies(stmt("SELECT ts_rank_cd(v, q, 32) FROM facts", named + "SELECT ..."))
    assert not rule_copies(stmt("SELECT public.haki_text_rank(f.search_vector, q.tsq) FROM facts AS f"))


# The rules as a function body would spell them (its parameters by name, not `:name`), each with
# the functions that are its one definition. Believed now (`status = 'active'`) and open now
# (`status = 'open'`) are held in bodies only: the write side's and the listings' statements name
# a fact's or a set's current status itself, as the partial indexes do.
BODY_COPIES: dict[str, tuple[re.Pattern[str], frozenset[str]]] = {
    "text rank": (RULE_COPIES["text rank"][0], frozenset({"haki_text_rank"})),
    "token estimate": (RULE_COPIES["token estimate"][0], frozenset({"haki_tokens"})),
    "recency": (RULE_COPIES["recency"][0], frozenset({"haki_recency"})),
    "stale volatile": (RULE_COPIES["stale volatile"][0], frozenset({"haki_fact_stale"})),
    "servable": (RULE_COPIES["servable"][0], frozenset({"haki_fact_servable"})),
    "hybrid score": (re.compile(r"\bw_similarity\s*\*", re.I), frozenset({"haki_hybrid_score"})),
    "believed": (
        re.compile(r"\bstatus\s*=\s*'active'|" + RULE_COPIES["believed at an instant"][0].pattern, re.I),
        frozenset({"haki_fact_believed"}),
    ),
    "business validity": (
        re.compile(r"\bvalid_to\s+IS\s+NULL\s+OR\b|\bvalid_to\s*>", re.I),
        frozenset({"haki_fact_valid"}),
    ),
    "event held": (re.compile(r"\b(?:occurred|recorded)_at\s*<=", re.I), frozenset({"haki_event_held"})),
    # Membership: the join of the conflict tables, and what makes a set open now or at an instant.
    "open conflict": (
        re.compile(
            r"\bconflict_(?:members|sets)\b|\bstatus\s*=\s*'open'|"
            + RULE_COPIES["open at an instant"][0].pattern,
            re.I,
        ),
        frozenset({"haki_open_conflict_members_at"}),
    ),
}


def body_copies(function: str, body: str) -> list[str]:
    named = {m.group("rule").strip() for m in KEEPS_A_COPY.finditer(body)}
    return [
        f"{rule} (call {' / '.join(sorted(defined_by))})"
        for rule, (pattern, defined_by) in BODY_COPIES.items()
        if function not in defined_by and rule not in named and pattern.search(strip_comments(body))
    ]


async def test_no_function_body_spells_a_rule_out(conn: asyncpg.Connection) -> None:
    """Every function of the schema, rule functions, walks and postings alike, as the database
    holds it (pg_proc.prosrc: SQL and PL/pgSQL bodies are kept as written)."""
    rows = await conn.fetch(
        "SELECT p.oid::regprocedure::text AS signature, p.proname AS name, p.prosrc AS body "
        "FROM pg_catalog.pg_proc AS p "
        "WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'haki\\_%' "
        "ORDER BY 1"
    )
    assert len(rows) > len(rule_functions())
    copies = [f"{r['signature']} writes out {c}" for r in rows for c in body_copies(r["name"], r["body"])]
    assert not copies, "; ".join(copies)


def test_each_rule_is_defined_by_a_function_of_rules_sql() -> None:
    defined = set(rule_functions())
    for rule, (_, defined_by) in BODY_COPIES.items():
        assert defined_by <= defined, f"{rule}: {sorted(defined_by - defined)} is not in migrations/rules.sql"


def test_the_body_check_catches_copies() -> None:
    assert body_copies("haki_x", "SELECT f.fact_id FROM facts AS f WHERE f.status = 'active'")
    assert body_copies("haki_x", "SELECT recorded_from <= at AND (recorded_to IS NULL OR recorded_to > at)")
    assert body_copies("haki_x", "SELECT cm.fact_id FROM public.conflict_members AS cm")
    assert body_copies("haki_x", "SELECT 1 WHERE cs.status = 'open'")
    assert body_copies("haki_x", "SELECT f.valid_to IS NULL OR f.valid_to > now()")
    assert body_copies("haki_x", "SELECT w_similarity * coalesce(1 - d, 0)")
    assert body_copies("haki_x", "SELECT at IS NULL OR (occurred_at <= at AND recorded_at <= at)")
    assert body_copies("haki_x", "SELECT pg_catalog.exp(-x)")
    assert not body_copies("haki_fact_believed", "SELECT CASE WHEN at IS NULL THEN status = 'active' END")
    assert not body_copies("haki_x", "SELECT public.haki_open_conflict_members(p_project_id)")
    assert not body_copies("haki_x", "-- status = 'active' in a comment\nSELECT 1")
    named = "-- Keeps a copy of believed: the partial index needs the literal\nSELECT f.status = 'active'"
    assert not body_copies("haki_x", named)


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
    is applied and cannot change (sha256 check), so this holds them, and the graphs of the events'
    vectors in context (migration 0037), to the one definition of the bucket count: exactly one
    index per bucket of each family, its predicate naming its bucket."""
    families = ("facts_embedding_hnsw", "events_embedding_hnsw", "events_context_hnsw")
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
        family = r["index_name"].rsplit("_", 1)[0]
        assert family.startswith(r["table_name"]), r["index_name"]
        found.add((family, int(m.group(1))))
    assert found == {(f, n) for f in families for n in range(buckets)}
    assert len(rows) == len(families) * buckets


# --- migrations/rules.sql -----------------------------------------------------------------------

DOLLAR_BODY = re.compile(r"\$(\w*)\$.*?\$\1\$", re.S)
SPEC_CITATION = re.compile(r"docs/spec/context-(?:assembler|profiles)\.md")


def test_rules_sql_is_repeatable_and_each_rule_is_explained() -> None:
    """Only CREATE OR REPLACE FUNCTION and COMMENT ON FUNCTION (the runner applies it again after
    every numbered migration, and whenever it changes); each function under a comment that cites
    the spec, and carrying a COMMENT ON that the live schema (and schema.sql) shows."""
    text = RULES_SQL.read_text(encoding="utf-8")
    statements = [s.strip() for s in strip_comments(DOLLAR_BODY.sub("$$", text)).split(";") if s.strip()]
    assert statements
    bad = [
        s.splitlines()[0]
        for s in statements
        if not s.startswith(("CREATE OR REPLACE FUNCTION ", "COMMENT ON FUNCTION "))
    ]
    assert not bad, bad
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = RULE_FUNCTION.match(line)
        if m is None:
            continue
        block = []
        for above in reversed(lines[:n]):
            if not above.startswith("--"):
                break
            block.append(above)
        name = m.group("name")
        assert SPEC_CITATION.search(" ".join(block)), f"{name}: no comment citing docs/spec/ above it"
        assert re.search(rf"^COMMENT ON FUNCTION public\.{name}\(", text, re.M), f"{name}: no COMMENT ON"


async def test_the_database_holds_the_rules_of_rules_sql(conn: asyncpg.Connection) -> None:
    """Applying the file again changes nothing: the rule functions are exactly the file's (in the
    test's transaction, rolled back)."""

    async def rule_catalog() -> list[asyncpg.Record]:
        rows = await conn.fetch(
            "SELECT p.oid::regprocedure::text AS signature, p.prosrc, p.provolatile, p.proparallel, "
            "p.proisstrict, p.prosecdef, p.proconfig, l.lanname, "
            "pg_catalog.obj_description(p.oid, 'pg_proc') AS comment "
            "FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang "
            "WHERE p.pronamespace = 'public'::regnamespace AND p.proname = ANY ($1::text[]) ORDER BY 1",
            rule_functions(),
        )
        return list(rows)

    before = await rule_catalog()
    assert {r["signature"].split("(")[0] for r in before} == set(rule_functions())
    await conn.execute(RULES_SQL.read_text(encoding="utf-8"))
    assert await rule_catalog() == before
    inlinable = ("sql", False, False, None)  # LANGUAGE sql, not STRICT, not SECURITY DEFINER, no SET
    for r in before:
        assert (r["lanname"], r["proisstrict"], r["prosecdef"], r["proconfig"]) == inlinable, r


async def test_no_index_or_constraint_is_built_on_a_rule_function(conn: asyncpg.Connection) -> None:
    """A repeatable file cannot hold a function an index, a constraint, a generated column or a
    trigger is built on: a new body would leave them built on the old one. The scope keys of
    migration 0023, which the GIN indexes are built on, show the check finds such a function."""

    async def built_on(names: list[str]) -> list[str]:
        rows = await conn.fetch(
            "SELECT d.refobjid::regprocedure::text AS function, d.classid::regclass::text AS catalog "
            "FROM pg_catalog.pg_depend AS d JOIN pg_catalog.pg_proc AS p ON p.oid = d.refobjid "
            "WHERE d.refclassid = 'pg_catalog.pg_proc'::regclass "
            "AND d.classid::regclass::text NOT IN ('pg_proc', 'pg_rewrite') "
            "AND p.pronamespace = 'public'::regnamespace AND p.proname = ANY ($1::text[])",
            names,
        )
        return [f"{r['function']} ({r['catalog']})" for r in rows]

    assert await built_on(["haki_scope_keyed_vector"])
    assert await built_on(rule_functions()) == []


async def test_a_fact_is_stale_once_older_than_its_stale_after(conn: asyncpg.Connection) -> None:
    """ "Older than its stale_after_seconds" (docs/spec/api.md): at the very instant it reaches
    that age a volatile fact is still served; a microsecond later it is not."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    q = load_test_queries()
    reached = start + timedelta(seconds=3600)
    assert await q.test_fact_stale_at(conn, valid_from=start, stale_after_seconds=3600, at=reached) is False
    later = reached + timedelta(microseconds=1)
    assert await q.test_fact_stale_at(conn, valid_from=start, stale_after_seconds=3600, at=later) is True
