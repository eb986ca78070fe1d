"""Every statement of queries/ is router-executable once the tenant tables are distributed by
project_id (docs/scaling.md, "Sharding by project"): each tenant table it reads or writes is tied
to the :project_id parameter, by an equality of its own or a chain of project_id equalities.

The statements are parsed by PostgreSQL's own parser (pglast), name resolution included: a
qualified `alias.project_id` binds the nearest query level that defines the alias, an
unqualified one the only tenant table of its level. Tenant tables are those with a project_id
column in migrations/schema.sql; what may touch a table of another kind is listed below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, cast

import pglast
import pytest
from pglast import ast
from pglast.enums import A_Expr_Kind

from service.db.sql import load_queries, resource_dir

PARAMETER = re.compile(r"(?<![:\w]):(\w+)")
PROJECT_PARAMETERS = {"project_id"}
ANCHOR = ("<param>", "project_id")

# Statements not tied to one project, each global by design; the statements of each still touch
# tenant tables only through project ids or one total (docs/scaling.md).
ALLOWED: dict[str, str] = {
    "find_api_key": "authentication: a key's hash names no project, it finds the project "
    "(api_keys is a reference table)",
    "list_projects_on_other_models": "haki doctor lists the projects on another model, on demand",
    "count_open_conflicts_all_projects": "the haki_open_conflicts gauge is one total, a multi-shard "
    "count once per scrape",
    "list_context_call_projects": "trace retention lists the projects that hold calls, then purges "
    "each with statements tied to it",
    "list_webhook_projects": "the webhook worker lists the projects with pending deliveries, then "
    "works each with statements tied to it",
    "count_webhook_dead_letters_all_projects": "a gauge of one total, as the open conflicts",
    "count_event_contexts_pending_all_projects": "a gauge of one total, as the open conflicts",
    "next_event_context_project": "the event context worker finds the next project with events "
    "to embed in context, then works each with statements tied to it",
}
# Tables without project_id that statements may touch: global by design.
GLOBAL_TABLES: dict[str, str] = {
    "schema_migrations": "the migrations ledger: one per database (on Citus, the coordinator's)",
    "haki_vector_probe": "the health probe's temporary table (queries/health.sql), local to its "
    "transaction, on the node it runs on",
}


@cache
def tenant_tables() -> frozenset[str]:
    """Tables of the migrated schema with a project_id column."""
    schema = (resource_dir("migrations") / "schema.sql").read_text()
    out = set()
    for raw in pglast.parse_sql(schema):
        stmt: Any = raw.stmt
        if kind(stmt) == "CreateStmt":
            columns = {e.colname for e in stmt.tableElts or () if kind(e) == "ColumnDef"}
            if "project_id" in columns:
                out.add(stmt.relation.relname)
    return frozenset(out)


def kind(node: Any) -> str:
    """The parse node's type name (the checker reads nodes as Any: pglast types them loosely)."""
    return type(node).__name__


@dataclass
class Scope:
    parent: Scope | None
    aliases: dict[str, str | None] = field(default_factory=dict)  # alias -> tenant table or None
    ctes: set[str] = field(default_factory=set)

    def resolve(self, alias: str) -> tuple[Scope, str | None] | None:
        scope: Scope | None = self
        while scope is not None:
            if alias in scope.aliases:
                return scope, scope.aliases[alias]
            scope = scope.parent
        return None

    def is_cte(self, name: str) -> bool:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.ctes:
                return True
            scope = scope.parent
        return False


