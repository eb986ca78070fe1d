"""The embedding scheduler's order (fairness across tenants, micro-batching) and the work-based
rate limit, with a recording model stand-in: no torch, no database, deterministic.

`GatedModel` plays the model thread: every forward pass it is handed waits until the test opens
the gate, and it records which texts went into which pass, in order.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
from litestar.datastructures import State

from service.api.ratelimit import WorkRateLimiter
from service.embedding.embedder import HashEmbedder
from service.embedding.scheduler import FairScheduler, Purpose
from service.errors import TooManyRequests
from service.observability.metrics import Metrics
from service.settings import Settings
from tests.helpers import bearer
from tests.helpers.app import make_client


class GatedModel:
    def __init__(self) -> None:
        self.passes: list[tuple[Purpose, list[str]]] = []
        self.gate = asyncio.Semaphore(0)
        self.fail_on: str | None = None

    async def run(self, texts: list[str], purpose: Purpose) -> list[str]:
        self.passes.append((purpose, list(texts)))
        await self.gate.acquire()
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("model failure")
        return [f"v({t})" for t in texts]

    async def release(self, passes: int = 1) -> None:
        for _ in range(passes):
            self.gate.release()
        await settle()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def scheduler(model: GatedModel, **overrides: Any) -> FairScheduler[str]:
    options: dict[str, Any] = {"query_max_batch": 16, "write_max_batch": 4, "write_max_cost": 1000.0}
    options.update(overrides)
    return FairScheduler(model.run, cost=lambda t: 1.0, **options)


def submit(
    s: FairScheduler[str], texts: list[str], purpose: Purpose, project: str | None
) -> asyncio.Task[list[str]]:
    return asyncio.ensure_future(s.submit(texts, purpose, project))


async def busy_scheduler(**overrides: Any) -> tuple[GatedModel, FairScheduler[str], asyncio.Task[list[str]]]:
    """A scheduler whose worker is in a pass of project z's write of "x" (held at the model's
    gate), so that what the test submits next is queued; the model, the scheduler, that write."""
    model = GatedModel()
    s = scheduler(model, **overrides)
    blocker = submit(s, ["x"], "write", "z")
    await settle()
    return model, s, blocker


async def test_an_idle_worker_runs_a_lone_query_at_once() -> None:
    model = GatedModel()
    s = scheduler(model)
    task = submit(s, ["q"], "query", "b")
    await settle()
    # No window: the pass started without a second submission or a timer.
    assert model.passes == [("query", ["q"])]
    await model.release()
    assert task.result() == ["v(q)"]
    await s.aclose(RuntimeError("closed"))


async def test_queries_go_before_queued_writes() -> None:
    model = GatedModel()
    s = scheduler(model)
    write = submit(s, [f"w{i}" for i in range(12)], "write", "a")
    await settle()
    assert model.passes == [("write", ["w0", "w1", "w2", "w3"])]  # the first chunk runs
    query = submit(s, ["q"], "query", "b")
    await settle()
    await model.release()  # chunk 1 done: the query is next, not chunk 2
    assert model.passes[1] == ("query", ["q"])
    await model.release()
    assert query.result() == ["v(q)"]
    await model.release(2)
    assert [p[1] for p in model.passes[2:]] == [["w4", "w5", "w6", "w7"], ["w8", "w9", "w10", "w11"]]
    assert write.result() == [f"v(w{i})" for i in range(12)]
    await s.aclose(RuntimeError("closed"))


async def test_a_write_that_waited_write_max_wait_goes_before_queries() -> None:
    """Queries first, until writes have waited write_max_wait: then one chunk of at most
    write_ahead_max_cost goes ahead of the queued queries, and the next chunk (of that write, or
    of another queued as early) waits write_max_wait again, from the chunk's end. Without it, a
    steady stream of context calls (a query always queued when the worker frees) kept writes
    waiting: at 16 clients the writes were the mix's p95 (docs/performance.md, "Writes are not
    starved")."""
    now = [0.0]
    model = GatedModel()
    s = scheduler(
        model, write_max_batch=2, write_max_wait=0.1, write_ahead_max_cost=1.0, clock=lambda: now[0]
    )
    first = submit(s, ["q0"], "query", "a")
    await settle()
    write = submit(s, ["w0", "w1", "w2", "w3"], "write", "b")
    other = submit(s, ["v0"], "write", "d")
    submit(s, ["q1"], "query", "a")
    await settle()
    now[0] = 0.05  # the write has waited less than write_max_wait: the query goes first
    await model.release()
    assert model.passes[1] == ("query", ["q1"])
    submit(s, ["q2"], "query", "a")
    await settle()
    now[0] = 0.1  # now it has waited long enough: a chunk of write_ahead_max_cost, ahead of q2
    await model.release()
    assert model.passes[2] == ("write", ["w0"])
    submit(s, ["q3"], "query", "c")
    await settle()
    now[0] = 0.15  # the chunk came back at 0.1: the queries go first again, though d's write
    await model.release()  # was queued at 0
    assert model.passes[3] == ("query", ["q2", "q3"])
    await model.release(3)
    # No query queued: whole chunks (write_max_batch), the projects in turn.
    assert model.passes[4:] == [("write", ["v0", "w1"]), ("write", ["w2", "w3"])]
    assert first.result() == ["v(q0)"]
    assert write.result() == [f"v(w{i})" for i in range(4)]
    assert other.result() == ["v(v0)"]
    await s.aclose(RuntimeError("closed"))


