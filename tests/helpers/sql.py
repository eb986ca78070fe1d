"""Loads the test-only statements of tests/sql/*.sql (aiosql, asyncpg adapter).

They never ship: the production `Queries` object (service/db/sql.py) loads `queries/` only, and the
wheel carries `queries/` and `migrations/` only (tests/test_queries.py checks both). Every name
starts with `test_`, and each statement runs inside a test's rolled-back transaction or on a
throw-away database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import aiosql

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"


@cache
def load_test_queries() -> Any:
    return aiosql.from_path(SQL_DIR, "asyncpg")


def parameter_order(q: Any, name: str) -> list[str]:
    """The parameters of a named statement in the order of its $n placeholders (aiosql's asyncpg
    adapter keeps it; its types do not show it), for running the statement's SQL text itself."""
    order: list[str] = q.driver_adapter.var_sorted[name]
    return order


# --- the one parser of the SQL files ------------------------------------------------------------
# tests/test_queries.py (house rules), tests/test_query_scoping.py (one project per statement)
# and tests/test_sql_rules.py (rules written once) all read the statements through it.

REPO = Path(__file__).resolve().parents[2]
# Each folder of named statements, and the folder whose Python must call them.
SQL_FOLDERS: dict[str, tuple[Path, str]] = {
    "queries": (REPO / "queries", "service"),
    "tests/sql": (SQL_DIR, "tests"),
    "benchmarks/sql": (REPO / "benchmarks" / "sql", "benchmarks"),
}
NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>[A-Za-z_]\w*)")
TABLE_REF = re.compile(
    r"\b(?P<kw>FROM|JOIN|UPDATE|INTO|USING)\s+(?:ONLY\s+)?(?P<table>\w+)"
    r"(?:\s+(?:AS\s+)?(?P<alias>\w+))?",
    re.IGNORECASE,
)
# Words TABLE_REF may capture as an alias that are not one.
SQL_WORDS = frozenset(
    {
        "where", "set", "on", "join", "left", "right", "inner", "outer", "cross", "full", "natural",
        "order", "group", "limit", "offset", "using", "returning", "window", "having", "union",
        "except", "intersect", "for", "and", "or", "lateral", "values", "select", "tablesample",
        "default", "do", "as", "with",
    }
)  # fmt: skip
CREATE_TABLE = re.compile(
    r"CREATE TABLE (?:IF NOT EXISTS )?(?P<table>\w+)\s*\((?P<body>.*?)\n\);", re.S | re.I
)


@dataclass(frozen=True)
class Statement:
    folder: str  # a key of SQL_FOLDERS
    file: str
    name: str
    comment: str  # the line right after `-- name:`
    sql: str  # without comments
    text: str  # as written, comments included

    @property
    def label(self) -> str:
        return f"{self.folder}/{self.file}:{self.name}"


def strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


@cache
def statements(folder: str = "queries") -> tuple[Statement, ...]:
    out: list[Statement] = []
    for path in sorted(SQL_FOLDERS[folder][0].glob("*.sql")):
        lines = path.read_text().splitlines()
        starts = [i for i, line in enumerate(lines) if NAME_LINE.match(line)]
        for n, start in enumerate(starts):
            end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            m = NAME_LINE.match(lines[start])
            assert m is not None
            body = "\n".join(lines[start + 1 : end])
            comment = lines[start + 1] if start + 1 < end else ""
            out.append(Statement(folder, path.name, m.group("name"), comment, strip_comments(body), body))
    return tuple(out)


def all_statements() -> tuple[Statement, ...]:
    return tuple(s for folder in SQL_FOLDERS for s in statements(folder))


@cache
def create_tables() -> dict[str, str]:
    """Table name -> the body of its CREATE TABLE, from the migrations."""
    found = {}
    for path in sorted((REPO / "migrations").glob("*.sql")):
        for m in CREATE_TABLE.finditer(strip_comments(path.read_text())):
            found[m.group("table")] = m.group("body")
    return found


@cache
def tenant_tables() -> frozenset[str]:
    """Tables whose rows carry project_id (api_keys too: its lookup by hash is exempt by name)."""
    return frozenset(t for t, body in create_tables().items() if re.search(r"^\s*project_id\s", body, re.M))


def table_refs(sql: str) -> list[tuple[str, str, str]]:
    """(keyword, table, alias) of every tenant table the statement reads or writes."""
    refs = []
    for m in TABLE_REF.finditer(sql):
        if m.group("table") not in tenant_tables():
            continue
        alias = m.group("alias")
        if alias is None or alias.lower() in SQL_WORDS:
            alias = m.group("table")
        refs.append((m.group("kw").upper(), m.group("table"), alias.lower()))
    return refs
