"""service/queries_protocol.py types every statement of queries/ and is never stale."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType

from service.db.sql import load_queries
from service.queries_protocol import Queries
from tests.helpers import load_file_module

REPO = Path(__file__).resolve().parents[1]


def generator() -> ModuleType:
    return load_file_module("queries_protocol", REPO / "scripts" / "queries_protocol.py")


def protocol_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(Queries).items()
        if callable(member) and not name.startswith("_")
    }


def test_protocol_is_generated_from_the_current_queries() -> None:
    gen = generator()
    expected = gen.render(REPO / "queries")
    actual = (REPO / "service" / "queries_protocol.py").read_text(encoding="utf-8")
    assert actual == expected, "service/queries_protocol.py is stale: run scripts/queries_protocol.py"


def test_protocol_names_exactly_what_aiosql_loads_with_its_parameters() -> None:
    loaded = load_queries()
    names = {n for n in loaded.available_queries if not n.endswith("_cursor")}
    methods = protocol_methods()
    assert set(methods) == names
    for name, signature in methods.items():
        declared = [p for p in signature.parameters if p not in ("self", "conn")]
        assert declared == list(getattr(loaded, name).parameters or ()), name