async def test_with_a_write_lane_writes_and_queries_never_wait_for_each_other() -> None:
    """HAKI_EMBED_WRITE_LANE=own: a worker per queue. A query starts while a write chunk runs, and
    a write while a pass of queries runs; each lane still runs one pass at a time, and the write
    lane still cuts writes into chunks and serves the projects in turn. In the shared lane the
    writes waited for the queries, and made the mix's p95 at 16 clients (docs/performance.md,
    "A lane for writes")."""
    model = GatedModel()
    s = scheduler(model, write_max_batch=2, write_lane=True)
    write = submit(s, ["w0", "w1", "w2"], "write", "a")
    await settle()
    assert not s.queries_in_flight
    query = submit(s, ["q0"], "query", "b")
    await settle()
    # Both lanes are in a pass at once; the query did not wait for the write chunk.
    assert model.passes == [("write", ["w0", "w1"]), ("query", ["q0"])]
    assert s.queries_in_flight
    other = submit(s, ["v0"], "write", "c")
    later = submit(s, ["q1"], "query", "b")
    await settle()
    assert len(model.passes) == 2  # one pass at a time in each lane
    await model.release()  # the write chunk: the write lane goes on with the next chunk
    assert model.passes[2] == ("write", ["w2", "v0"])
    await model.release()  # q0's pass: the query lane takes q1
    assert model.passes[3] == ("query", ["q1"])
    assert query.result() == ["v(q0)"]
    await model.release(2)
    assert len(model.passes) == 4
    assert not s.queries_in_flight
    assert write.result() == ["v(w0)", "v(w1)", "v(w2)"]
    assert other.result() == ["v(v0)"]
    assert later.result() == ["v(q1)"]
    await s.aclose(RuntimeError("closed"))


async def test_a_write_lane_does_not_wait_for_a_stream_of_queries() -> None:
    """In the shared lane a queued write waits for the queued queries (up to write_max_wait);
    with a write lane it starts at once, whatever the queries."""
    model = GatedModel()
    s = scheduler(model, write_lane=True, write_max_wait=float("inf"))
    queries = [submit(s, ["q0"], "query", "a")]
    await settle()
    queries += [submit(s, [f"q{i}"], "query", "a") for i in (1, 2)]  # queued behind q0's pass
    await settle()
    write = submit(s, ["w"], "write", "a")
    await settle()
    assert model.passes == [("query", ["q0"]), ("write", ["w"])]
    await model.release(3)
    assert write.result() == ["v(w)"]
    assert [q.result() for q in queries] == [["v(q0)"], ["v(q1)"], ["v(q2)"]]
    await s.aclose(RuntimeError("closed"))


