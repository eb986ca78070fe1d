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
bookkeeping, and the cross-project total behind the haki_open_conflicts gauge. Statements named
`test_` / `bench_` never run in the service (throw-away test and benchmark databases).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import pytest

from service.sql import resource_dir

QUERIES_DIR = resource_dir("queries")
MIGRATIONS_DIR = resource_dir("migrations")

EXEMPT: dict[str, str] = {
    "find_api_key": "authentication: the key names no project; api_keys is a Citus reference table",
    "count_open_conflicts_all_projects": "the haki_open_conflicts gauge is one total: per-project "
    "series would be unbounded cardinality (a multi-shard count, once per scrape)",
    "list_context_call_projects": "trace retention (issue 14) lists the project ids holding "
    "context calls (a skip scan, once per purge interval), then purges each with statements "
    "scoped to it",
}
NON_SERVICE_PREFIXES = ("test_", "bench_")

NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>[A-Za-z_]\w*)", re.M)
TABLE_REF = re.compile(
    r"\b(?P<kw>FROM|JOIN|UPDATE|INTO|USING)\s+(?:ONLY\s+)?(?P<table>\w+)(?:\s+(?:AS\s+)?(?P<alias>\w+))?",
    re.IGNORECASE,
)
SQL_WORDS = frozenset(
    {
        "where", "set", "on", "join", "left", "right", "inner", "outer", "cross", "full", "natural",
        "order", "group", "limit", "offset", "using", "returning", "window", "having", "union",
        "except", "intersect", "for", "and", "or", "lateral", "values", "select", "default", "do",
        "as", "with",
    }
)  # fmt: skip
PARAM = ":project_id"
EQUALITY = re.compile(
    r"(?P<a>(?:\w+\.)?project_id|:project_id)\s*=\s*(?P<b>(?:\w+\.)?project_id|:project_id|ANY\s*\(\s*:project_ids?\b)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Statement:
    name: str
    sql: str  # without comments


def strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


@cache
def statements() -> tuple[Statement, ...]:
    out = []
    for path in sorted(QUERIES_DIR.glob("*.sql")):
        text = path.read_text()
        marks = list(NAME_LINE.finditer(text))
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            out.append(Statement(m.group("name"), strip_comments(text[m.end() : end])))
    return tuple(out)


@cache
def create_tables() -> dict[str, str]:
    create = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(?P<table>\w+)\s*\((?P<body>.*?)\n\);", re.S | re.I)
    found = {}
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        for m in create.finditer(strip_comments(path.read_text())):
            found[m.group("table")] = m.group("body")
    return found


@cache
def tenant_tables() -> frozenset[str]:
    return frozenset(t for t, body in create_tables().items() if re.search(r"^\s*project_id\s", body, re.M))


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
    tenants = tenant_tables()
    refs = []
    for m in TABLE_REF.finditer(sql):
        if m.group("table") not in tenants:
            continue
        alias = m.group("alias")
        if alias is None or alias.lower() in SQL_WORDS:
            alias = m.group("table")
        refs.append((m.group("kw").upper(), m.group("table"), alias.lower()))
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
    return problems


def service_statements() -> list[Statement]:
    return [s for s in statements() if not s.name.startswith(NON_SERVICE_PREFIXES)]


# --- 1. the schema ---------------------------------------------------------------------------


def test_every_tenant_table_is_distributable_by_project_id() -> None:
    tables = create_tables()
    assert {"facts", "events", "conflict_sets", "conflict_members", "context_calls", "context_traces"} <= set(
        tenant_tables()
    )
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
    names = {s.name: s for s in statements()}
    for name in EXEMPT:
        assert name in names, f"EXEMPT lists {name}, which no longer exists"
        assert scoping_problems(names[name].sql), f"{name} is scoped now: drop it from EXEMPT"


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
