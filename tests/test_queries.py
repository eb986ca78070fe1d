"""House rules of the SQL files, checked on the files (and every statement prepared once).

Production statements live in queries/ (loaded by service/db/sql.py, shipped in the wheel), test
statements in tests/sql/ and benchmark statements in benchmarks/sql/ (their own loaders; never
shipped). One parser reads all three (tests/helpers/sql.py); the same rules hold in each:

- every `-- name:` line is followed by a purpose comment;
- no `SELECT *` (the Structs' fields are the SQL aliases, so columns are listed);
- no `:word` inside a `--` comment (aiosql 15 reads it as a parameter);
- every named query is called somewhere: queries/ statements under service/, tests/sql/ ones
  under tests/, benchmarks/sql/ ones under benchmarks/;
- no statement run on a pooled connection leaves session state behind;
- every statement prepares against the migrated schema.
Scoping to one project is checked by tests/test_query_scoping.py, with its one exemption list.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache

import asyncpg
import pytest

from service.db.sql import load_queries, resource_dir
from tests.helpers.sql import REPO, SQL_FOLDERS, Statement, all_statements, load_test_queries, statements

QUERIES_DIR = resource_dir("queries")
SELECT_STAR = re.compile(
    r"\bSELECT\s+(?:DISTINCT\s+)?(?:\w+\.)?\*|,\s*(?:\w+\.)?\*\s*(?:,|\bFROM\b)|\bRETURNING\s+(?:\w+\.)?\*",
    re.IGNORECASE,
)


@cache
def python_sources(folder: str) -> str:
    root = REPO / folder
    return "\n".join(p.read_text() for p in sorted(root.rglob("*.py"))) if root.is_dir() else ""


def label(s: Statement) -> str:
    return s.label


def test_queries_load() -> None:
    queries = load_queries()
    names = {n for n in queries.available_queries if not n.endswith("_cursor")}
    parsed = {q.name for q in statements("queries")}
    assert parsed, "no named queries found"
    assert parsed == names
    for required in ("insert_facts", "list_facts", "find_api_key", "detect_conflicts", "lock_migrations"):
        assert hasattr(queries, required), required


def test_production_queries_hold_no_test_or_benchmark_statement() -> None:
    """A DBA reviewing queries/ reads product only: test and benchmark SQL have their own folders."""
    names = set(load_queries().available_queries)
    assert not {n for n in names if n.startswith(("test_", "bench_"))}
    assert {q.name for q in statements("tests/sql")} <= set(load_test_queries().available_queries)
    assert not names & {q.name for q in statements("tests/sql") + statements("benchmarks/sql")}
    assert all(q.name.startswith("test_") for q in statements("tests/sql"))


def test_the_wheel_ships_only_service_queries_and_migrations() -> None:
    """pyproject's wheel target: the service package plus queries/ and migrations/ as package data;
    tests/sql/ and benchmarks/sql/ stay out of it."""
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == ["service"]
    assert wheel["force-include"] == {"queries": "service/queries", "migrations": "service/migrations"}
    assert not list((REPO / "service").rglob("*.sql")), "SQL inside service/ would ship too"
    assert QUERIES_DIR == REPO / "queries"


def test_query_names_are_unique() -> None:
    names = [q.name for q in all_statements()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("query", all_statements(), ids=label)
def test_purpose_comment_after_name(query: Statement) -> None:
    assert re.match(r"^--\s+\S", query.comment), (
        f"{query.label}: the line after `-- name:` must say what it is for"
    )
    assert not re.match(r"^--\s*name:", query.comment)
    assert query.sql.strip(), f"{query.label}: empty statement"


@pytest.mark.parametrize("query", all_statements(), ids=label)
def test_no_select_star(query: Statement) -> None:
    m = SELECT_STAR.search(query.sql)
    assert m is None, f"{query.label}: list the columns instead of `{m.group(0) if m else ''}`"


@pytest.mark.parametrize("query", all_statements(), ids=label)
def test_every_query_is_called(query: Statement) -> None:
    folder = SQL_FOLDERS[query.folder][1]
    pattern = re.compile(rf"\.{re.escape(query.name)}\(")
    called = pattern.search(python_sources(folder)) is not None
    assert called, f"{query.label} is never called as `.{query.name}(` under {folder}/"


# Session state that outlives a transaction. The pool does not reset connections on release
# (service/db/pools.py keep_session), so no statement that runs on a pooled connection may leave any.
SESSION_STATE = re.compile(
    r"\bSET\s+(?!LOCAL\b)(?:SESSION\s+)?[\w.]+\s*(?:=|TO\b)"
    r"|\bset_config\s*\([^;]*?,\s*false\s*\)"
    r"|\bpg_(?:try_)?advisory_lock(?:_shared)?\s*\("
    r"|\bLISTEN\b|\bWITH\s+HOLD\b|\bPREPARE\s+\w+\s+AS\b",
    re.IGNORECASE,
)
# The SET of an UPDATE (`UPDATE t [AS a] SET`, `DO UPDATE SET`) assigns columns, not settings.
UPDATE_SET = re.compile(r"\bUPDATE\s+(?:(?:ONLY\s+)?\w+\s+(?:AS\s+)?(?:\w+\s+)?)?SET\b", re.IGNORECASE)


def session_state(sql: str) -> re.Match[str] | None:
    return SESSION_STATE.search(UPDATE_SET.sub("UPDATE", sql))


def runs_on_own_connection(query: Statement) -> bool:
    """Every test and benchmark statement (throw-away connections and databases) never runs on a
    pooled connection; the migration runner's lock and timeouts are its transactions' too."""
    return query.folder != "queries"


@pytest.mark.parametrize("query", all_statements(), ids=label)
def test_no_session_state_outlives_the_transaction(query: Statement) -> None:
    if runs_on_own_connection(query):
        return
    found = session_state(query.sql)
    assert found is None, f"{query.label}: {found.group(0)!r} changes the session, not the transaction"


def test_the_session_state_checker_catches_violations() -> None:
    for bad in (
        "SET plan_cache_mode TO force_generic_plan",
        "SET SESSION hnsw.ef_search = 100",
        "SELECT set_config('hnsw.ef_search', '100', false)",
        "SELECT pg_advisory_lock(1)",
        "LISTEN facts_changed",
        "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
    ):
        assert session_state(bad), bad
    for good in (
        "SET LOCAL plan_cache_mode TO force_generic_plan",
        "SELECT set_config('hnsw.ef_search', '100', true)",
        "UPDATE facts SET status = 'retracted'",
        "UPDATE facts AS f\n    SET status = 'retracted'",
        "INSERT INTO t VALUES (1) ON CONFLICT (k) DO UPDATE SET key = EXCLUDED.key",
        "SELECT pg_advisory_xact_lock(1)",
    ):
        assert not session_state(good), good


def test_the_rule_checker_catches_violations() -> None:
    """The checks above would fail on statements that break them."""
    assert SELECT_STAR.search("SELECT * FROM facts")
    assert SELECT_STAR.search("SELECT f.* FROM facts AS f")
    assert SELECT_STAR.search("SELECT a, f.* FROM facts AS f")
    assert not SELECT_STAR.search("SELECT count(*) FROM facts")


# Scripts of benchmarks/sql/bench.sql that create the session objects (a temp table, pg_temp
# functions, a table) its other statements use; run first, in the test's rolled-back transaction.
BENCH_SETUP = ("bench_stash_indexes", "bench_define_explain", "bench_create_fact_counters")
# Statements of queries/ that read the temporary table a script of theirs creates first.
QUERY_SETUP = {"probe_vector_search": ("probe_vector_setup",)}


def loader(query: Statement) -> object:
    if query.folder == "queries":
        return load_queries()
    if query.folder == "tests/sql":
        return load_test_queries()
    from benchmarks.sql import load_bench_queries

    return load_bench_queries()


@pytest.mark.parametrize("query", all_statements(), ids=label)
async def test_query_prepares_against_the_migrated_schema(conn: asyncpg.Connection, query: Statement) -> None:
    """Parses, resolves every table and column, and types every parameter (nothing is run but the
    benchmark set-up scripts, in the rolled-back transaction). A script of several statements
    (`#`) cannot be prepared: it runs instead, inside the savepoint."""
    sql = getattr(loader(query), query.name).sql
    await conn.execute("SAVEPOINT prepare_check")
    try:
        setup = BENCH_SETUP if query.file == "bench.sql" else QUERY_SETUP.get(query.name, ())
        for name in setup:
            await conn.execute(getattr(loader(query), name).sql)
        try:
            await conn.prepare(sql)
        except asyncpg.PostgresSyntaxError as e:
            if "multiple commands" not in str(e):
                raise
            await conn.execute("ROLLBACK TO SAVEPOINT prepare_check")
            await conn.execute(sql)
    finally:
        await conn.execute("ROLLBACK TO SAVEPOINT prepare_check")