async def test_close_fails_the_jobs_of_both_lanes() -> None:
    model = GatedModel()
    s = scheduler(model, write_lane=True)
    running = [submit(s, ["w"], "write", "a"), submit(s, ["q"], "query", "a")]
    await settle()
    queued = [submit(s, ["w2"], "write", "a"), submit(s, ["q2"], "query", "a")]
    await settle()
    await s.aclose(RuntimeError("closed"))
    await settle()
    for task in (*running, *queued):
        with pytest.raises(RuntimeError):
            task.result()


async def test_the_waits_and_passes_of_each_purpose_reach_the_metrics() -> None:
    """Each job's wait for its first pass, each pass's time and the texts run, by purpose, as
    GET /metrics reads them (haki_embed_wait_seconds, haki_embed_pass_seconds, haki_embed_texts):
    what an operator needs to see whether context calls queue at the model."""
    now = [0.0]
    model = GatedModel()
    s = scheduler(model, write_max_batch=2, write_lane=True, clock=lambda: now[0])
    first = submit(s, ["q0"], "query", "a")
    write = submit(s, ["w0", "w1", "w2"], "write", "a")
    await settle()
    second = submit(s, ["q1", "q2"], "query", "b")  # queued behind q0's pass
    await settle()
    now[0] = 0.03
    await model.release(2)  # q0's pass and the write's first chunk end at 0.03
    now[0] = 0.04
    await model.release(2)  # q1 and q2 (waited 0.03) and the write's second chunk
    assert (first.result(), second.result(), write.result()) == (
        ["v(q0)"],
        ["v(q1)", "v(q2)"],
        ["v(w0)", "v(w1)", "v(w2)"],
    )
    queries, writes = s.stats["query"], s.stats["write"]
    assert (queries.wait.count, queries.passes.count, queries.texts) == (2, 2, 3)
    assert queries.wait.total == pytest.approx(0.03) and queries.passes.total == pytest.approx(0.04)
    # A write of two chunks waited once, for its first.
    assert (writes.wait.count, writes.passes.count, writes.texts) == (1, 2, 3)
    assert writes.wait.total == 0.0

    metrics = Metrics()
    await metrics.refresh(State({"embedder": SimpleNamespace(scheduler=s), "pool": None}))
    text = metrics.exposition().decode()
    assert 'haki_embed_wait_seconds_bucket{le="0.025",purpose="query"} 1.0' in text
    assert 'haki_embed_wait_seconds_bucket{le="0.05",purpose="query"} 2.0' in text
    assert 'haki_embed_pass_seconds_count{purpose="write"} 2.0' in text
    assert 'haki_embed_texts_total{purpose="query"} 3.0' in text
    await metrics.refresh(State({"embedder": HashEmbedder(), "pool": None}))
    assert "haki_embed_wait_seconds" not in metrics.exposition().decode()  # no scheduler, no figures
    await s.aclose(RuntimeError("closed"))


async def test_concurrent_queries_share_one_pass() -> None:
    model = GatedModel()
    s = scheduler(model, query_max_batch=3)
    first = submit(s, ["q0"], "query", "a")
    await settle()
    others = [submit(s, [f"q{i}"], "query", "a") for i in range(1, 6)]
    await settle()
    await model.release(3)
    # q0 alone (the worker was idle), then the five queued in passes of at most 3.
    assert [p[1] for p in model.passes] == [["q0"], ["q1", "q2", "q3"], ["q4", "q5"]]
    assert first.result() == ["v(q0)"]
    assert [t.result() for t in others] == [[f"v(q{i})"] for i in range(1, 6)]
    await s.aclose(RuntimeError("closed"))


async def test_projects_take_turns_on_writes() -> None:
    model, s, blocker = await busy_scheduler(write_max_batch=2)
    # Project a queues three writes of four texts before b's single write of two.
    a_jobs = [submit(s, [f"a{j}.{i}" for i in range(4)], "write", "a") for j in range(3)]
    b_job = submit(s, ["b0", "b1"], "write", "b")
    await settle()
    await model.release(8)
    owners = [p[1][0][0] for p in model.passes[1:]]
    # b's write runs second, not after a's twelve texts.
    assert owners[:3] == ["a", "b", "a"]
    assert b_job.result() == ["v(b0)", "v(b1)"]
    assert all(len(t.result()) == 4 for t in a_jobs)
    assert blocker.result() == ["v(x)"]
    await s.aclose(RuntimeError("closed"))


