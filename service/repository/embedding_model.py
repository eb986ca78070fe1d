"""Each project's embedding model, and the vectors of a re-embedding in progress (migration 0030)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal
from uuid import UUID

import msgspec
import numpy as np

from service.errors import EmbeddingModelMismatch
from service.repository.base import Conn, as_structs, one_row, q
from service.repository.facts import vectors

ItemKind = Literal["fact", "event"]


class PendingText(msgspec.Struct, frozen=True, kw_only=True):
    """A fact or event without a vector of the new model yet."""

    item_id: UUID
    content: str


class ReembedCounts(msgspec.Struct, frozen=True, kw_only=True):
    """A project's facts and events, and how many have the new model's vector waiting."""

    facts: int
    events: int
    facts_done: int
    events_done: int

    @property
    def total(self) -> int:
        return self.facts + self.events

    @property
    def done(self) -> int:
        return self.facts_done + self.events_done


class Swapped(msgspec.Struct, frozen=True, kw_only=True):
    facts: int
    facts_swapped: int
    events: int
    events_swapped: int
    cleared: int


async def list_projects_on_other_models(conn: Conn, model: str) -> list[str]:
    return [r["project_id"] async for r in q().list_projects_on_other_models(conn, model=model)]


def require_model(project_id: str, recorded: str | None, model: str) -> None:
    """Refuses `model` for a project whose vectors another model made. A project with no record
    (no write since migration 0030) takes any: its first write records one."""
    if recorded is not None and recorded != model:
        raise EmbeddingModelMismatch(project_id, recorded, model)


async def check_model(conn: Conn, project_id: str, model: str) -> None:
    """Before an embedder (or a chat model) is called for the project: refuses `model` as
    require_model does, so that a refused write or batch costs no provider call. The write's
    transaction checks again (hold_model): a switch may come between."""
    require_model(project_id, await get_model(conn, project_id), model)


async def hold_model(conn: Conn, project_id: str, model: str) -> None:
    """Inside a write's transaction: records `model` as the project's if it has none, refuses
    another, and holds the record (share lock) until the transaction ends, so that a re-embedding's
    switch never misses the write."""
    for _ in range(2):
        recorded: str | None = await q().hold_embedding_model(conn, project_id=project_id, model=model)
        if recorded is not None:
            require_model(project_id, recorded, model)
            return
    # Two writes racing for the first record: the second statement's snapshot sees the winner.
    raise RuntimeError(f"hold_embedding_model found no model for {project_id!r} twice")


async def share_model(conn: Conn, project_id: str) -> None:
    """Inside an erasure's or a resolution's transaction: the project's model record held (share
    lock) until it ends, so that a re-embedding's switch and it never interleave; during a switch,
    asyncpg.LockNotAvailableError at once (a retryable 503)."""
    await q().share_embedding_model(conn, project_id=project_id)


async def get_model(conn: Conn, project_id: str) -> str | None:
    model: str | None = await q().get_embedding_model(conn, project_id=project_id)
    return model


async def switch_model(conn: Conn, project_id: str, model: str) -> None:
    """Inside the switch's transaction: records `model`, and makes the project's writes wait."""
    await q().switch_embedding_model(conn, project_id=project_id, model=model)


async def count_pending(conn: Conn, project_id: str, model: str) -> ReembedCounts:
    row = one_row(
        await q().count_reembed_pending(conn, project_id=project_id, model=model), "count_reembed_pending"
    )
    return ReembedCounts(**dict(row))


async def pending_texts(
    conn: Conn, kind: ItemKind, project_id: str, model: str, after_id: UUID | None, batch_size: int
) -> list[PendingText]:
    if kind == "fact":
        rows = q().pending_fact_texts(
            conn, project_id=project_id, model=model, after_id=after_id, batch_size=batch_size
        )
    else:
        rows = q().pending_event_texts(
            conn, project_id=project_id, model=model, after_id=after_id, batch_size=batch_size
        )
    return await as_structs(PendingText, rows)


async def insert_vectors(
    conn: Conn,
    kind: ItemKind,
    project_id: str,
    model: str,
    item_ids: Sequence[UUID],
    embeddings: Sequence[np.ndarray],
) -> None:
    if kind == "fact":
        await q().insert_reembedded_facts(
            conn, project_id=project_id, model=model, fact_ids=list(item_ids), embeddings=vectors(embeddings)
        )
    else:
        await q().insert_reembedded_events(
            conn, project_id=project_id, model=model, event_ids=list(item_ids), embeddings=vectors(embeddings)
        )


async def swap_vectors(conn: Conn, project_id: str, model: str) -> Swapped:
    row = one_row(
        await q().swap_reembedded_vectors(conn, project_id=project_id, model=model), "swap_reembedded_vectors"
    )
    return Swapped(**dict(row))
