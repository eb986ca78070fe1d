"""The delivery worker: a background task of every serving process.

A round visits each project with work (`busy_projects`) and, per project:
1. fans its new outbox events out into deliveries, one process at a time, in outbox order;
2. claims due deliveries with `FOR UPDATE SKIP LOCKED`, the first pending one of each (webhook,
   subject) only, and keeps them locked while it posts them: another process skips them, so no
   event is delivered twice at the same time, and a subject's next event waits for this one;
3. records each attempt in the same transaction: delivered (2xx), or pending again after a
   delay that doubles per attempt, or dead after HAKI_WEBHOOK_MAX_ATTEMPTS.

A process killed mid-delivery leaves its transaction to roll back: the delivery is pending and
unlocked again, and the next round (any process) sends it again with the same event id. A
delivery is therefore at least once; a receiver deduplicates on `Haki-Event-Id`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec

from service import __version__
from service.errors import UrlRefused
from service.repository import webhooks as repo
from service.repository.webhooks import Attempt, Claimed
from service.settings import Settings
from service.webhooks import signing, urls

log = logging.getLogger("haki.webhooks")

# Outbox events one fan-out statement takes, and deliveries one claim locks and posts at once.
FAN_OUT_BATCH = 500
CLAIM_BATCH = 16
# Delivered events stay listed (GET /v1/webhooks/{id}/deliveries) this long; dead letters stay
# until their webhook is deleted.
HISTORY_DAYS = 7
# How often a process deletes the delivered history of the projects it delivered for.
PURGE_INTERVAL_SECONDS = 3600.0
# The reason of a failed attempt as stored: enough to tell what went wrong, never a body.
MAX_ERROR_CHARS = 300


@dataclass
class Round:
    fanned_out: int = 0
    delivered: int = 0
    failed: int = 0
    dead: int = 0
    projects: list[str] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        return self.delivered + self.failed + self.dead


def body_of(project_id: str, claimed: Claimed) -> bytes:
    """The request body: the same bytes at every attempt, content only for a webhook that asked."""
    data = claimed.data
    if claimed.include_content and claimed.content:
        data = {**data, **claimed.content}
    return msgspec.json.encode(
        {
            "event_id": claimed.event_id,
            "type": claimed.kind,
            "created_at": claimed.created_at,
            "project_id": project_id,
            "data": data,
        }
    )


def http_client(settings: Settings) -> httpx.AsyncClient:
    """No redirects (a 3xx could point anywhere), no proxy from the environment, short time-outs."""
    return httpx.AsyncClient(
        follow_redirects=False,
        trust_env=False,
        timeout=httpx.Timeout(settings.webhook_timeout_seconds),
        headers={"User-Agent": f"haki-webhooks/{__version__}"},
    )


def _pinned(target: urls.Target) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL with the checked address in place of the host, the Host header the receiver
    expects, and the TLS server name to verify its certificate against."""
    parts = urlsplit(target.url)
    address = f"[{target.address}]" if ":" in target.address else target.address
    path = parts.path or "/"
    url = f"{target.scheme}://{address}:{target.port}{path}" + (f"?{parts.query}" if parts.query else "")
    default = urls.SCHEMES[target.scheme] == target.port
    host_header = target.host if default else f"{target.host}:{target.port}"
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    return url, {"Host": host_header}, extensions


def _failed(claimed: Claimed, error: str, status: int | None = None) -> Attempt:
    return Attempt(
        webhook_id=claimed.webhook_id,
        event_id=claimed.event_id,
        delivered=False,
        http_status=status,
        error=error[:MAX_ERROR_CHARS],
    )


