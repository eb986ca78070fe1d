"""Per-key rate limit: a token bucket per API key, in this process's memory.

Each key may burst up to `rate_limit_per_minute` requests, then gets one more every
60/rate seconds. The buckets live in one process: N workers behind a balancer allow N times the
rate, which is acceptable for a guard against runaway agents (not a billing meter).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from uuid import UUID

from service.errors import TooManyRequests


class RateLimiter:
    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.refill_per_second = per_minute / 60.0
        self.clock = clock
        # key id -> (tokens left, time they were counted). Bounded by the number of live keys.
        self._buckets: dict[UUID, tuple[float, float]] = {}

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def take(self, key_id: UUID) -> None:
        """Spends one token of this key, or raises TooManyRequests with the wait in seconds."""
        if not self.enabled:
            return
        now = self.clock()
        tokens, then = self._buckets.get(key_id, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - then) * self.refill_per_second)
        if tokens < 1.0:
            self._buckets[key_id] = (tokens, now)
            wait = max(1, math.ceil((1.0 - tokens) / self.refill_per_second))
            raise TooManyRequests(
                f"Rate limit of {int(self.capacity)} requests per minute for this API key exceeded; "
                f"retry in {wait} s.",
                retry_after_seconds=wait,
                limit_per_minute=int(self.capacity),
            )
        self._buckets[key_id] = (tokens - 1.0, now)


class WorkRateLimiter:
    """Per-project budget of embedding work: characters per minute, as a token bucket.

    Counts what the embedder is sent, not requests: one request may hold 1,000 facts of 8,000
    characters. The default, 2 M characters a minute, is about a minute of the local model's work
    on short facts on 2 cores, so a project may keep the model busy in bursts but not for ever;
    for an OpenAI-compatible provider characters follow what is billed (docs/reliability.md,
    "Fair embedding"). A write that would overdraw the bucket is refused whole, before any
    embedding, with the wait until the bucket holds it again. A request larger than the whole
    bucket is still let through a full bucket (and overdraws it), so no legal body is refused for
    ever. In-process, like RateLimiter.
    """

    def __init__(self, chars_per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(chars_per_minute)
        self.refill_per_second = chars_per_minute / 60.0
        self.clock = clock
        # project -> (characters left, time they were counted). Bounded by the number of projects.
        self._buckets: dict[str, tuple[float, float]] = {}

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def take(self, project: str, chars: int) -> None:
        """Spends `chars` of this project's budget, or raises TooManyRequests with the wait."""
        if not self.enabled or chars <= 0:
            return
        now = self.clock()
        left, then = self._buckets.get(project, (self.capacity, now))
        left = min(self.capacity, left + (now - then) * self.refill_per_second)
        need = min(float(chars), self.capacity)
        if left < need:
            self._buckets[project] = (left, now)
            wait = max(1, math.ceil((need - left) / self.refill_per_second))
            raise TooManyRequests(
                f"Embedding budget of {int(self.capacity)} characters per minute for this project "
                f"exceeded ({chars} asked, {int(left)} left); retry in {wait} s.",
                retry_after_seconds=wait,
                limit_chars_per_minute=int(self.capacity),
            )
        self._buckets[project] = (left - float(chars), now)
