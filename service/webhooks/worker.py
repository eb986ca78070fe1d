"""The delivery worker: a background task of every serving process.

A pass (`Worker.poll`) visits each project with work (`busy_projects`) and, per project:
1. fans its new outbox events out into deliveries, one process at a time, in outbox order;
2. claims due deliveries in a short transaction of its own (`FOR UPDATE SKIP LOCKED`, then
   committed): the first pending one of each (webhook, subject) only, each leased, that is
   counted as an attempt and due again only once the attempt's time-out and a margin are over.
   No process claims a leased delivery, and a subject's next event waits for it;
3. starts each attempt as a task of its own and goes on without waiting for it, so a slow
   receiver holds up its own (webhook, subject) chain only. An attempt posts with no transaction
   open, then records its outcome in a second short transaction: delivered (2xx), or pending
   again after a delay that doubles per attempt, or dead after HAKI_WEBHOOK_MAX_ATTEMPTS; nothing,
   when the webhook or the event was deleted meanwhile.

No row lock is held across an HTTP call, so deleting a webhook or erasing a subject never waits
for a receiver. A process killed mid-delivery leaves its lease to run out: the delivery is then
due again, and any process sends it again with the same event id. A delivery is therefore at
least once; a receiver deduplicates on `Haki-Event-Id`.
"""

from __future__ import annotations

import asyncio
import contextlib
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

# Outbox events one fan-out statement takes.
FAN_OUT_BATCH = 500
# Attempts in flight at once in one process, and of one project: each holds an HTTP connection,
# and the per-project bound keeps one project's slow receivers from taking every place.
MAX_IN_FLIGHT = 64
MAX_IN_FLIGHT_PER_PROJECT = 16
# A lease outlasts the attempt's time-out by this much (the task's start, a timed-out request's
# teardown), so that no other process claims a delivery whose attempt may still be running.
LEASE_MARGIN_SECONDS = 10.0
# Delivered events stay listed (GET /v1/webhooks/{id}/deliveries) this long; dead letters stay
# until their webhook is deleted.
HISTORY_DAYS = 7
# How often a process deletes the delivered history of the projects it delivered for.
PURGE_INTERVAL_SECONDS = 3600.0
# The reason of a failed attempt as stored: enough to tell what went wrong, never a body.
MAX_ERROR_CHARS = 300


@dataclass
class Round:
    """What a pass, or one attempt, came to: the metrics' counts (observe_webhooks)."""

    fanned_out: int = 0
    claimed: int = 0
    delivered: int = 0
    failed: int = 0
    dead: int = 0
    projects: list[str] = field(default_factory=list)

    def add(self, other: Round) -> None:
        self.fanned_out += other.fanned_out
        self.claimed += other.claimed
        self.delivered += other.delivered
        self.failed += other.failed
        self.dead += other.dead


def lease_seconds(settings: Settings) -> float:
    return settings.webhook_timeout_seconds + LEASE_MARGIN_SECONDS


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


def pinned(target: urls.Target) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL with the checked address in place of the host, the Host header the receiver
    expects, and the TLS server name to verify its certificate against."""
    parts = urlsplit(target.url)
    address = f"[{target.address}]" if ":" in target.address else target.address
    path = parts.path or "/"
    url = f"{target.scheme}://{address}:{target.port}{path}" + (f"?{parts.query}" if parts.query else "")
    # Host and the TLS server name carry an internationalised name in its ASCII form (IDNA);
    # an IPv6 literal keeps its brackets in Host (RFC 9110, 7.2), not in the server name.
    name = target.host if target.host.isascii() else target.host.encode("idna").decode("ascii")
    host = f"[{name}]" if ":" in name else name
    default = urls.SCHEMES[target.scheme] == target.port
    host_header = host if default else f"{host}:{target.port}"
    extensions = {"sni_hostname": name} if target.scheme == "https" else {}
    return url, {"Host": host_header}, extensions


def _outcome(claimed: Claimed, error: str | None, status: int | None = None) -> Attempt:
    """The claim's attempt: delivered when it met no error."""
    return Attempt(
        webhook_id=claimed.webhook_id,
        event_id=claimed.event_id,
        attempts=claimed.attempts,
        http_status=status,
        error=None if error is None else error[:MAX_ERROR_CHARS],
    )


async def attempt(
    http: httpx.AsyncClient, settings: Settings, allowed: frozenset[str], project_id: str, claimed: Claimed
) -> Attempt:
    """One POST; never raises. The URL is checked again first, on what its host resolves to now."""
    body = body_of(project_id, claimed)
    timeout = settings.webhook_timeout_seconds
    try:
        # httpx bounds each phase; asyncio.timeout the whole attempt, the address check's lookup
        # too (a trickling receiver, a slow resolver): the lease outlasts it.
        async with asyncio.timeout(timeout):
            target = await urls.check(claimed.url, allowed)
            url, headers, extensions = pinned(target)
            headers |= {
                "Content-Type": "application/json",
                signing.EVENT_ID_HEADER: str(claimed.event_id),
                signing.EVENT_TYPE_HEADER: claimed.kind,
                signing.SIGNATURE_HEADER: signing.signature_header(claimed.secret, int(time.time()), body),
            }
            async with http.stream(
                "POST", url, content=body, headers=headers, extensions=extensions
            ) as response:
                status = response.status_code  # the body is never read
    except UrlRefused as exc:
        return _outcome(claimed, f"refused, nothing sent: {exc.message}")
    except (TimeoutError, httpx.TimeoutException):
        return _outcome(claimed, f"no answer within {timeout:g} s (HAKI_WEBHOOK_TIMEOUT_SECONDS)")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return _outcome(claimed, f"{type(exc).__name__}: {exc}")
    return _outcome(claimed, None if 200 <= status < 300 else f"HTTP {status}", status)


