"""What every repository module shares: the connection type, the typed statements, row helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeAlias, TypeVar

import asyncpg
import msgspec

from service.db.sql import load_queries
from service.queries_protocol import Queries

S = TypeVar("S", bound=msgspec.Struct)

# A connection of the pool (or the test's own); the handlers' injected one is api.deps.ConnDep.
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


def as_struct(kind: type[S], row: Mapping[str, Any] | None, **fields: Any) -> S | None:
    """A statement's row as the Struct its columns name, with the `fields` it does not return;
    None when there is no row."""
    return None if row is None else kind(**fields, **dict(row))


async def as_structs(kind: type[S], rows: AsyncIterator[Any]) -> list[S]:
    """Every row of a statement as the Struct its columns name."""
    return [kind(**dict(r)) async for r in rows]