async def test_queries_of_several_projects_are_interleaved_in_a_pass() -> None:
    model, s, blocker = await busy_scheduler(query_max_batch=4)
    for i in range(5):
        submit(s, [f"a{i}"], "query", "a")
    submit(s, ["b0"], "query", "b")
    await settle()
    await model.release(3)
    # a and b alternate, so b's query is in the first query pass even though it came last.
    assert model.passes[1] == ("query", ["a0", "b0", "a1", "a2"])
    assert blocker.result() == ["v(x)"]
    await s.aclose(RuntimeError("closed"))


async def test_write_chunks_are_bounded_by_cost() -> None:
    model = GatedModel()
    s = FairScheduler(model.run, query_max_batch=16, write_max_batch=64, write_max_cost=10.0, cost=len)
    task = submit(s, ["aaaa", "bbbb", "cccc", "d", "eeeeeeeeeeeeeeeeeeee"], "write", "a")
    await settle()
    await model.release(4)
    # 4+4 fit in 10; 4+1 fit; a text over the budget still runs, alone.
    assert [p[1] for p in model.passes] == [["aaaa", "bbbb"], ["cccc", "d"], ["eeeeeeeeeeeeeeeeeeee"]]
    assert len(task.result()) == 5
    await s.aclose(RuntimeError("closed"))


async def test_a_caller_that_gave_up_costs_no_pass() -> None:
    model, s, blocker = await busy_scheduler()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(s.submit(["late"], "write", "a"), timeout=0.01)
    await model.release(2)
    assert [p[1] for p in model.passes] == [["x"]]
    assert blocker.result() == ["v(x)"]
    await s.aclose(RuntimeError("closed"))


async def test_a_failed_pass_fails_its_jobs_only() -> None:
    model, s, blocker = await busy_scheduler(write_max_batch=1)
    model.fail_on = "bad"
    bad = submit(s, ["bad", "more"], "write", "a")
    good = submit(s, ["good"], "write", "b")
    await settle()
    await model.release(4)
    with pytest.raises(RuntimeError, match="model failure"):
        bad.result()
    assert good.result() == ["v(good)"]
    # The failed job's second text was never run.
    assert ["more"] not in [p[1] for p in model.passes]
    assert blocker.result() == ["v(x)"]
    await s.aclose(RuntimeError("closed"))


async def test_close_fails_the_queued_jobs() -> None:
    _, s, running = await busy_scheduler()
    queued = submit(s, ["y"], "query", "a")
    await settle()
    await s.aclose(RuntimeError("closed"))
    await settle()
    for task in (running, queued):
        with pytest.raises(RuntimeError):
            task.result()


# --------------------------------------------------------------------------------------------------
# Work-based rate limit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_work_limit_counts_characters_per_project() -> None:
    clock = Clock()
    limiter = WorkRateLimiter(600, clock=clock)  # 10 characters a second
    limiter.take("a", 400)
    limiter.take("a", 200)
    limiter.take("b", 600)  # another project has its own budget
    with pytest.raises(TooManyRequests) as info:
        limiter.take("a", 50)
    assert info.value.details is not None
    assert info.value.details["retry_after_seconds"] == 5
    assert info.value.details["limit_chars_per_minute"] == 600
    clock.now += 5
    limiter.take("a", 50)


def test_work_limit_lets_one_oversized_write_through_a_full_bucket() -> None:
    clock = Clock()
    limiter = WorkRateLimiter(600, clock=clock)
    limiter.take("a", 6000)  # larger than the bucket, but it is full: never refused for ever
    with pytest.raises(TooManyRequests) as info:
        limiter.take("a", 1)
    # The overdraft is paid back first: 5,400 characters at 10 a second, plus the one asked.
    assert info.value.details is not None
    assert info.value.details["retry_after_seconds"] == 541
    assert "(1 asked, 0 left)" in str(info.value), info.value


