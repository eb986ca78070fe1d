"""Data access of the extraction (queries/extract.sql); kept apart so it moves with the package."""

from __future__ import annotations

from uuid import UUID

import msgspec

from service import repository as repo


class KnownFact(msgspec.Struct, frozen=True, kw_only=True):
    fact_id: UUID
    key: str | None
    content: str
    volatility: str


async def known_facts(conn: repo.Conn, project_id: str, subject_id: str, max_facts: int) -> list[KnownFact]:
    rows = await repo.collect(
        repo.q().list_extract_known_facts(
            conn, project_id=project_id, subject_id=subject_id, max_facts=max_facts
        )
    )
    return [KnownFact(**dict(r)) for r in rows]
