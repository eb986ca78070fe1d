"""Repository of webhooks: the only code that runs queries/webhooks.sql."""

from __future__ import annotations

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
    """None when the project holds max_webhooks already (counted under the project's lock)."""
    async with conn.transaction():
        await q().lock_project_webhooks(conn, project_id=project_id)
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
    """One delivery leased for an attempt, with what the attempt sends; `attempts` counts this one
    and names the claim when its outcome is recorded."""

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
    """What a claim's attempt came to: accepted (a 2xx, no error), or the reason it failed and
    the receiver's status if it answered."""

    webhook_id: UUID
    event_id: UUID
    attempts: int
    http_status: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        return self.error is None


async def busy_projects(conn: Conn) -> list[str]:
    return [r["project_id"] for r in await collect(q().list_webhook_projects(conn))]


async def fan_out(conn: Conn, project_id: str, batch: int) -> int:
    return int(await q().fan_out_webhook_events(conn, project_id=project_id, batch=batch))


async def claim(conn: Conn, project_id: str, batch: int, lease_seconds: float) -> list[Claimed]:
    rows = await collect(
        q().claim_webhook_deliveries(conn, project_id=project_id, batch=batch, lease_seconds=lease_seconds)
    )
    return [Claimed(**dict(r)) for r in rows]


async def record_attempt(
    conn: Conn, project_id: str, attempt: Attempt, max_attempts: int, retry_base_seconds: float
) -> str | None:
    """The delivery's status after its attempt: delivered, pending (to retry) or dead; None when
    the delivery is gone (its webhook or event deleted meanwhile) or another claim took it over."""
    status = await q().record_webhook_attempt(
        conn,
        project_id=project_id,
        webhook_id=attempt.webhook_id,
        event_id=attempt.event_id,
        attempts=attempt.attempts,
        max_attempts=max_attempts,
        retry_base_seconds=retry_base_seconds,
        http_status=attempt.http_status,
        error=attempt.error,
    )
    return None if status is None else str(status)


async def purge_history(conn: Conn, project_id: str, keep_days: int) -> int:
    return int(await q().purge_webhook_history(conn, project_id=project_id, keep_days=keep_days))


async def count_dead_letters_all_projects(conn: Conn) -> int:
    return int(await q().count_webhook_dead_letters_all_projects(conn))