async def attempt(
    http: httpx.AsyncClient, settings: Settings, allowed: frozenset[str], project_id: str, claimed: Claimed
) -> Attempt:
    """One POST; never raises. The URL is checked again first, on what its host resolves to now."""
    try:
        target = await urls.check(claimed.url, allowed)
    except UrlRefused as exc:
        return _failed(claimed, f"refused, nothing sent: {exc.message}")
    body = body_of(project_id, claimed)
    url, headers, extensions = _pinned(target)
    headers |= {
        "Content-Type": "application/json",
        signing.EVENT_ID_HEADER: str(claimed.event_id),
        signing.EVENT_TYPE_HEADER: claimed.kind,
        signing.SIGNATURE_HEADER: signing.signature_header(claimed.secret, int(time.time()), body),
    }
    timeout = settings.webhook_timeout_seconds
    try:
        # httpx bounds each phase; asyncio.timeout the whole attempt (a trickling receiver).
        async with (
            asyncio.timeout(timeout),
            http.stream("POST", url, content=body, headers=headers, extensions=extensions) as response,
        ):
            status = response.status_code  # the body is never read
    except (TimeoutError, httpx.TimeoutException):
        return _failed(claimed, f"no answer within {timeout:g} s (HAKI_WEBHOOK_TIMEOUT_SECONDS)")
    except httpx.HTTPError as exc:
        return _failed(claimed, f"{type(exc).__name__}: {exc}")
    if 200 <= status < 300:
        return Attempt(
            webhook_id=claimed.webhook_id,
            event_id=claimed.event_id,
            delivered=True,
            http_status=status,
            error=None,
        )
    return _failed(claimed, f"HTTP {status}", status)


async def deliver_project(
    pool: Any, settings: Settings, http: httpx.AsyncClient, project_id: str, done: Round
) -> None:
    allowed = urls.allowed_hosts(settings.webhook_allowed_hosts)
    async with pool.acquire() as conn, conn.transaction():
        done.fanned_out += await repo.fan_out(conn, project_id, FAN_OUT_BATCH)
    async with pool.acquire() as conn, conn.transaction():
        claimed = await repo.claim(conn, project_id, CLAIM_BATCH)
        if not claimed:
            return
        # The claimed deliveries are of distinct (webhook, subject) pairs: no order between them.
        results = await asyncio.gather(*(attempt(http, settings, allowed, project_id, c) for c in claimed))
        statuses = await repo.record_attempts(
            conn, project_id, results, settings.webhook_max_attempts, settings.webhook_retry_base_seconds
        )
    for status in statuses:
        if status == "delivered":
            done.delivered += 1
        elif status == "dead":
            done.dead += 1
        else:
            done.failed += 1


async def deliver_once(pool: Any, settings: Settings, http: httpx.AsyncClient) -> Round:
    """One round over every project with work."""
    done = Round()
    async with pool.acquire() as conn:
        done.projects = await repo.busy_projects(conn)
    for project_id in done.projects:
        await deliver_project(pool, settings, http, project_id, done)
    return done


async def purge_history(pool: Any, projects: list[str]) -> int:
    gone = 0
    for project_id in projects:
        async with pool.acquire() as conn:
            gone += await repo.purge_history(conn, project_id, HISTORY_DAYS)
    return gone


async def run_forever(pool: Any, settings: Settings, on_round: Callable[[Round], None]) -> None:
    """Rounds until cancelled: the next at once while there was work, else after
    HAKI_WEBHOOK_POLL_INTERVAL_SECONDS. A failed round (database down) is logged and tried again."""
    async with http_client(settings) as http:
        visited: set[str] = set()
        last_purge = time.monotonic()
        while True:
            worked = False
            try:
                done = await deliver_once(pool, settings, http)
                on_round(done)
                worked = done.attempts > 0 or done.fanned_out > 0
                if done.dead:
                    log.warning("webhooks: %d delivery(ies) became dead letters", done.dead)
                visited.update(done.projects)
                if time.monotonic() - last_purge > PURGE_INTERVAL_SECONDS:
                    await purge_history(pool, sorted(visited))
                    visited.clear()
                    last_purge = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "webhooks: delivery round failed, retrying in %.1f s: %r",
                    settings.webhook_poll_interval_seconds,
                    exc,
                )
            if not worked:
                await asyncio.sleep(settings.webhook_poll_interval_seconds)