class RouterCheck:
    """The tenant tables of one statement, and the project_id equalities between them."""

    def __init__(self, parameter_names: list[str]) -> None:
        self.parameter_names = parameter_names
        self.tables: list[tuple[Scope, str, str]] = []  # (scope, alias, table)
        self.edges: dict[Any, set[Any]] = {}
        self.keys: dict[int, Any] = {}
        self.problems: list[str] = []
        self.other_tables: set[str] = set()

    # The node of a project_id value: a tenant table's column, or the parameter (a derived
    # table's or a CTE's column counts as the parameter: its own tables are checked where they are).
    def key_of(self, node: Any, scope: Scope) -> Any:
        while kind(node) == "TypeCast":
            node = node.arg
        if kind(node) == "ParamRef":
            name = self.parameter_names[node.number - 1]
            return ANCHOR if name in PROJECT_PARAMETERS else None
        if kind(node) == "ColumnRef":
            names = [f.sval for f in node.fields if kind(f) == "String"]
            if not names or names[-1] != "project_id":
                return None
            if len(names) == 1:
                level: Scope | None = scope
                while level is not None:
                    tenants = [a for a, t in level.aliases.items() if t is not None]
                    if len(tenants) == 1:
                        return (id(level), tenants[0])
                    if len(tenants) > 1:
                        self.problems.append("an unqualified project_id names several tenant tables")
                        return None
                    if level.aliases:
                        return ANCHOR
                    level = level.parent
                return None
            found = scope.resolve(names[-2])
            if found is None:
                return None
            level, table = found
            return (id(level), names[-2]) if table is not None else ANCHOR
        return None

    def tie(self, a: Any, b: Any) -> None:
        if a is not None and b is not None:
            self.edges.setdefault(a, set()).add(b)
            self.edges.setdefault(b, set()).add(a)

    def define(self, item: Any, scope: Scope) -> None:
        """The aliases a FROM item defines in `scope`; subqueries are visited as levels of their own."""
        if kind(item) == "RangeVar":
            name = item.alias.aliasname if item.alias else item.relname
            if scope.is_cte(item.relname) and item.schemaname is None:
                scope.aliases[name] = None
            elif item.relname in tenant_tables():
                scope.aliases[name] = item.relname
                self.tables.append((scope, name, item.relname))
            else:
                scope.aliases[name] = None
                self.other_tables.add(item.relname)
        elif kind(item) == "JoinExpr":
            self.define(item.larg, scope)
            self.define(item.rarg, scope)
            if item.quals is not None:
                self.visit(item.quals, scope)
        elif kind(item) == "RangeSubselect":
            self.visit(item.subquery, scope)
            if item.alias:
                scope.aliases[item.alias.aliasname] = None
        elif kind(item) == "RangeFunction":
            self.visit(item.functions, scope)
            if item.alias:
                scope.aliases[item.alias.aliasname] = None

    def level(self, stmt: Any, scope: Scope | None) -> None:
        here = Scope(parent=scope)
        if getattr(stmt, "withClause", None) is not None:
            for cte in stmt.withClause.ctes:
                here.ctes.add(cte.ctename)
            for cte in stmt.withClause.ctes:
                self.visit(cte.ctequery, here)
        if kind(stmt) == "SelectStmt":
            for item in stmt.fromClause or ():
                self.define(item, here)
            if stmt.larg is not None:
                self.visit(stmt.larg, here)
                self.visit(stmt.rarg, here)
            for name in (
                "targetList",
                "whereClause",
                "groupClause",
                "havingClause",
                "sortClause",
                "limitCount",
                "limitOffset",
                "valuesLists",
                "distinctClause",
                "windowClause",
            ):
                self.visit(getattr(stmt, name), here)
        elif kind(stmt) == "UpdateStmt":
            self.define(stmt.relation, here)
            for item in stmt.fromClause or ():
                self.define(item, here)
            self.visit((stmt.targetList, stmt.whereClause, stmt.returningClause), here)
        elif kind(stmt) == "DeleteStmt":
            self.define(stmt.relation, here)
            for item in stmt.usingClause or ():
                self.define(item, here)
            self.visit((stmt.whereClause, stmt.returningClause), here)
        elif kind(stmt) == "InsertStmt":
            self.define(stmt.relation, here)
            self.visit(stmt.selectStmt, here)
            self.visit((stmt.onConflictClause, stmt.returningClause), here)
            target = stmt.relation.alias.aliasname if stmt.relation.alias else stmt.relation.relname
            if here.aliases.get(target) is not None:
                self.tie((id(here), target), self.inserted_project(stmt, here))

    def inserted_project(self, stmt: Any, scope: Scope) -> Any:
        columns = [c.name for c in stmt.cols or ()]
        if "project_id" not in columns:
            return None
        at = columns.index("project_id")
        select = stmt.selectStmt
        if select is None:
            return None
        if select.valuesLists:
            values = {self.key_of(row[at], scope) for row in select.valuesLists}
            return ANCHOR if values == {ANCHOR} else None
        value = select.targetList[at].val
        return self.keys.get(id(value)) or self.key_of(value, scope)

    def visit(self, node: Any, scope: Scope) -> None:
        if node is None:
            return
        if isinstance(node, (list, tuple)):
            for n in node:
                self.visit(n, scope)
            return
        if not isinstance(node, ast.Node):
            return
        node = cast(Any, node)
        if kind(node) in {"SelectStmt", "UpdateStmt", "DeleteStmt", "InsertStmt"}:
            self.level(node, scope)
            return
        if kind(node) == "ColumnRef":
            self.keys[id(node)] = self.key_of(node, scope)
            return
        equality = kind(node) == "A_Expr" and node.kind == A_Expr_Kind.AEXPR_OP
        if equality and [n.sval for n in node.name] == ["="]:
            self.tie(self.key_of(node.lexpr, scope), self.key_of(node.rexpr, scope))
        for name in node:
            self.visit(getattr(node, name), scope)

    def untied(self) -> list[str]:
        reached: set[Any] = {ANCHOR}
        todo: list[Any] = [ANCHOR]
        while todo:
            for nxt in self.edges.get(todo.pop(), ()):
                if nxt not in reached:
                    reached.add(nxt)
                    todo.append(nxt)
        out = [
            f"{table} AS {alias} is not tied to :project_id"
            for scope, alias, table in self.tables
            if (id(scope), alias) not in reached
        ]
        return sorted(set(out + self.problems))


