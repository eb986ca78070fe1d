"""A reading of the imports: no cycle, and no lower layer importing a higher one.

Layers, low to high: foundations (settings, constants, errors, Structs, the typed statements) ->
the repository (the only caller of queries/) -> services (the assembler, the write side, the
embedder, the database plumbing, observability) -> HTTP handlers -> the app and the CLI. A module
may import its own layer or lower ones. A new module must be given a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[1] / "service"

# Module name prefix -> layer; the longest matching prefix wins.
LAYERS: dict[str, int] = {
    "service": 0,  # service/__init__.py: the version
    "service.constants": 0,
    "service.settings": 0,
    "service.ids": 0,
    "service.errors": 0,
    "service.structs": 0,
    "service.scope_id": 0,  # the rule of a project id, subject id or fact key, once
    "service.db.sql": 0,
    "service.queries_protocol": 0,
    "service.api.strict_body": 0,
    "service.api.strict_query": 0,  # a /v1 query string decoded as strictly as a body
    "service.api.ratelimit": 0,
    "service.db.embedded": 0,
    "service.db.connection": 0,  # asyncpg's connection class, whose wait long_transaction raises
    "service.context.model": 0,
    "service.context.call": 0,  # a call's terms as one value, which the repository writes in its trace
    "service.context.entities": 0,
    "service.observability.timing": 0,
    "service.repository": 1,
    "service.api.auth": 2,
    "service.memory.writes": 2,
    "service.memory.idempotency": 2,
    "service.context": 2,
    "service.embedding.embedder": 2,
    "service.embedding": 2,
    "service.db": 2,
    "service.db.replica": 2,
    "service.db.migrations": 2,
    "service.doctor": 2,
    "service.memory.importer": 2,
    "service.extraction": 2,
    "service.memory": 2,
    "service.webhooks": 2,  # webhooks: subscriptions, URL checks, signing, the delivery worker
    "service.observability": 2,
    "service.api": 3,
    "service.api.mcp_server": 3,  # the MCP tools: an adapter over the handlers' functions, like a route
    "service.app": 4,
    "service.cli": 4,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SERVICE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{module} has no layer in tests/test_layers.py"
    return LAYERS[best]


def imports(path: Path, modules: set[str]) -> set[str]:
    """The service modules a file imports, anywhere in it (function-level imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("service"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("service"):
            for alias in node.names:  # `from service.repository import facts` imports a module
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SERVICE.rglob("*.py")}
    return {m: imports(p, set(files)) - {m} for m, p in files.items()}


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{m} (layer {layer(m)}) imports {d} (layer {layer(d)})"
        for m, deps in graph().items()
        for d in deps
        if layer(d) > layer(m)
    ]
    assert upward == []


def test_no_import_cycle() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges.get(m, ())):
            if d not in edges:
                continue
            if state.get(d) == 1:
                cycles.append([*stack[stack.index(d) :], d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert cycles == []


def test_the_service_never_imports_its_own_client() -> None:
    """A server must not depend on its HTTP client (sdk/python, not a dependency of the service):
    the MCP tools call the service layer, and `haki mcp` forwards to a server's /mcp."""
    found = [
        f"{module_name(path)} imports {name}"
        for path in SERVICE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if name.split(".")[0] == "haki_client"
    ]
    assert found == []


def test_the_read_path_imports_neither_the_write_side_nor_the_replica_plumbing(tmp_path: Path) -> None:
    """service/context/ retrieves, packs and explains: which connection a call runs on and where
    its trace goes are the database layer's (service/db/call_runner.py), and it never needs the
    write side."""
    forbidden = ("service.db.replica", "service.memory")
    seen = tmp_path / "seen.py"  # the reading sees both forms of import
    seen.write_text("from service.db.replica import READS\nimport service.memory\n", encoding="utf-8")
    assert imports(seen, set(graph())) == set(forbidden)
    found = [
        f"{m} imports {d}"
        for m, deps in graph().items()
        if m == "service.context" or m.startswith("service.context.")
        for d in deps
        if any(d == f or d.startswith(f + ".") for f in forbidden)
    ]
    assert found == []


def test_the_check_sees_an_upward_import() -> None:
    """The check can fail: the repository importing a handler would be reported."""
    assert layer("service.repository.facts") < layer("service.api.memory")
    assert "service.api.deps" in imports(SERVICE / "api" / "memory.py", set(graph()))
