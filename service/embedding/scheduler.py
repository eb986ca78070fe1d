"""The embedding work shared fairly: queries first, projects in turn, concurrent queries batched.

The local model runs one forward pass at a time per worker. In front of it:
- two round-robin queues, one for query embeddings (a context call waits on them) and one for
  write embeddings;
- with a write lane (`write_lane`, HAKI_EMBED_WRITE_LANE=own, the default), each queue has a
  worker of its own: queries never wait for a write chunk and writes never wait for queries; the
  embedder runs the two on threads of their own, a write chunk on one core while queries are in
  flight (`queries_in_flight`), so that the two lanes and PostgreSQL share two cores
  (docs/performance.md, "A lane for writes");
- without it (`shared`), one worker drains queries first, so a query waits at most for the
  write chunk already running, and one more once writes have waited
  `write_max_wait` seconds (queued, and no pass of writes since): then a chunk of writes goes
  first, so that a steady stream of context calls (16 agents) cannot starve the writes
  (docs/performance.md, "Writes are not starved");
- each queue keeps a FIFO per project and serves the projects in turn, so one project's ten
  bulk writes do not stand in front of another project's single write;
- micro-batching without a window: when the worker becomes free it takes every query queued
  (up to `query_max_batch`) into one forward pass. An idle worker starts a lone query at once,
  so single-call latency pays no wait (docs/performance.md, "Query embedding").
- writes are cut into chunks bounded by texts and by cost (characters the model will read), so
  a queued query never waits behind more than one short chunk (shared lane), and a write lane
  yields its core to the queries between chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Literal, TypeVar

Purpose = Literal["query", "write"]
T = TypeVar("T")


class _Job(Generic[T]):
    __slots__ = ("future", "next", "project", "queued_at", "remaining", "results", "texts")

    def __init__(
        self, texts: Sequence[str], project: str | None, future: asyncio.Future[list[T]], now: float
    ) -> None:
        self.texts = texts
        self.queued_at = now
        self.project = project
        self.future = future
        self.next = 0  # the first text not yet handed to the worker
        self.remaining = len(texts)  # texts whose vectors have not come back yet
        self.results: list[T | None] = [None] * len(texts)

    @property
    def live(self) -> bool:
        """False once the caller has gone (time-out, cancellation) or the job failed."""
        return not self.future.done()


Slice = tuple[_Job[T], int, int]

# Seconds a job waits for its first pass, and a pass runs: from a lone query (~5 ms) to a write
# chunk of long texts on two busy cores (~0.4 s) and a write left waiting behind a stream of
# queries (`shared`).
TALLY_BOUNDS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Tally:
    """A histogram the scheduler keeps for the process; GET /metrics of each app reads it."""

    __slots__ = ("count", "counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * len(TALLY_BOUNDS)
        self.count = 0
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        i = bisect_left(TALLY_BOUNDS, seconds)  # the first bucket whose bound is >= seconds
        if i < len(self.counts):
            self.counts[i] += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus buckets: (upper bound, observations at or below it), +Inf last."""
        out: list[tuple[str, float]] = []
        seen = 0
        for bound, n in zip(TALLY_BOUNDS, self.counts, strict=True):
            seen += n
            out.append((repr(bound), seen))
        out.append(("+Inf", self.count))
        return out


class LaneStats:
    """Per purpose: how long jobs waited for their first pass, how long passes ran, texts run."""

    __slots__ = ("passes", "texts", "wait")

    def __init__(self) -> None:
        self.wait = Tally()
        self.passes = Tally()
        self.texts = 0


class RoundRobin(Generic[T]):
    """A FIFO of jobs per project; `take` serves the projects in turn."""

    def __init__(self) -> None:
        self._queues: OrderedDict[str | None, deque[_Job[T]]] = OrderedDict()

    def push(self, job: _Job[T]) -> None:
        self._queues.setdefault(job.project, deque()).append(job)

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def queued_since(self) -> float | None:
        """When the longest-queued job at the head of a project's queue was queued."""
        heads = [q[0].queued_at for q in self._queues.values() if q and q[0].live]
        return min(heads, default=None)

    def take(self, max_texts: int, max_cost: float, cost: Callable[[str], float]) -> list[Slice[T]]:
        """Up to `max_texts` texts and `max_cost` (one text at least), one project after another."""
        picked: list[Slice[T]] = []
        texts = 0
        spent = 0.0
        while self._queues and texts < max_texts and spent < max_cost:
            project, queue = next(iter(self._queues.items()))
            while queue and not queue[0].live:
                queue.popleft()
            if not queue:
                del self._queues[project]
                continue
            job = queue[0]
            start = end = job.next
            while end < len(job.texts) and texts < max_texts:
                c = cost(job.texts[end])
                if (texts > 0) and spent + c > max_cost:
                    break
                spent += c
                texts += 1
                end += 1
            if end == start:
                break
            job.next = end
            picked.append((job, start, end))
            if end >= len(job.texts):
                queue.popleft()
            if queue:
                self._queues.move_to_end(project)  # this project's turn is over
            else:
                del self._queues[project]
        return picked

    def fail_all(self, exc: BaseException) -> None:
        for queue in self._queues.values():
            for job in queue:
                if job.live:
                    job.future.set_exception(exc)
        self._queues.clear()


