"""Events: batch writes."""

from __future__ import annotations

from uuid import UUID

import numpy as np

from service.repository.base import Conn, q
from service.repository.facts import vectors
from service.structs import WriteEventsRequest


async def insert_events(
    conn: Conn, req: WriteEventsRequest, event_ids: list[UUID], embeddings: list[np.ndarray]
) -> None:
    """One write batch (one scope) in one statement, a list per column."""
    events = req.events
    await q().insert_events(
        conn,
        project_id=req.project_id,
        subject_id=req.subject_id,
        event_ids=event_ids,
        contents=[e.content for e in events],
        occurred_ats=[e.occurred_at for e in events],
        metadatas=[e.metadata for e in events],
        embeddings=vectors(embeddings),
    )
