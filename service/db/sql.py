"""Loads every named statement in `queries/` with aiosql's asyncpg adapter.

The `.sql` files sit top-level in the checkout so a DBA reviews them as plain SQL; the wheel
force-includes them as `service/queries` (see pyproject.toml), so both layouts are searched.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import cast

import aiosql

from service.queries_protocol import Queries

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def resource_dir(name: str) -> Path:
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"Haki's {name}/ folder is missing from the installation")


@cache
def load_queries() -> Queries:
    """Typed by service/queries_protocol.py, generated from the same files (and checked against
    what aiosql loads by tests/test_queries.py)."""
    return cast(Queries, aiosql.from_path(resource_dir("queries"), "asyncpg"))


def query_names() -> list[str]:
    return sorted(load_queries().available_queries)
