"""House rules of queries/*.sql, checked on the files (and every statement prepared once).

- every `-- name:` line is followed by a purpose comment;
- no `SELECT *` (the Structs' fields are the SQL aliases, so columns are listed);
- every named query is called somewhere: service queries under service/, `test_` queries
  (test-only statements) under tests/; `bench_` statements are not checked;
- every statement that reads or writes a tenant table (a table whose rows carry project_id)
  is anchored to the caller's project: each tenant table it reads is constrained on its
  project_id, and the statement ties project_id to the :project_id parameter.
  Exempt: `bench_` statements (throw-away benchmark database), `test_` statements (never run by
  the service), and the cross-project aggregates listed in CROSS_PROJECT with their reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import asyncpg
import pytest

from service.sql import load_queries, resource_dir

REPO = Path(__file__).resolve().parent.parent
QUERIES_DIR = resource_dir("queries")
MIGRATIONS_DIR = resource_dir("migrations")

# The spec's tenant tables; the list derived from the migrations must include them.
SPEC_TENANT_TABLES = {
    "facts", "events", "conflict_sets", "conflict_members", "context_calls", "context_traces"
}  # fmt: skip
# api_keys carries project_id but is looked up by key hash alone (the key names no project).
NOT_TENANT = {"api_keys"}
# Statements the service runs across every project on purpose: each must return aggregates only.
CROSS_PROJECT = {
    "count_open_conflicts_all_projects": "GET /metrics gauge: one count, no tenant label",
}

# Statements that list project ids across every project, so that a maintenance job visits each
# project with statements scoped to it: each must return the project_id column only.
CROSS_PROJECT_IDS = {
    "list_context_call_projects": "trace retention (issue 14) purges project by project",
}

NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>[A-Za-z_]\w*)")
TABLE_REF = re.compile(
    r"\b(?P<kw>FROM|JOIN|UPDATE|INTO|USING)\s+(?:ONLY\s+)?(?P<table>\w+)(?:\s+(?:AS\s+)?(?P<alias>\w+))?",
    re.IGNORECASE,
)
SQL_WORDS = {
    "where", "set", "on", "join", "left", "right", "inner", "outer", "cross", "full", "natural", "order",
    "group", "limit", "offset", "using", "returning", "window", "having", "union", "except", "intersect",
    "for", "and", "or", "lateral", "values", "select", "tablesample", "default", "do", "as",
}  # fmt: skip
SELECT_STAR = re.compile(
    r"\bSELECT\s+(?:DISTINCT\s+)?(?:\w+\.)?\*|,\s*(?:\w+\.)?\*\s*(?:,|\bFROM\b)|\bRETURNING\s+(?:\w+\.)?\*",
    re.IGNORECASE,
)
PROJECT_ANCHOR = re.compile(r"project_id\s*=\s*(?::project_id\b|ANY\s*\(\s*:)", re.IGNORECASE)


@dataclass(frozen=True)
class Query:
    file: str
    name: str
    comment: str  # the line right after `-- name:`
    sql: str  # without comments

    @property
    def label(self) -> str:
        return f"{self.file}:{self.name}"


def strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


@cache
def parse_queries() -> tuple[Query, ...]:
    out: list[Query] = []
    for path in sorted(QUERIES_DIR.glob("*.sql")):
        lines = path.read_text().splitlines()
        starts = [i for i, line in enumerate(lines) if NAME_LINE.match(line)]
        for n, start in enumerate(starts):
            end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            m = NAME_LINE.match(lines[start])
            assert m is not None
            comment = lines[start + 1] if start + 1 < end else ""
            out.append(
                Query(
                    file=path.name,
                    name=m.group("name"),
                    comment=comment,
                    sql=strip_comments("\n".join(lines[start + 1 : end])),
                )
            )
    return tuple(out)


@cache
def tenant_tables() -> frozenset[str]:
    tables: set[str] = set()
    create = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(?P<table>\w+)\s*\((?P<body>.*?)\n\);", re.S | re.I)
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        for m in create.finditer(strip_comments(path.read_text())):
            if re.search(r"^\s*project_id\s", m.group("body"), re.M):
                tables.add(m.group("table"))
    return frozenset(tables - NOT_TENANT)


@cache
def python_sources(folder: str) -> str:
    root = REPO / folder
    return "\n".join(p.read_text() for p in sorted(root.rglob("*.py"))) if root.is_dir() else ""


def query_ids() -> list[str]:
    return [q.label for q in parse_queries()]


def test_queries_load() -> None:
    queries = load_queries()
    names = set(queries.available_queries)
    parsed = {q.name for q in parse_queries()}
    assert parsed, "no named queries found"
    assert parsed <= names
    for required in ("insert_facts", "list_facts", "find_api_key", "detect_conflicts", "lock_migrations"):
        assert hasattr(queries, required), required


def test_query_names_are_unique() -> None:
    names = [q.name for q in parse_queries()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_tenant_tables_come_from_the_migrations() -> None:
    assert tenant_tables() >= SPEC_TENANT_TABLES


def test_cross_project_statements_are_aggregates() -> None:
    by_name = {q.name: q for q in parse_queries()}
    for name in CROSS_PROJECT:
        assert name in by_name, f"CROSS_PROJECT lists {name}, which no longer exists"
        sql = by_name[name].sql
        assert re.match(r"\s*SELECT\s+count\(\*\)(\s+AS\s+\w+)?\s+FROM\s", sql, re.I), (
            f"{name} must return a count only"
        )


def test_cross_project_id_lists_return_project_ids_only() -> None:
    by_name = {q.name: q for q in parse_queries()}
    for name in CROSS_PROJECT_IDS:
        assert name in by_name, f"CROSS_PROJECT_IDS lists {name}, which no longer exists"
        final = by_name[name].sql.rsplit("SELECT", 1)[1]
        only_ids = re.match(r"\s*(?:\w+\.)?project_id\s+FROM\s", final, re.I)
        assert only_ids, f"{name} must return project_id only"


@pytest.mark.parametrize("query", parse_queries(), ids=query_ids())
def test_purpose_comment_after_name(query: Query) -> None:
    assert re.match(r"^--\s+\S", query.comment), (
        f"{query.label}: the line after `-- name:` must say what it is for"
    )
    assert not NAME_LINE.match(query.comment)
    assert query.sql.strip(), f"{query.label}: empty statement"


@pytest.mark.parametrize("query", parse_queries(), ids=query_ids())
def test_no_select_star(query: Query) -> None:
    m = SELECT_STAR.search(query.sql)
    assert m is None, f"{query.label}: list the columns instead of `{m.group(0) if m else ''}`"


@pytest.mark.parametrize(
    "query", [q for q in parse_queries() if not q.name.startswith("bench_")], ids=lambda q: q.label
)
def test_every_query_is_called(query: Query) -> None:
    folder = "tests" if query.name.startswith("test_") else "service"
    source = python_sources(folder)
    pattern = re.compile(rf"\.{re.escape(query.name)}\(")
    called = pattern.search(source) is not None
    assert called, f"{query.label} is never called as `.{query.name}(` under {folder}/"


def tenant_refs(sql: str) -> list[tuple[str, str, str]]:
    """(keyword, table, alias) of every tenant table the statement reads or writes."""
    tables = tenant_tables()
    refs = []
    for m in TABLE_REF.finditer(sql):
        table = m.group("table")
        if table not in tables:
            continue
        alias = m.group("alias")
        if alias is None or alias.lower() in SQL_WORDS:
            alias = table
        refs.append((m.group("kw").upper(), table, alias))
    return refs


@pytest.mark.parametrize(
    "query",
    [
        q
        for q in parse_queries()
        if not q.name.startswith(("bench_", "test_"))
        and q.name not in CROSS_PROJECT
        and q.name not in CROSS_PROJECT_IDS
    ],
    ids=lambda q: q.label,
)
def test_tenant_tables_are_filtered_on_project_id(query: Query) -> None:
    refs = tenant_refs(query.sql)
    if not refs:
        return
    problems = []
    for kw, table, alias in refs:
        if kw == "INTO":
            if not re.search(r":project_id\b", query.sql):
                problems.append(f"INSERT INTO {table} does not take :project_id")
            continue
        qualified = re.compile(
            rf"\b{re.escape(alias)}\.project_id\s*=|=\s*{re.escape(alias)}\.project_id\b", re.IGNORECASE
        )
        unqualified = re.compile(r"(?<![\w.])project_id\s*=", re.IGNORECASE)
        if not (qualified.search(query.sql) or (alias == table and unqualified.search(query.sql))):
            problems.append(f"{kw} {table} AS {alias} is not constrained on {alias}.project_id")
    if not (PROJECT_ANCHOR.search(query.sql) or all(kw == "INTO" for kw, _, _ in refs)):
        problems.append("no `project_id = :project_id` (or `= ANY(:...)`) filter")
    assert not problems, f"{query.label}: " + "; ".join(problems)


# Session state that outlives a transaction. The pool does not reset connections on release
# (service/db.py keep_session), so no statement that runs on a pooled connection may leave any.
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


# Statements that run on a connection of their own, never a pooled one: the migration runner's
# session lock (service/migrations.py), and the benchmarks' and tests' throw-away helpers.
OWN_CONNECTION_FILES = ("migrations.sql", "bench.sql", "testing")


@pytest.mark.parametrize("query", parse_queries(), ids=query_ids())
def test_no_session_state_outlives_the_transaction(query: Query) -> None:
    if query.file.startswith(OWN_CONNECTION_FILES):
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
    leaky = "SELECT f.fact_id FROM facts AS f WHERE f.subject_id = :subject_id"
    assert tenant_refs(leaky) == [("FROM", "facts", "f")]
    assert not PROJECT_ANCHOR.search(leaky)
    join_leak = (
        "SELECT f.fact_id FROM facts AS f JOIN conflict_members AS cm ON cm.fact_id = f.fact_id "
        "WHERE f.project_id = :project_id"
    )
    assert not re.search(r"\bcm\.project_id\s*=|=\s*cm\.project_id\b", join_leak)
    assert SELECT_STAR.search("SELECT * FROM facts")
    assert SELECT_STAR.search("SELECT f.* FROM facts AS f")
    assert SELECT_STAR.search("SELECT a, f.* FROM facts AS f")
    assert not SELECT_STAR.search("SELECT count(*) FROM facts")


@pytest.mark.parametrize(
    "name", [q.name for q in parse_queries() if not q.name.startswith("bench_")], ids=lambda n: n
)
async def test_query_prepares_against_the_migrated_schema(conn: asyncpg.Connection, name: str) -> None:
    """Parses, resolves every table and column, and types every parameter (nothing is run).
    `bench_` statements depend on session temp objects and are prepared by the benchmarks."""
    sql = getattr(load_queries(), name).sql
    await conn.execute("SAVEPOINT prepare_check")
    try:
        await conn.prepare(sql)
    finally:
        await conn.execute("ROLLBACK TO SAVEPOINT prepare_check")
