"""The claims docs/scaling.md makes for Citus (distribution by project_id), checked statically.

1. Every tenant table (a table with a project_id column) leads its primary key with project_id,
   every unique index on it includes project_id, and every foreign key between tenant tables
   carries project_id: Citus needs all three to distribute and co-locate the tables.
2. Every service query that touches a tenant table is tied to the caller's project: each tenant
   table reference (by its alias) reaches `:project_id` through a chain of `x.project_id = ...`
   equalities, and an INSERT writes project_id from the :project_id parameter. Such a statement
   then routes to exactly one Citus shard group.

Documented exceptions (EXEMPT below, each with its reason): the API key lookup by hash (the key
names no project; api_keys is a small reference table, replicated to every node), the migration
bookkeeping, and the cross-project total behind the haki_open_conflicts gauge. Test and benchmark
statements live in tests/sql/ and benchmarks/sql/ and never run in the service.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

from service.db.sql import resource_dir
from tests.helpers.sql import Statement, create_tables, statements, strip_comments, table_refs, tenant_tables

MIGRATIONS_DIR = resource_dir("migrations")

# The one exemption list of the SQL checks: production statements not tied to one project.
# Each one either reads reference tables only (api_keys) or returns one count (an aggregate).
EXEMPT: dict[str, str] = {
    "find_api_key": "authentication: the key names no project; api_keys is a Citus reference table",
    "list_projects_on_other_models": "haki doctor lists the project ids on another model than "
    "the configured one (on demand), then reads each one's model with a statement scoped to it",
    "count_open_conflicts_all_projects": "the haki_open_conflicts gauge is one total: per-project "
    "series would be unbounded cardinality (a multi-shard count, once per scrape)",
    "list_context_call_projects": "trace retention lists the project ids holding "
    "context calls (a skip scan, once per purge interval), then purges each with statements "
    "scoped to it",
    "list_webhook_projects": "the webhook delivery worker lists the project ids with events to fan "
    "out or deliveries due (once per round), then fans out and claims each project's with statements "
    "scoped to it",
    "count_event_contexts_pending_all_projects": "the haki_event_context_pending gauge is one "
    "total, like haki_open_conflicts (a multi-shard count, capped, once per scrape)",
    "next_event_context_project": "the event context worker finds the next project id with "
    "events to embed in context (one probe of a partial index, once per project and round), then "
    "reads and stores each project's with statements scoped to it",
    "count_webhook_dead_letters_all_projects": "the haki_webhook_dead_letters gauge is one total, "
    "like haki_open_conflicts (a multi-shard count, once per scrape)",
}
# The spec's tenant tables; the list derived from the migrations must include them.
SPEC_TENANT_TABLES = {
    "facts", "events", "conflict_sets", "conflict_members", "context_calls", "context_traces"
}  # fmt: skip
REFERENCE_TABLES = {"api_keys"}

PARAM = ":project_id"
EQUALITY = re.compile(
    r"(?P<a>(?:\w+\.)?project_id|:project_id)\s*=\s*(?P<b>(?:\w+\.)?project_id|:project_id|ANY\s*\(\s*:project_ids?\b)",
    re.IGNORECASE,
)


def anchored_aliases(sql: str, table_aliases: set[str]) -> set[str]:
    """Aliases whose project_id is tied to :project_id, directly or through join equalities."""
    edges: dict[str, set[str]] = {}

    def node(term: str) -> str:
        term = term.strip()
        if term.startswith(":") or term.upper().startswith("ANY"):
            return PARAM
        if "." in term:
            return term.split(".", 1)[0].lower()
        return "<unqualified>"

    for m in EQUALITY.finditer(sql):
        a, b = node(m.group("a")), node(m.group("b"))
        edges.setdefault(a, set()).add(b)
        edges.setdefault(b, set()).add(a)
    # `project_id = :project_id` without a qualifier binds the statement's unaliased table.
    for alias in table_aliases:
        if "<unqualified>" in edges:
            edges.setdefault(alias, set()).add("<unqualified>")
            edges["<unqualified>"].add(alias)
    reached, todo = {PARAM}, [PARAM]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in reached:
                reached.add(nxt)
                todo.append(nxt)
    return reached


def scoping_problems(sql: str) -> list[str]:
    refs = table_refs(sql)
    unaliased = {alias for _, table, alias in refs if alias == table}
    reached = anchored_aliases(sql, unaliased)
    problems = []
    for kw, table, alias in refs:
        if kw == "INTO":
            columns = re.search(rf"INTO\s+{table}\s*\((?P<cols>[^)]*)\)", sql, re.IGNORECASE)
            if not columns or "project_id" not in columns.group("cols"):
                problems.append(f"INSERT INTO {table} does not write project_id")
            elif PARAM not in sql:
                problems.append(f"INSERT INTO {table} does not take project_id from :project_id")
        elif alias not in reached:
            problems.append(f"{kw} {table} AS {alias} is not tied to :project_id")
    # A function of the migrations that reads tenant rows of one project (its first parameter
    # is p_project_id) hides its tables from the check above: the project it is given must be
    # :project_id, or the project_id of an alias tied to it.
    for m in re.finditer(r"\b(?:public\.)?(?P<fn>haki_\w+)\s*\(\s*(?P<arg>[^,)]+)", sql):
        if m.group("fn") not in project_functions():
            continue
        arg = m.group("arg").strip()
        owner = arg.split(".", 1)[0].lower() if arg.lower().endswith(".project_id") else None
        if arg != PARAM and owner not in reached:
            problems.append(f"{m.group('fn')}({arg}, ...) is not tied to :project_id")
    return problems


@cache
def project_functions() -> frozenset[str]:
    """The functions of the migrations whose first parameter is the project (p_project_id)."""
    pattern = re.compile(r"CREATE (?:OR REPLACE )?FUNCTION public\.(?P<fn>\w+)\(\s*p_project_id\b", re.I)
    return frozenset(
        m.group("fn")
        for path in sorted(MIGRATIONS_DIR.glob("*.sql"))
        for m in pattern.finditer(path.read_text())
    )


def service_statements() -> tuple[Statement, ...]:
    """The production statements: test and benchmark SQL lives outside queries/ and never runs in
    the service (throw-away test and benchmark databases)."""
    return statements("queries")


# --- 1. the schema ---------------------------------------------------------------------------


def test_every_tenant_table_is_distributable_by_project_id() -> None:
    tables = create_tables()
    assert tenant_tables() >= SPEC_TENANT_TABLES
    for table in tenant_tables():
        body = tables[table]
        pk = re.search(r"PRIMARY KEY\s*\((?P<cols>[^)]*)\)", body)
        assert pk, f"{table} has no table-level PRIMARY KEY"
        assert pk.group("cols").split(",")[0].strip() == "project_id", (
            f"{table}: PK must lead with project_id"
        )
        for fk in re.finditer(r"FOREIGN KEY\s*\((?P<cols>[^)]*)\)\s*REFERENCES\s+(?P<ref>\w+)", body):
            if fk.group("ref") in tenant_tables():
                assert "project_id" in fk.group("cols"), f"{table}: FK to {fk.group('ref')} lacks project_id"


def test_unique_indexes_on_tenant_tables_include_project_id() -> None:
    unique = re.compile(r"CREATE UNIQUE INDEX \w+ ON (?P<table>\w+)\s*\((?P<cols>[^)]*)\)", re.I)
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        for m in unique.finditer(strip_comments(path.read_text())):
            if m.group("table") in tenant_tables() and m.group("table") != "api_keys":
                assert "project_id" in m.group("cols"), f"{path.name}: {m.group(0)}"


# --- 2. the queries --------------------------------------------------------------------------


@pytest.mark.parametrize("statement", service_statements(), ids=lambda s: s.name)
def test_every_service_query_is_scoped_to_one_project(statement: Statement) -> None:
    if statement.name in EXEMPT:
        return
    problems = scoping_problems(statement.sql)
    assert not problems, (
        f"{statement.name}: " + "; ".join(problems) + ". Filter on project_id, or document the "
        "exception in EXEMPT (tests/test_query_scoping.py) and docs/scaling.md."
    )


def test_exemptions_are_real_and_still_needed() -> None:
    names = {s.name: s for s in service_statements()}
    for name in EXEMPT:
        assert name in names, f"EXEMPT lists {name}, which no longer exists"
        assert scoping_problems(names[name].sql), f"{name} is scoped now: drop it from EXEMPT"


def test_exempt_statements_read_reference_tables_or_return_a_count() -> None:
    """A statement across projects may not return rows of them: it reads api_keys only, returns
    one count, or lists project ids only (so that a maintenance job visits each project with
    statements scoped to it: trace retention)."""
    names = {s.name: s for s in service_statements()}
    for name in EXEMPT:
        sql = names[name].sql
        tables = {table for _, table, _ in table_refs(sql)}
        aggregate = re.match(r"\s*SELECT\s+count\(\*\)(\s+AS\s+\w+)?\s+FROM\s", sql, re.I)
        project_ids = re.match(r"\s*(?:\w+\.)?project_id\s+FROM\s", sql.rsplit("SELECT", 1)[-1], re.I)
        assert tables <= REFERENCE_TABLES or aggregate or project_ids, f"{name} must return a count only"
    assert not re.match(r"\s*SELECT\s+count\(\*\)(\s+AS\s+\w+)?\s+FROM\s", "SELECT f.content FROM facts AS f")


def test_the_checker_catches_leaks() -> None:
    assert scoping_problems("SELECT f.fact_id FROM facts AS f WHERE f.subject_id = :subject_id")
    # Joined on project_id, but neither side is tied to the parameter.
    assert scoping_problems(
        "SELECT 1 FROM facts AS f JOIN conflict_members AS cm ON cm.project_id = f.project_id "
        "WHERE f.subject_id = :subject_id"
    )
    # One side anchored, the other joined on fact_id only: the join leaks.
    assert scoping_problems(
        "SELECT 1 FROM facts AS f JOIN conflict_members AS cm ON cm.fact_id = f.fact_id "
        "WHERE f.project_id = :project_id"
    ) == ["JOIN conflict_members AS cm is not tied to :project_id"]
    assert scoping_problems("INSERT INTO events (event_id, content) VALUES (:event_id, :content)")
    assert not scoping_problems(
        "SELECT 1 FROM facts AS f JOIN conflict_members AS cm ON cm.project_id = f.project_id "
        "AND cm.fact_id = f.fact_id WHERE f.project_id = :project_id"
    )
    assert not scoping_problems("UPDATE conflict_sets SET status = 'resolved' WHERE project_id = :project_id")
    assert not scoping_problems("SELECT count(*) FROM schema_migrations")
    # A function that reads one project's rows must be given the caller's project.
    assert "haki_fact_rows" in project_functions()
    assert scoping_problems("SELECT r.fact_id FROM public.haki_fact_rows(:subject_id) AS r")
    assert scoping_problems(
        "SELECT 1 FROM facts AS f CROSS JOIN LATERAL public.haki_fact_usage(f.project_id, f.fact_id) AS u "
        "WHERE f.subject_id = :subject_id"
    )
    assert not scoping_problems("SELECT r.fact_id FROM public.haki_fact_rows(:project_id) AS r")
