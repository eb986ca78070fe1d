"""The delivery worker on a real pool, over committed data (docs/webhooks.md, "Delivery"): no row
lock is held while a receiver answers, so a webhook is deleted while its receiver holds a
delivery; and one project's slow receiver holds up no other project's deliveries."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
import pytest

from service.embedding.embedder import Embedder
from service.settings import Settings
from service.webhooks import worker
from tests.helpers import bearer, json_of, write_facts
from tests.helpers.app import pooled_client
from tests.helpers.receiver import Delivery, Receiver, receiving
from tests.helpers.serving import new_project

# Only a guard against a hang: every wait below ends on an event well before it.
HANG_GUARD_SECONDS = 90.0


@dataclass
class Tenant:
    """A committed project, its key and its receiver."""

    project_id: str
    key: str
    receiver: Receiver


@dataclass
class Scene:
    """Two tenants and a worker running on the app's pool: `slow`'s receiver holds each
    delivery until `release`, `quick`'s answers at once."""

    client: httpx.AsyncClient
    slow: Tenant
    quick: Tenant
    held: threading.Event
    release: threading.Event
    delivering: asyncio.Task[None]
    attempts: list[worker.Round]

    async def subscribe(self, tenant: Tenant) -> str:
        body = {"url": tenant.receiver.url, "events": ["fact.retracted"]}
        made = json_of(await self.client.post("/v1/webhooks", json=body, headers=bearer(tenant.key)), 201)
        webhook_id: str = made["webhook_id"]
        return webhook_id

    async def retract(self, tenant: Tenant, subject: str) -> None:
        """One fact written then retracted: one fact.retracted event."""
        (fact,) = await write_facts(
            self.client, tenant.key, [f"{subject} was here"], subject, tenant.project_id
        )
        r = await self.client.patch(
            f"/v1/facts/{fact['fact_id']}", json={"status": "retracted"}, headers=bearer(tenant.key)
        )
        json_of(r)

    async def deliveries(self, tenant: Tenant, webhook_id: str) -> list[dict[str, Any]]:
        r = await self.client.get(f"/v1/webhooks/{webhook_id}/deliveries", headers=bearer(tenant.key))
        rows: list[dict[str, Any]] = json_of(r)["deliveries"]
        return rows

    async def delivered(self, tenant: Tenant, webhook_id: str) -> bool:
        """Its one event is delivered and recorded so."""
        return [d["status"] for d in await self.deliveries(tenant, webhook_id)] == ["delivered"]

    def still_held(self, event_id: str) -> bool:
        """The slow receiver has not answered this delivery yet."""
        return not self.release.is_set() and self.slow.receiver.in_flight.get(event_id) == 1


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Waits until `check()`; the guard only turns a hang into a failure."""
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


@pytest.fixture
async def scene(settings: Settings, migrated: str, hash_embedder: Embedder) -> AsyncIterator[Scene]:
    # A time-out far above the statement timeout (5 s): were the attempt to hold its row lock
    # until it ends, a DELETE of its webhook would wait past that timeout (503).
    wsettings = msgspec.structs.replace(
        settings,
        webhook_allowed_hosts="127.0.0.1",
        webhook_timeout_seconds=30.0,
        webhook_poll_interval_seconds=0.05,
        rate_limit_per_minute=0,
    )
    held, release = threading.Event(), threading.Event()

    def hold(delivery: Delivery) -> None:
        held.set()
        release.wait(HANG_GUARD_SECONDS)

    with receiving(Receiver(before_answer=hold)) as slow, receiving(Receiver()) as quick:
        one = Tenant(*await new_project(settings, "wh-slow"), slow)
        other = Tenant(*await new_project(settings, "wh-quick"), quick)
        async with pooled_client(wsettings, hash_embedder) as (client, pool):
            attempts: list[worker.Round] = []
            delivering = asyncio.create_task(worker.run_forever(pool, wsettings, attempts.append))
            try:
                yield Scene(client, one, other, held, release, delivering, attempts)
            finally:
                release.set()
                delivering.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await delivering
                # Committed data: nothing may be left for a later test's worker to find.
                for t in (one, other):
                    for hook in json_of(await client.get("/v1/webhooks", headers=bearer(t.key)))["webhooks"]:
                        await client.delete(f"/v1/webhooks/{hook['webhook_id']}", headers=bearer(t.key))
                async with worker.http_client(wsettings) as http:
                    await worker.deliver_once(pool, wsettings, http)


async def test_a_webhook_is_deleted_while_its_receiver_holds_a_delivery(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    """DELETE answers 200 at once (it waited on the attempt's row lock, past the statement
    timeout: 503); the attempt's late record finds nothing to change and the worker goes on."""
    caplog.set_level(logging.WARNING, logger="haki.webhooks")
    webhook_id = await scene.subscribe(scene.slow)
    await scene.retract(scene.slow, "held")
    assert await asyncio.to_thread(scene.held.wait, HANG_GUARD_SECONDS)
    r = await scene.client.delete(f"/v1/webhooks/{webhook_id}", headers=bearer(scene.slow.key))
    assert r.status_code == 200, r.text
    assert scene.still_held(scene.slow.receiver.deliveries[0].event_id)
    listed = json_of(await scene.client.get("/v1/webhooks", headers=bearer(scene.slow.key)))
    assert listed == {"webhooks": []}

    scene.release.set()

    async def recorded() -> bool:
        return bool(scene.attempts)

    await until(recorded, "the held attempt never ended")
    assert [(a.delivered, a.failed, a.dead) for a in scene.attempts] == [(1, 0, 0)]
    assert not scene.delivering.done()
    assert [r.getMessage() for r in caplog.records if r.name == "haki.webhooks"] == []
    # Still delivering: another project's next event goes out and is recorded.
    quick_hook = await scene.subscribe(scene.quick)
    await scene.retract(scene.quick, "after")
    await until(lambda: scene.delivered(scene.quick, quick_hook), "nothing delivered after the deletion")


async def test_a_slow_receiver_holds_up_no_other_projects_delivery(scene: Scene) -> None:
    """Project A's receiver holds its delivery; project B's, made after, is delivered and recorded
    meanwhile, while A's attempt has recorded nothing yet (B once waited for A's time-out)."""
    slow_hook = await scene.subscribe(scene.slow)
    quick_hook = await scene.subscribe(scene.quick)
    await scene.retract(scene.slow, "a")
    assert await asyncio.to_thread(scene.held.wait, HANG_GUARD_SECONDS)
    await scene.retract(scene.quick, "b")
    await until(lambda: scene.delivered(scene.quick, quick_hook), "B was never delivered")
    (held,) = await scene.deliveries(scene.slow, slow_hook)
    assert (held["status"], held["last_attempt_at"], held["last_error"]) == ("pending", None, None)
    assert scene.still_held(held["event_id"])

    scene.release.set()
    await until(lambda: scene.delivered(scene.slow, slow_hook), "A was never delivered")
    assert len(scene.slow.receiver.deliveries) == len(scene.quick.receiver.deliveries) == 1
