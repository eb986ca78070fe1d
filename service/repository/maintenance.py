"""The planner statistics of the memory tables (queries/maintenance.sql)."""

from __future__ import annotations

from typing import Literal

from service.repository.base import Conn, collect, q

MemoryTable = Literal["facts", "events"]


async def row_estimates(conn: Conn) -> dict[str, int]:
    """Each memory table's estimated rows at its last ANALYZE (-1: never analyzed)."""
    rows = await collect(q().memory_table_row_estimates(conn))
    return {r["table_name"]: r["row_estimate"] for r in rows}


async def analyze(conn: Conn, table: MemoryTable) -> None:
    """New planner statistics for one memory table; outside any transaction."""
    if table == "facts":
        await q().analyze_facts(conn)
    else:
        await q().analyze_events(conn)