def router_problems(sql: str, parameters: list[str] | None = None) -> list[str]:
    """Why a statement would not be router-executable: `sql` with `$n` placeholders naming
    `parameters` in order (as aiosql's asyncpg adapter loads it), or with `:name` ones."""
    names: list[str] = list(parameters or [])

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    check = RouterCheck(names)
    for raw in pglast.parse_sql(PARAMETER.sub(number, sql)):
        check.visit(raw.stmt, Scope(parent=None))
    problems = check.untied()
    problems += [
        f"{t} is neither a tenant table nor global by design"
        for t in sorted(check.other_tables)
        if t not in GLOBAL_TABLES and not t.startswith("pg_")
    ]
    return problems


def statement_names() -> list[str]:
    """The named statements (aiosql adds a `_cursor` variant of each returning rows: the same SQL)."""
    names = set(load_queries().available_queries)
    return sorted(n for n in names if not (n.endswith("_cursor") and n.removesuffix("_cursor") in names))


def problems_of(name: str) -> list[str]:
    q = load_queries()
    return router_problems(getattr(q, name).sql, cast(Any, q).driver_adapter.var_sorted[name])


@pytest.mark.parametrize("name", statement_names())
def test_every_statement_is_router_executable(name: str) -> None:
    if name in ALLOWED:
        return
    problems = problems_of(name)
    assert not problems, f"{name}: {'; '.join(problems)} (or list it in ALLOWED with the reason)"


def test_the_allowed_statements_exist_and_need_it() -> None:
    known = set(statement_names())
    for name in ALLOWED:
        assert name in known, f"ALLOWED lists {name}, which no longer exists"
        assert problems_of(name), f"{name} is tied to one project now: drop it from ALLOWED"


def test_the_tenant_tables_are_read_from_the_schema() -> None:
    assert {"facts", "events", "context_calls", "context_traces", "conflict_members"} <= tenant_tables()
    assert "schema_migrations" not in tenant_tables()


def test_the_checker_fails_a_statement_that_is_not() -> None:
    assert router_problems("SELECT f.fact_id FROM facts AS f WHERE f.subject_id = :subject_id") == [
        "facts AS f is not tied to :project_id"
    ]
    # Joined on project_id, but neither side tied to the parameter.
    assert router_problems(
        "SELECT 1 FROM facts AS f JOIN events AS e ON e.project_id = f.project_id WHERE f.subject_id = :s"
    )
    # One side tied, the other joined on its id only.
    assert router_problems(
        "SELECT 1 FROM facts AS f JOIN conflict_members AS cm ON cm.fact_id = f.fact_id "
        "WHERE f.project_id = :project_id"
    ) == ["conflict_members AS cm is not tied to :project_id"]
    # The same alias at another level does not tie this one.
    assert router_problems(
        "SELECT (SELECT count(*) FROM facts AS f WHERE f.project_id = :project_id) "
        "FROM facts AS f WHERE f.subject_id = :s"
    ) == ["facts AS f is not tied to :project_id"]
    # A project id from another parameter, an insert from an untied source, a delete of all.
    assert router_problems("SELECT 1 FROM events AS e WHERE e.project_id = :other")
    assert router_problems(
        "INSERT INTO facts (project_id, fact_id) SELECT e.project_id, e.event_id FROM events AS e"
    )
    assert router_problems("DELETE FROM context_calls AS c WHERE c.created_at < now()")
    assert router_problems("SELECT 1 FROM some_table AS s") == [
        "some_table is neither a tenant table nor global by design"
    ]
    # What passes: a direct filter, a chain, an insert of the parameter, a correlated subquery.
    assert not router_problems(
        "SELECT 1 FROM facts AS f JOIN conflict_members AS cm "
        "ON cm.project_id = f.project_id AND cm.fact_id = f.fact_id WHERE f.project_id = :project_id"
    )
    assert not router_problems("INSERT INTO events (project_id, event_id) VALUES (:project_id, :e)")
    assert not router_problems(
        "SELECT f.fact_id FROM facts AS f WHERE f.project_id = :project_id AND EXISTS "
        "(SELECT 1 FROM conflict_members AS m WHERE m.project_id = f.project_id)"
    )
