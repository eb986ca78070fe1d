"""POST /v1/extract's reads (queries/extract.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

import msgspec

from service.repository.base import Conn, as_structs, collect, q


class KnownFact(msgspec.Struct, frozen=True, kw_only=True):
    fact_id: UUID
    key: str | None
    content: str
    volatility: str
    valid_from: datetime | None
    stale: bool
    # A volatile fact's window, which a restatement that renews it keeps; None when stable.
    stale_after_seconds: int | None


class StaleFact(msgspec.Struct, frozen=True, kw_only=True):
    """An active fact no longer served (stale), which a restatement renews."""

    fact_id: UUID
    stale_after_seconds: int


async def known_facts(conn: Conn, project_id: str, subject_id: str, max_facts: int) -> list[KnownFact]:
    return await as_structs(
        KnownFact,
        q().list_extract_known_facts(conn, project_id=project_id, subject_id=subject_id, max_facts=max_facts),
    )


async def active_contents(
    conn: Conn, project_id: str, subject_id: str, contents: Sequence[str]
) -> dict[str, StaleFact | None]:
    """The texts among `contents` that an active fact of the scope holds, word for word, each
    with the stale fact a restatement renews, or None when a fact still served holds it."""
    rows = await collect(
        q().list_extract_active_contents(
            conn, project_id=project_id, subject_id=subject_id, contents=list(contents)
        )
    )
    return {
        r["content"]: None
        if r["renews"] is None
        else StaleFact(fact_id=r["renews"], stale_after_seconds=r["renews_stale_after_seconds"])
        for r in rows
    }


async def count_erased_known(conn: Conn, project_id: str, subject_id: str, fact_ids: Sequence[UUID]) -> int:
    """How many of `fact_ids` (the facts shown to the model) the scope no longer holds."""
    erased: int = await q().count_extract_erased_known(
        conn, project_id=project_id, subject_id=subject_id, fact_ids=list(fact_ids)
    )
    return erased


async def lock_extraction_scope(conn: Conn, project_id: str, subject_id: str) -> None:
    await q().lock_extraction_scope(conn, project_id=project_id, subject_id=subject_id)
