"""Webhook routes: subscriptions per project and their deliveries (docs/webhooks.md)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from litestar import Controller, delete, get, post
from litestar.params import Parameter

from service import structs
from service.api.deps import ERRORS, Deps, in_key_project
from service.api.memory import ProjectQuery
from service.constants import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT
from service.webhooks import subscriptions

WebhookIdPath = Annotated[UUID, Parameter(description="A webhook_id of the key's project.")]


class WebhooksController(Controller):
    path = "/v1/webhooks"
    tags = ["webhooks"]

    @post(
        "/",
        status_code=201,
        responses=ERRORS,
        summary="Subscribe a URL to events of the key's project",
        description="The URL must be http(s), and every address its host resolves to public, unless "
        "the host is listed in HAKI_WEBHOOK_ALLOWED_HOSTS: otherwise a 422 `url_refused`, and "
        "nothing is sent to it. The answer carries the signing `secret`, shown this once. Each "
        "committed change of a subscribed kind is then posted to the URL, signed "
        "(`Haki-Signature`), with a stable `Haki-Event-Id`, in order per subject, retried with "
        "exponential back-off until HAKI_WEBHOOK_MAX_ATTEMPTS, then kept as a dead letter.",
    )
    async def create_webhook(self, data: structs.CreateWebhookRequest, deps: Deps) -> structs.WebhookCreated:
        data = in_key_project(data, deps.principal)
        return await subscriptions.create_webhook(deps.conn, deps.principal, deps.settings, data)

    @get(
        "/",
        responses=ERRORS,
        summary="List the project's webhooks with their deliveries by status",
        description="Never shows a secret. `dead` counts the dead letters.",
    )
    async def list_webhooks(self, deps: Deps, project_id: ProjectQuery) -> structs.WebhookList:
        return await subscriptions.list_webhooks(deps.conn, deps.principal, project_id)

    @delete(
        "/{webhook_id:uuid}",
        status_code=200,
        responses=ERRORS,
        summary="Delete a webhook and its deliveries",
    )
    async def delete_webhook(
        self, deps: Deps, webhook_id: WebhookIdPath, project_id: ProjectQuery
    ) -> structs.WebhookDeleted:
        return await subscriptions.delete_webhook(deps.conn, deps.principal, webhook_id)

    @get(
        "/{webhook_id:uuid}/deliveries",
        responses=ERRORS,
        summary="List a webhook's deliveries, newest first (`status=dead`: its dead letters)",
    )
    async def list_deliveries(
        self,
        deps: Deps,
        webhook_id: WebhookIdPath,
        project_id: ProjectQuery,
        status: Annotated[
            structs.DeliveryStatus | None,
            Parameter(query="status", description="Only deliveries with this status."),
        ] = None,
        limit: Annotated[
            int, Parameter(query="limit", ge=1, le=MAX_PAGE_LIMIT, description="At most this many, 1..500.")
        ] = DEFAULT_PAGE_LIMIT,
    ) -> structs.WebhookDeliveryList:
        return await subscriptions.list_deliveries(deps.conn, deps.principal, webhook_id, status, limit)