def test_work_limit_in_the_neighbour_scenario() -> None:
    """docs/reliability.md: ten writes of 30 x 8,000 characters at once against the default."""
    limiter = WorkRateLimiter(Settings().embed_chars_per_minute, clock=Clock())
    outcomes: list[int | None] = []
    for _ in range(10):
        try:
            limiter.take("a", 30 * 8000)
            outcomes.append(None)
        except TooManyRequests as exc:
            assert exc.details is not None
            outcomes.append(exc.details["retry_after_seconds"])
    assert outcomes == [None] * 8 + [5, 5]


def test_work_limit_off() -> None:
    limiter = WorkRateLimiter(0)
    assert not limiter.enabled
    for _ in range(10):
        limiter.take("a", 10**9)


async def test_a_write_over_the_budget_is_429_with_retry_after(settings: Any, conn: Any, key: str) -> None:
    body = {"project_id": "proj-a", "subject_id": "u1", "facts": [{"content": "x" * 4000}]}
    async with make_client(settings, conn, HashEmbedder(), embed_chars_per_minute=6000) as client:
        r1 = await client.post("/v1/facts", json=body, headers=bearer(key))
        assert r1.status_code == 201, r1.text
        r2 = await client.post("/v1/facts", json=body, headers=bearer(key))
        assert r2.status_code == 429, r2.text
        assert r2.json()["code"] == "rate_limited"
        assert "characters" in r2.json()["message"]
        assert int(r2.headers["Retry-After"]) >= 1
        # Nothing of the refused write was stored; context calls are not charged.
        facts = await client.get(
            "/v1/facts", params={"project_id": "proj-a", "subject_id": "u1"}, headers=bearer(key)
        )
        assert facts.status_code == 200
        assert len(facts.json()["facts"]) == 1
        # With an Idempotency-Key the refusal is not recorded: a retry is refused again, not
        # replayed and not stuck "in progress".
        keyed = {**bearer(key), "Idempotency-Key": "budget-test"}
        for _ in range(2):
            r3 = await client.post("/v1/facts", json=body, headers=keyed)
            assert r3.status_code == 429, r3.text
        ctx = await client.post(
            "/v1/context",
            json={"project_id": "proj-a", "subject_id": "u1", "query": "x" * 100},
            headers=bearer(key),
        )
        assert ctx.status_code == 200, ctx.text


def test_hash_embedder_accepts_purpose_and_project() -> None:
    [vec] = asyncio.run(HashEmbedder().embed(["a"], purpose="query", project="p"))
    assert np.isclose(float(np.linalg.norm(vec)), 1.0)


_ = httpx  # the HTTP client type of make_client


async def test_an_events_vectors_in_context_are_not_charged_again(settings: Any, conn: Any, key: str) -> None:
    """docs/reliability.md: a write is charged its texts where it is accepted. Its events' vectors
    in context, made before it answers (HAKI_EVENT_CONTEXT_INLINE), embed those texts again (with
    the previous event's end) and are not charged a second time, as the background task's are not."""
    events = [
        {"content": "y" * 1000, "occurred_at": f"2024-01-01T00:{minute:02d}:00Z"} for minute in range(6)
    ]
    body = {"project_id": "proj-a", "subject_id": "u1", "events": events}
    facts = {"project_id": "proj-a", "subject_id": "u1", "facts": [{"content": "x" * 7000}]}
    async with make_client(
        settings, conn, HashEmbedder(), embed_chars_per_minute=20_000, event_context_inline=True
    ) as client:
        r1 = await client.post("/v1/events", json=body, headers=bearer(key))
        assert r1.status_code == 201, r1.text
        # 6,000 characters charged, 14,000 left: the facts fit (charged, the vectors in context
        # would take ~8,500 of them).
        r2 = await client.post("/v1/facts", json=facts, headers=bearer(key))
        assert r2.status_code == 201, r2.text