class FairScheduler(Generic[T]):
    """Feeds `run` from the query and write queues: one call at a time, or with `write_lane` one
    at a time per queue; see the module doc."""

    def __init__(
        self,
        run: Callable[[list[str], Purpose], Awaitable[list[T]]],
        *,
        query_max_batch: int,
        write_max_batch: int,
        write_max_cost: float,
        write_max_wait: float = float("inf"),
        write_ahead_max_cost: float | None = None,
        cost: Callable[[str], float] = len,
        clock: Callable[[], float] = time.monotonic,
        write_lane: bool = False,
    ) -> None:
        self._run = run
        self.query_max_batch = max(1, query_max_batch)
        self.write_max_batch = max(1, write_max_batch)
        self.write_max_cost = write_max_cost
        self.write_max_wait = write_max_wait
        self.write_ahead_max_cost = write_max_cost if write_ahead_max_cost is None else write_ahead_max_cost
        self._cost = cost
        self._clock = clock
        self._writes_served_at = float("-inf")  # when the last pass of writes came back
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queries: RoundRobin[T] = RoundRobin()
        self._writes: RoundRobin[T] = RoundRobin()
        self.write_lane = write_lane
        self._wake: asyncio.Event | None = None
        self._write_wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._write_worker: asyncio.Task[None] | None = None
        self._querying = False  # a pass of queries is running
        self.passes = 0  # forward passes run, for tests and benchmarks
        self.stats: dict[Purpose, LaneStats] = {"query": LaneStats(), "write": LaneStats()}

    async def submit(self, texts: Sequence[str], purpose: Purpose, project: str | None) -> list[T]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._start(loop)
        assert self._wake is not None
        future: asyncio.Future[list[T]] = loop.create_future()
        job = _Job(texts, project, future, self._clock())
        (self._queries if purpose == "query" else self._writes).push(job)
        if purpose == "write" and self._write_wake is not None:
            self._write_wake.set()
        else:
            self._wake.set()
        # A caller that gives up (wait_for, time-out) cancels `future`: the job is skipped.
        return await future

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        # A new event loop (tests run one per module) gets its own queues and worker.
        self._loop = loop
        self._queries = RoundRobin()
        self._writes = RoundRobin()
        self._wake = asyncio.Event()
        self._querying = False
        self._worker = loop.create_task(self._work(self._wake, self.next_batch), name="haki-embed-scheduler")
        self._write_wake = self._write_worker = None
        if self.write_lane:
            self._write_wake = asyncio.Event()
            self._write_worker = loop.create_task(
                self._work(self._write_wake, self.next_write_batch), name="haki-embed-writes"
            )

    def next_batch(self) -> tuple[Purpose, list[Slice[T]]]:
        """Every queued query (up to the batch cap); with a write lane nothing else. Without one,
        when no query is queued, one fair chunk of writes. When a write is
        queued and writes have had no pass for `write_max_wait`, a chunk the size of a pass of
        queries (at most `query_max_batch` texts and `write_ahead_max_cost`) goes first instead:
        at most one such chunk ahead of the queries per `write_max_wait`, however the writes are
        cut into jobs. (The local model runs that many texts on one thread, as it runs queries,
        leaving the other core to PostgreSQL.)"""
        if self.write_lane:
            return "query", self._take_queries()
        since = self._writes.queued_since()
        if since is not None and self._clock() - max(since, self._writes_served_at) >= self.write_max_wait:
            ahead = self._writes.take(self.query_max_batch, self.write_ahead_max_cost, self._cost)
            if ahead:
                return "write", ahead
        picked = self._take_queries()
        if picked:
            return "query", picked
        return self.next_write_batch()

    def _take_queries(self) -> list[Slice[T]]:
        """Every queued query, up to the batch cap: one pass."""
        return self._queries.take(self.query_max_batch, float("inf"), self._cost)

    @property
    def queries_in_flight(self) -> bool:
        """A pass of queries is running or queries are queued."""
        return self._querying or len(self._queries) > 0

    def next_write_batch(self) -> tuple[Purpose, list[Slice[T]]]:
        """One fair chunk of writes: the write lane's next, or the shared worker's when no query
        is queued."""
        return "write", self._writes.take(self.write_max_batch, self.write_max_cost, self._cost)

    async def _work(self, wake: asyncio.Event, source: Callable[[], tuple[Purpose, list[Slice[T]]]]) -> None:
        while True:
            await wake.wait()
            purpose, batch = source()
            if not batch:
                wake.clear()
                continue
            texts = [t for job, start, end in batch for t in job.texts[start:end]]
            self.passes += 1
            if purpose == "query":
                self._querying = True
            stats = self.stats[purpose]
            started = self._clock()
            for job, start, _ in batch:
                if start == 0:  # the job's first pass: its wait for the model
                    stats.wait.add(started - job.queued_at)
            try:
                vectors = await self._run(texts, purpose)
            except asyncio.CancelledError:
                for job, _, _ in batch:
                    if job.live:
                        job.future.set_exception(RuntimeError("the embedder closed"))
                raise
            except Exception as exc:
                for job, _, _ in batch:
                    if job.live:
                        job.future.set_exception(exc)
                continue
            finally:
                if purpose == "query":
                    self._querying = False
            stats.passes.add(self._clock() - started)
            stats.texts += len(texts)
            if purpose == "write":
                self._writes_served_at = self._clock()
            pos = 0
            for job, start, end in batch:
                job.results[start:end] = vectors[pos : pos + end - start]
                pos += end - start
                job.remaining -= end - start
                if job.live and job.remaining == 0 and job.next >= len(job.texts):
                    job.future.set_result([r for r in job.results if r is not None])

    async def aclose(self, exc: BaseException) -> None:
        workers = [w for w in (self._worker, self._write_worker) if w is not None and not w.done()]
        self._worker = self._write_worker = None
        self._queries.fail_all(exc)
        self._writes.fail_all(exc)
        if not workers:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:
            # Started on another event loop (a test's), which may be closed: nothing to await.
            if self._loop is not None and not self._loop.is_closed():
                for worker in workers:
                    self._loop.call_soon_threadsafe(worker.cancel)
            return
        for worker in workers:
            worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await worker
