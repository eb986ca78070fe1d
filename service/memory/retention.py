"""Trace retention: context calls older than HAKI_TRACE_RETENTION_DAYS go, with
their decisions, in bounded batches.

`purge_once` visits every project that holds context calls and deletes its expired calls one
batch (HAKI_TRACE_PURGE_BATCH calls) per statement, each statement its own short transaction on
a connection borrowed for that statement only: a request never waits for the purge (the batch
skips calls another transaction holds, and a context call only inserts). The service runs it in
a background task every HAKI_TRACE_PURGE_INTERVAL_SECONDS; `haki purge` runs it once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from service.repository import lifecycle as repo
from service.settings import Settings

log = logging.getLogger("haki.retention")

S = TypeVar("S", bound=msgspec.Struct)

# The background purge rests as long as each batch took: a backlog (4,000 expired calls of 128
# decisions) purged flat out made the trace write of context calls 2.1x slower on 2 cores;
# benchmarks/retention.py, docs/reliability.md "Trace retention".
BACKGROUND_PAUSE_RATIO = 1.0


@dataclass
class Purged:
    context_calls: int = 0
    decisions: int = 0
    batches: int = 0


async def purge_once(
    pool: Any,
    settings: Settings,
    *,
    on_batch: Callable[[int, int], None] | None = None,
    pause_ratio: float = 0.0,
) -> Purged:
    """Deletes every expired call now; `on_batch(calls, decisions)` after each batch. After each
    full batch it pauses `pause_ratio` times as long as the batch took, so that a backlog (the
    first purge after retention is turned on) takes at most 1 / (1 + pause_ratio) of a core.
    Nothing to do when retention is 0 (traces kept for ever)."""
    total = Purged()
    days = settings.trace_retention_days
    if days <= 0:
        return total
    async with pool.acquire() as conn:
        projects = await repo.context_call_projects(conn)
    for project_id in projects:
        while True:
            started = time.perf_counter()
            async with pool.acquire() as conn:
                calls, decisions = await repo.purge_expired_context_calls(
                    conn, project_id, days, settings.trace_purge_batch
                )
            took = time.perf_counter() - started
            total.context_calls += calls
            total.decisions += decisions
            if calls:
                total.batches += 1
                if on_batch is not None:
                    on_batch(calls, decisions)
            if calls < settings.trace_purge_batch:
                break
            # Between batches the pool's connections and the CPU go to requests.
            await asyncio.sleep(took * pause_ratio)
    return total


async def run_forever(pool: Any, settings: Settings, on_batch: Callable[[int, int], None]) -> None:
    """The background task of a serving process: a purge, then a pause, until cancelled. A failed
    purge (database down) is logged and tried again at the next interval."""
    while True:
        try:
            purged = await purge_once(pool, settings, on_batch=on_batch, pause_ratio=BACKGROUND_PAUSE_RATIO)
            if purged.context_calls:
                log.info(
                    "trace retention: purged %d context call(s) and %d decision(s) older than %d day(s)",
                    purged.context_calls,
                    purged.decisions,
                    settings.trace_retention_days,
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "trace retention: purge failed, retrying in %.0f s: %r",
                settings.trace_purge_interval_seconds,
                exc,
            )
        await asyncio.sleep(settings.trace_purge_interval_seconds)


def windowed(stats: S, settings: Settings) -> S:
    """Stats counted from traces, with the window they count over: the last
    HAKI_TRACE_RETENTION_DAYS days (0: every call logged)."""
    return msgspec.structs.replace(stats, trace_retention_days=settings.trace_retention_days)
