"""What every repository module shares: the connection type, the typed statements, row helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import asyncpg

from service.queries_protocol import Queries
from service.sql import load_queries

# A connection of the pool (or the test's own); the handlers' injected one is handlers.deps.ConnDep.
Conn: TypeAlias = asyncpg.Connection


def q() -> Queries:
    return load_queries()


async def collect(rows: AsyncIterator[Any]) -> list[Any]:
    return [r async for r in rows]


def one_row(row: asyncpg.Record | None, statement: str) -> asyncpg.Record:
    """The row of a statement that always returns one (an aggregate); None would be a bug."""
    if row is None:
        raise RuntimeError(f"{statement} returned no row")
    return row