class Worker:
    """Claims due deliveries and runs each attempt as a task of its own, at most MAX_IN_FLIGHT
    at once (MAX_IN_FLIGHT_PER_PROJECT of one project); `on_attempt` gets each recorded attempt's counts."""

    def __init__(
        self,
        pool: Any,
        settings: Settings,
        http: httpx.AsyncClient,
        on_attempt: Callable[[Round], None] | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.http = http
        self.on_attempt = on_attempt
        self.allowed = urls.allowed_hosts(settings.webhook_allowed_hosts)
        self.in_flight: dict[asyncio.Task[None], str] = {}
        # Set when an attempt ends: the next event of its chain may be due at once.
        self.attempt_ended = asyncio.Event()

    def _places(self, project_id: str) -> int:
        mine = sum(1 for p in self.in_flight.values() if p == project_id)
        return min(MAX_IN_FLIGHT_PER_PROJECT - mine, MAX_IN_FLIGHT - len(self.in_flight))

    async def poll(self) -> Round:
        """One pass over the projects with work: fans out, claims what the free places allow and
        starts those attempts, without waiting for any of them."""
        done = Round()
        self.attempt_ended.clear()
        async with self.pool.acquire() as conn:
            done.projects = await repo.busy_projects(conn)
        for project_id in done.projects:
            async with self.pool.acquire() as conn, conn.transaction():
                done.fanned_out += await repo.fan_out(conn, project_id, FAN_OUT_BATCH)
            places = self._places(project_id)
            if places <= 0:
                continue
            async with self.pool.acquire() as conn, conn.transaction():
                claimed = await repo.claim(conn, project_id, places, lease_seconds(self.settings))
            # The claimed deliveries are of distinct (webhook, subject) pairs: no order between them.
            for c in claimed:
                task = asyncio.create_task(self._deliver(project_id, c), name=f"webhook-attempt-{c.event_id}")
                self.in_flight[task] = project_id
                task.add_done_callback(self._ended)
            done.claimed += len(claimed)
        return done

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.in_flight.pop(task, None)
        self.attempt_ended.set()

    async def _deliver(self, project_id: str, claimed: Claimed) -> None:
        """The attempt, then its record; a record that fails leaves the lease to run out."""
        try:
            result = await attempt(self.http, self.settings, self.allowed, project_id, claimed)
        except Exception as exc:  # a fault of ours (attempt never raises): a failure all the same
            result = _outcome(claimed, f"{type(exc).__name__}: {exc}")
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                status = await repo.record_attempt(
                    conn,
                    project_id,
                    result,
                    self.settings.webhook_max_attempts,
                    self.settings.webhook_retry_base_seconds,
                )
        except Exception as exc:
            log.warning("webhooks: recording an attempt failed, it is sent again later: %r", exc)
            return
        counts = Round()
        if status == "dead":
            counts.dead = 1
            log.warning("webhooks: a delivery of webhook %s became a dead letter", claimed.webhook_id)
        elif status == "delivered" or (status is None and result.delivered):
            # None: the webhook or the event was deleted meanwhile; the attempt was made all the same.
            counts.delivered = 1
        else:
            counts.failed = 1
        if self.on_attempt is not None:
            self.on_attempt(counts)

    async def drain(self) -> None:
        """Waits for the attempts in flight now."""
        if self.in_flight:
            await asyncio.wait(list(self.in_flight))

    async def idle(self, seconds: float) -> None:
        """Waits `seconds`, or less if an attempt ends meanwhile (since the last poll)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.attempt_ended.wait()

    async def close(self) -> None:
        """Cancels the attempts in flight: their leases run out and they are sent again later."""
        tasks = list(self.in_flight)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def deliver_once(pool: Any, settings: Settings, http: httpx.AsyncClient) -> Round:
    """One pass that waits for its attempts: every due delivery sent once and recorded."""
    done = Round()
    worker = Worker(pool, settings, http, on_attempt=done.add)
    try:
        polled = await worker.poll()
        await worker.drain()
    finally:
        await worker.close()
    done.add(Round(fanned_out=polled.fanned_out, claimed=polled.claimed))
    done.projects = polled.projects
    return done


async def purge_history(pool: Any, projects: list[str]) -> int:
    gone = 0
    for project_id in projects:
        async with pool.acquire() as conn:
            gone += await repo.purge_history(conn, project_id, HISTORY_DAYS)
    return gone


async def run_forever(pool: Any, settings: Settings, on_attempt: Callable[[Round], None]) -> None:
    """Passes until cancelled: the next at once while the last claimed or fanned out something,
    else after HAKI_WEBHOOK_POLL_INTERVAL_SECONDS or when an attempt ends. A failed pass
    (database down) is logged and tried again. Cancelled, it cancels the attempts in flight."""
    async with http_client(settings) as http:
        worker = Worker(pool, settings, http, on_attempt)
        try:
            await _poll_forever(worker, pool, settings)
        finally:
            await worker.close()


async def _poll_forever(worker: Worker, pool: Any, settings: Settings) -> None:
    visited: set[str] = set()
    last_purge = time.monotonic()
    while True:
        worked = False
        try:
            done = await worker.poll()
            worked = done.claimed > 0 or done.fanned_out > 0
            visited.update(done.projects)
            if time.monotonic() - last_purge > PURGE_INTERVAL_SECONDS:
                await purge_history(pool, sorted(visited))
                visited.clear()
                last_purge = time.monotonic()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "webhooks: delivery pass failed, retrying in %.1f s: %r",
                settings.webhook_poll_interval_seconds,
                exc,
            )
        if not worked:
            await worker.idle(settings.webhook_poll_interval_seconds)
