"""POST/GET/DELETE /v1/webhooks and a webhook's deliveries: a project's subscriptions."""

from __future__ import annotations

from uuid import UUID

import msgspec

from service.api.auth import Principal
from service.errors import Conflict, NotFound
from service.ids import uuid7
from service.repository import Conn
from service.repository import webhooks as repo
from service.settings import Settings
from service.structs import (
    CreateWebhookRequest,
    DeliveryStatus,
    WebhookCreated,
    WebhookDeleted,
    WebhookDeliveryList,
    WebhookList,
)
from service.webhooks import signing, urls

# Each subscription is one more request per event; a bound keeps a project's fan-out small.
MAX_WEBHOOKS_PER_PROJECT = 20


async def create_webhook(
    conn: Conn, principal: Principal, settings: Settings, req: CreateWebhookRequest
) -> WebhookCreated:
    """Checks the URL (scheme, then every address its host resolves to) before anything is
    stored; nothing is sent to it now."""
    principal.require(req.project_id)
    await urls.check(req.url, urls.allowed_hosts(settings.webhook_allowed_hosts))
    secret = signing.new_secret()
    events: list[str] = list(dict.fromkeys(req.events))
    made = await repo.insert_webhook(
        conn,
        req.project_id,
        uuid7(),
        req.url,
        events,
        req.include_content,
        secret,
        MAX_WEBHOOKS_PER_PROJECT,
    )
    if made is None:
        raise Conflict(
            f"A project holds at most {MAX_WEBHOOKS_PER_PROJECT} webhooks; delete one first.",
            max_webhooks=MAX_WEBHOOKS_PER_PROJECT,
        )
    return WebhookCreated(**msgspec.structs.asdict(made), secret=secret)


async def list_webhooks(conn: Conn, principal: Principal, project_id: str) -> WebhookList:
    principal.require(project_id)
    return WebhookList(webhooks=await repo.list_webhooks(conn, project_id))


async def delete_webhook(conn: Conn, principal: Principal, webhook_id: UUID) -> WebhookDeleted:
    if not await repo.delete_webhook(conn, principal.project_id, webhook_id):
        raise NotFound("No webhook with this id in the key's project.", webhook_id=str(webhook_id))
    return WebhookDeleted(webhook_id=webhook_id, deleted=True)


async def list_deliveries(
    conn: Conn, principal: Principal, webhook_id: UUID, status: DeliveryStatus | None, limit: int
) -> WebhookDeliveryList:
    if not await repo.webhook_exists(conn, principal.project_id, webhook_id):
        raise NotFound("No webhook with this id in the key's project.", webhook_id=str(webhook_id))
    rows = await repo.list_deliveries(conn, principal.project_id, webhook_id, status, limit)
    return WebhookDeliveryList(deliveries=rows)
