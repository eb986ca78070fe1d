"""Events: batch writes."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np

from service.repository.base import Conn, q
from service.repository.facts import vectors


async def insert_events(
    conn: Conn,
    project_id: str,
    subject_id: str,
    event_ids: list[UUID],
    contents: list[str],
    occurred_ats: list[datetime],
    metadatas: list[dict[str, Any] | None],
    embeddings: list[np.ndarray],
) -> None:
    await q().insert_events(
        conn,
        project_id=project_id,
        subject_id=subject_id,
        event_ids=event_ids,
        contents=contents,
        occurred_ats=occurred_ats,
        metadatas=metadatas,
        embeddings=vectors(embeddings),
    )
