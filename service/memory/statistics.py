"""Planner statistics kept fresh after bulk writes.

Right after a bulk write the planner still sees facts as they were at the table's last ANALYZE:
the cached generic plans of the candidate statements and the scope-size estimates they read
(`haki_probe_scope_facts`, the vector walk's exact-scan threshold) are those of a smaller table.
Measured over HTTP (hash embedder, 10k facts written in ten batches of 1,000, then 100 facts of a
second subject): context p50 was 2.9x the 100-fact scope's right after the writes, 1.53x after an
ANALYZE of facts (docs/performance.md, "Statistics after bulk writes").
Autovacuum gets there too, but only after its naptime (60 s by default) and once 10 % of the
table has changed.

The keeper counts the rows this process writes to each table and ANALYZEs the table in the
background once they reach STATS_REFRESH_FRACTION of its estimated rows (at least
STATS_REFRESH_MIN_ROWS), at most once per STATS_REFRESH_MIN_INTERVAL_SECONDS: the cost of an
ANALYZE (a sample of at most 30,000 rows) stays a small share of the writes that called for it.
Rows written by other processes are autovacuum's, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from service.repository import maintenance as repo
from service.repository.maintenance import MemoryTable

log = logging.getLogger("haki.statistics")

# Autovacuum's own share (autovacuum_analyze_scale_factor 0.1), without its naptime.
STATS_REFRESH_FRACTION: Final = 0.1
# Below this many new rows a table is left to autovacuum: one small batch never pays for an
# ANALYZE, and a 1,000-fact batch (the API's largest) always may.
STATS_REFRESH_MIN_ROWS: Final = 1000
# Under a steady stream of big batches, one ANALYZE per table per this many seconds at most.
STATS_REFRESH_MIN_INTERVAL_SECONDS: Final = 2.0

TABLES: Final[tuple[MemoryTable, ...]] = ("facts", "events")


class StatisticsKeeper:
    """`note` what a write added; `run` (a background task) ANALYZEs the tables that are due."""

    def __init__(
        self,
        pool: Any,
        *,
        min_rows: int = STATS_REFRESH_MIN_ROWS,
        fraction: float = STATS_REFRESH_FRACTION,
        min_interval: float = STATS_REFRESH_MIN_INTERVAL_SECONDS,
        on_refresh: Callable[[MemoryTable], None] | None = None,
    ) -> None:
        self.pool = pool
        self.min_rows, self.fraction, self.min_interval = min_rows, fraction, min_interval
        self.on_refresh = on_refresh
        self.pending: dict[MemoryTable, int] = dict.fromkeys(TABLES, 0)
        self.estimates: dict[str, int] | None = None  # read when the first write is noted
        self.last_refresh: dict[MemoryTable, float] = dict.fromkeys(TABLES, float("-inf"))
        self._wake = asyncio.Event()

    def note(self, table: MemoryTable, rows: int) -> None:
        """A committed write of `rows` new rows to `table`."""
        if rows > 0:
            self.pending[table] += rows
            self._wake.set()

    def threshold(self, table: MemoryTable) -> float:
        estimate = (self.estimates or {}).get(table, 0)
        return max(self.min_rows, self.fraction * max(estimate, 0))

    def due(self) -> list[MemoryTable]:
        return [t for t in TABLES if self.pending[t] >= self.threshold(t)]

    async def load_estimates(self) -> None:
        async with self.pool.acquire() as conn:
            self.estimates = await repo.row_estimates(conn)

    async def refresh_due(self) -> None:
        """ANALYZEs every table that is due now; the rows written meanwhile stay pending."""
        for table in self.due():
            counted = self.pending[table]
            started = time.perf_counter()
            async with self.pool.acquire() as conn:
                await repo.analyze(conn, table)
                self.estimates = await repo.row_estimates(conn)
            took = time.perf_counter() - started
            self.pending[table] -= counted
            self.last_refresh[table] = time.monotonic()
            log.debug("statistics of %s refreshed after %d new rows (%.3f s)", table, counted, took)
            if self.on_refresh is not None:
                self.on_refresh(table)

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                if self.estimates is None:  # a big table's share, not STATS_REFRESH_MIN_ROWS of it
                    await self.load_estimates()
            except Exception as exc:
                log.warning("planner statistics: row estimates unavailable: %r", exc)
                continue
            due = self.due()
            if not due:
                continue
            rest = max(self.last_refresh[t] for t in due) + self.min_interval - time.monotonic()
            if rest > 0:
                await asyncio.sleep(rest)
            try:
                await self.refresh_due()
            except Exception as exc:  # the keeper must outlive any one failure (autovacuum remains)
                log.warning("planner statistics refresh failed: %r", exc)
