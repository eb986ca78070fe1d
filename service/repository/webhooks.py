"""Repository of webhooks: the only code that runs queries/webhooks.sql."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from service.repository.base import Conn, as_struct, as_structs, collect, q
from service.structs import Webhook, WebhookDelivery, WebhookSummary


async def insert_webhook(
    conn: Conn,
    project_id: str,
    webhook_id: UUID,
    url: str,
    events: list[str],
    include_content: bool,
    secret: str,
    max_webhooks: int,
) -> Webhook | None:
    """None when the project holds max_webhooks already."""
    row = await q().insert_webhook(
        conn,
        project_id=project_id,
        webhook_id=webhook_id,
        url=url,
        events=events,
        include_content=include_content,
        secret=secret,
        max_webhooks=max_webhooks,
    )
    return as_struct(Webhook, row)


async def list_webhooks(conn: Conn, project_id: str) -> list[WebhookSummary]:
    return await as_structs(WebhookSummary, q().list_webhooks(conn, project_id=project_id))


async def delete_webhook(conn: Conn, project_id: str, webhook_id: UUID) -> bool:
    return await q().delete_webhook(conn, project_id=project_id, webhook_id=webhook_id) is not None


async def webhook_exists(conn: Conn, project_id: str, webhook_id: UUID) -> bool:
    return bool(await q().webhook_exists(conn, project_id=project_id, webhook_id=webhook_id))


async def list_deliveries(
    conn: Conn, project_id: str, webhook_id: UUID, status: str | None, page_size: int
) -> list[WebhookDelivery]:
    return await as_structs(
        WebhookDelivery,
        q().list_webhook_deliveries(
            conn, project_id=project_id, webhook_id=webhook_id, status=status, page_size=page_size
        ),
    )


async def note_extraction_completed(
    conn: Conn, project_id: str, subject_id: str, data: dict[str, Any]
) -> None:
    await q().note_extraction_completed(conn, project_id=project_id, subject_id=subject_id, data=data)


# --- the delivery worker ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claimed:
    """One delivery locked for an attempt, with what the attempt sends."""

    webhook_id: UUID
    event_id: UUID
    subject_id: str
    attempts: int
    url: str
    secret: str
    include_content: bool
    kind: str
    data: dict[str, Any]
    content: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one attempt came to: accepted (a 2xx), or the status and the reason it failed."""

    webhook_id: UUID
    event_id: UUID
    delivered: bool
    http_status: int | None
    error: str | None


async def busy_projects(conn: Conn) -> list[str]:
    return [r["project_id"] for r in await collect(q().list_webhook_projects(conn))]


async def fan_out(conn: Conn, project_id: str, batch: int) -> int:
    return int(await q().fan_out_webhook_events(conn, project_id=project_id, batch=batch))


async def claim(conn: Conn, project_id: str, batch: int) -> list[Claimed]:
    rows = await collect(q().claim_webhook_deliveries(conn, project_id=project_id, batch=batch))
    return [Claimed(**dict(r)) for r in rows]


async def record_attempts(
    conn: Conn, project_id: str, attempts: Sequence[Attempt], max_attempts: int, retry_base_seconds: float
) -> list[str]:
    """Each delivery's status after its attempt: delivered, pending (to retry) or dead."""
    rows = await collect(
        q().record_webhook_attempts(
            conn,
            project_id=project_id,
            webhook_ids=[a.webhook_id for a in attempts],
            event_ids=[a.event_id for a in attempts],
            delivered=[a.delivered for a in attempts],
            http_statuses=[a.http_status for a in attempts],
            errors=[a.error for a in attempts],
            max_attempts=max_attempts,
            retry_base_seconds=retry_base_seconds,
        )
    )
    return [str(r["status"]) for r in rows]


async def purge_history(conn: Conn, project_id: str, keep_days: int) -> int:
    return int(await q().purge_webhook_history(conn, project_id=project_id, keep_days=keep_days))


async def count_dead_letters_all_projects(conn: Conn) -> int:
    return int(await q().count_webhook_dead_letters_all_projects(conn))
