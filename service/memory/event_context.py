"""Events' vectors in context (docs/spec/context-profiles.md, rule 8), made after the write.

An event's vector in context embeds the event before it in its scope and the event itself
(`context_text`). The write stores the event's own vector and commits; `POST /v1/events` then
makes its own events' vectors before it answers (`make_written`, HAKI_EVENT_CONTEXT_INLINE), and
this worker makes every other one in the background (imports, extraction, a vector set back to
pending, a write whose inline step failed), a batch of a project at a time, projects in turn.
Until one is made, `unified` ranks the episode by its own vector alone. A write or an erasure
that changes an event's predecessor, and a re-embedding's switch, set the vector back to pending
(migration 0035).

Each batch is claimed with a connection (`claim_pending`: every serving process runs this worker,
and a claimed event is left to the process that claimed it, so each text is embedded once),
embedded with none held (`embed_pending`: the write lane of the embedder's scheduler, behind
queries), and stored under the project's model record (`store_pending`, hold_model, which ends
the claims), so a vector is never stored for a project whose vectors another model made, nor
across a switch. The store waits for the scopes' event writes in flight
(lock_event_order), so it never reads a predecessor while another may be uncommitted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from contextlib import suppress
from typing import Any, TypeVar
from uuid import UUID

from service.constants import (
    EVENT_CONTEXT_BATCH,
    EVENT_CONTEXT_BEFORE_CHARS,
    EVENT_CONTEXT_CLAIM_SECONDS,
    EVENT_CONTEXT_IDLE_SECONDS,
)
from service.embedding.embedder import Embedder
from service.errors import EmbeddingModelMismatch
from service.repository import embedding_model
from service.repository import events as events_repo
from service.repository import lifecycle as lifecycle_repo
from service.repository.events import PendingContext

log = logging.getLogger("haki.event_context")
T = TypeVar("T")


def context_text(before: str, content: str) -> str:
    """What an event's vector in context is made from: the end of the event before it, then the
    event (EVENT_CONTEXT_BEFORE_CHARS: a long predecessor never pushes the event out of the
    model's window)."""
    return f"{before[-EVENT_CONTEXT_BEFORE_CHARS:]}\n{content}"


async def claim_pending(
    conn: Any, embedder: Embedder, project_id: str, batch_size: int, event_ids: Sequence[UUID] | None = None
) -> list[PendingContext]:
    """The project's next pending events (of `event_ids` only, when given) that no other process
    claimed, claimed by this one (EVENT_CONTEXT_CLAIM_SECONDS): each is embedded by one process.
    Raises EmbeddingModelMismatch for a project whose vectors another model made: refused before
    embedding, not after, or such a project would cost a batch every round."""
    await embedding_model.check_model(conn, project_id, embedder.name)
    return await events_repo.claim_event_contexts(
        conn, project_id, batch_size, EVENT_CONTEXT_CLAIM_SECONDS, event_ids
    )


async def release_pending(conn: Any, project_id: str, pending: list[PendingContext]) -> None:
    """Gives a batch that was not stored back to the other processes at once, not after its claim."""
    await events_repo.release_event_context_claims(conn, project_id, [p.event_id for p in pending])


async def embed_pending(embedder: Embedder, project_id: str, pending: list[PendingContext]) -> list[Any]:
    """The batch's vectors in context; None for a scope's first event (it takes its own)."""
    texts = [context_text(p.before_content, p.content) for p in pending if p.before_content is not None]
    made = iter(await embedder.embed(texts, purpose="write", project=project_id) if texts else [])
    return [next(made) if p.before_content is not None else None for p in pending]


async def store_pending(
    conn: Any, embedder: Embedder, project_id: str, pending: list[PendingContext], embeddings: list[Any]
) -> int:
    """Stores the batch under the project's model record; returns how many were stored (fewer
    than read when a predecessor changed meanwhile: those stay pending)."""
    async with conn.transaction():
        # First, the erasure locks of the batch's scopes, shared and in one order: an erasure of
        # one of them changes these events' rows too, in another order (they deadlocked).
        await lifecycle_repo.share_event_scopes(conn, project_id, [p.event_id for p in pending])
        await embedding_model.hold_model(conn, project_id, embedder.name)
        # After the scopes' event writes in flight (lock_event_order), before the next ones: the
        # predecessors it compares are then committed ones.
        await events_repo.share_event_orders(conn, project_id, [p.event_id for p in pending])
        stored = await events_repo.set_event_contexts(conn, project_id, pending, embeddings)
        # Those not stored (a predecessor changed meanwhile) are pending again, for any process.
        await release_pending(conn, project_id, pending)
        return stored


async def _caught(work: Awaitable[T]) -> T | Exception:
    try:
        return await work
    except Exception as exc:
        return exc


async def make_written(lent: Any, embedder: Embedder, project_id: str, event_ids: Sequence[UUID]) -> int:
    """A write's own events' vectors in context, made before it answers (HAKI_EVENT_CONTEXT_INLINE),
    so that the next call ranks them by both; returns how many were stored. `lent` is the
    request's connection (RouteDeps: `conn`, and `without_connection` while embedding). The write
    has committed: a failure here (embedder or database down) is logged, and the background task
    makes them later."""
    try:
        pending = await claim_pending(lent.conn, embedder, project_id, len(event_ids), event_ids)
        if not pending:
            return 0  # none left, or the background task of a process took them first
        # Caught inside the wait: a failed wait lends no connection after it, and the claims are
        # given back on one.
        embeddings = await lent.without_connection(_caught(embed_pending(embedder, project_id, pending)))
        try:
            if isinstance(embeddings, Exception):
                raise embeddings
            return await store_pending(lent.conn, embedder, project_id, pending, embeddings)
        except Exception:
            with suppress(Exception):  # the batch's own failure is the one logged
                await release_pending(lent.conn, project_id, pending)
            raise
    except Exception as exc:
        log.warning("event context: a write's vectors left to the background task: %r", exc)
        return 0


async def contextualize_batch(
    pool: Any, embedder: Embedder, project_id: str, batch_size: int = EVENT_CONTEXT_BATCH
) -> int:
    """One batch of the project's pending events no other process claimed; returns how many
    vectors were stored."""
    async with pool.acquire() as conn:
        pending = await claim_pending(conn, embedder, project_id, batch_size)
    if not pending:
        return 0
    try:
        embeddings = await embed_pending(embedder, project_id, pending)
        async with pool.acquire() as conn:
            return await store_pending(conn, embedder, project_id, pending, embeddings)
    except Exception:
        # Best effort: a release that fails (the database down) leaves the claims to expire, and
        # the batch's own failure is the one reported.
        with suppress(Exception):
            async with pool.acquire() as conn:
                await release_pending(conn, project_id, pending)
        raise


async def drain(pool: Any, embedder: Embedder, batch_size: int = EVENT_CONTEXT_BATCH) -> int:
    """Rounds over the projects with pending events, one batch each a round, until a round stores
    nothing; returns how many vectors were stored. A project on another model is skipped."""
    total = 0
    while True:
        stored, after = 0, None
        while True:
            async with pool.acquire() as conn:
                project = await events_repo.next_event_context_project(conn, after)
            if project is None:
                break
            # A project on another model: its vectors wait for a server on that model.
            with suppress(EmbeddingModelMismatch):
                stored += await contextualize_batch(pool, embedder, project, batch_size)
            after = project
        total += stored
        if stored == 0:
            return total


async def run_forever(pool: Any, embedder: Embedder) -> None:
    """The background task of a serving process: drains, then waits, until cancelled. A failure
    (database or embedder down) is logged, and the work tried again after the wait."""
    while True:
        try:
            stored = await drain(pool, embedder)
            if stored:
                log.debug("event context: %d vector(s) in context stored", stored)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("event context: failed, retrying in %.0f s: %r", EVENT_CONTEXT_IDLE_SECONDS, exc)
        await asyncio.sleep(EVENT_CONTEXT_IDLE_SECONDS)
