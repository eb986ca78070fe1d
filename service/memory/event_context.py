"""Events' vectors in context (docs/spec/context-profiles.md, rule 8), made after the write.

An event's vector in context embeds the event before it in its scope and the event itself
(`context_text`). Writes do not wait for it: they store the event's own vector, and this worker
makes the other one in the background, a batch of a project at a time, projects in turn. Until
it has, `unified` ranks the episode by its own vector alone. A write or an erasure that changes an
event's predecessor, and a re-embedding's switch, set the vector back to pending (migration 0035).

Each batch reads with one connection, embeds with none held (the write lane of the embedder's
scheduler, behind queries), and stores under the project's model record (hold_model), so a
vector is never stored for a project whose vectors another model made, nor across a switch.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import Any

from service.constants import EVENT_CONTEXT_BATCH, EVENT_CONTEXT_BEFORE_CHARS, EVENT_CONTEXT_IDLE_SECONDS
from service.embedding.embedder import Embedder
from service.errors import EmbeddingModelMismatch
from service.repository import embedding_model
from service.repository import events as events_repo
from service.repository.events import PendingContext

log = logging.getLogger("haki.event_context")


def context_text(before: str, content: str) -> str:
    """What an event's vector in context is made from: the end of the event before it, then the
    event (EVENT_CONTEXT_BEFORE_CHARS: a long predecessor never pushes the event out of the
    model's window)."""
    return f"{before[-EVENT_CONTEXT_BEFORE_CHARS:]}\n{content}"


async def contextualize_batch(
    pool: Any, embedder: Embedder, project_id: str, batch_size: int = EVENT_CONTEXT_BATCH
) -> int:
    """One batch of the project's pending events; returns how many vectors were stored (fewer
    than read when a predecessor changed meanwhile: those stay pending). Raises
    EmbeddingModelMismatch for a project whose vectors another model made."""
    async with pool.acquire() as conn:
        # Refused before embedding, not after: such a project would cost a batch every round.
        recorded = await embedding_model.get_model(conn, project_id)
        embedding_model.require_model(project_id, recorded, embedder.name)
        pending: list[PendingContext] = await events_repo.pending_event_contexts(conn, project_id, batch_size)
    if not pending:
        return 0
    texts = [context_text(p.before_content, p.content) for p in pending if p.before_content is not None]
    made = iter(await embedder.embed(texts, purpose="write", project=project_id) if texts else [])
    # A scope's first event has nothing before it: None stores its own vector.
    embeddings = [next(made) if p.before_content is not None else None for p in pending]
    async with pool.acquire() as conn, conn.transaction():
        await embedding_model.hold_model(conn, project_id, embedder.name)
        return await events_repo.set_event_contexts(conn, project_id, pending, embeddings)


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
