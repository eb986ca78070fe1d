"""Per-key rate limit: a token bucket per API key, in this process's memory.

Each key may burst up to `rate_limit_per_minute` requests, then gets one more every
60/rate seconds. The buckets live in one process: N workers behind a balancer allow N times the
rate, which is acceptable for a guard against runaway agents (not a billing meter).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar
from uuid import UUID

from service.errors import TooManyRequests

K = TypeVar("K", bound=Hashable)


class TokenBuckets(Generic[K]):
    """A token bucket per key: `capacity` tokens at most, refilled at capacity per minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.refill_per_second = per_minute / 60.0
        self.clock = clock
        # key -> (tokens left, time they were counted). Bounded by the number of live keys.
        self._buckets: dict[K, tuple[float, float]] = {}

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def spend(self, key: K, amount: float) -> tuple[int, float] | None:
        """Spends `amount` of the key's tokens; when they are short, spends nothing and returns
        the wait in seconds and what is left. An amount over the capacity passes a full bucket
        (and overdraws it), so no request is refused for ever."""
        now = self.clock()
        left, then = self._buckets.get(key, (self.capacity, now))
        left = min(self.capacity, left + (now - then) * self.refill_per_second)
        need = min(amount, self.capacity)
        if left < need:
            self._buckets[key] = (left, now)
            return max(1, math.ceil((need - left) / self.refill_per_second)), left
        self._buckets[key] = (left - amount, now)
        return None


class RateLimiter(TokenBuckets[UUID]):
    def take(self, key_id: UUID) -> None:
        """Spends one token of this key, or raises TooManyRequests with the wait in seconds."""
        if not self.enabled:
            return
        short = self.spend(key_id, 1.0)
        if short is not None:
            wait = short[0]
            raise TooManyRequests(
                f"Rate limit of {int(self.capacity)} requests per minute for this API key exceeded; "
                f"retry in {wait} s.",
                retry_after_seconds=wait,
                limit_per_minute=int(self.capacity),
            )


class WorkRateLimiter(TokenBuckets[str]):
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

    def take(self, project: str, chars: int) -> None:
        """Spends `chars` of this project's budget, or raises TooManyRequests with the wait."""
        if not self.enabled or chars <= 0:
            return
        short = self.spend(project, float(chars))
        if short is not None:
            wait, left = short
            raise TooManyRequests(
                f"Embedding budget of {int(self.capacity)} characters per minute for this project "
                # An overdrawn bucket holds less than nothing; a client is told none is left.
                f"exceeded ({chars} asked, {max(0, int(left))} left); retry in {wait} s.",
                retry_after_seconds=wait,
                limit_chars_per_minute=int(self.capacity),
            )
