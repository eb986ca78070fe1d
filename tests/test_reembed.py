"""`haki reembed`: a project's vectors made again by another model, online, resumable, one switch.

Two hash "models" stand in for the old and the new model (HashEmbedder(model=...): another vector
space under another name). The job runs on the test's connection; its batches and the switch are
savepoints there, so a batch that fails leaves the ones before it, as a crashed run does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import asyncpg
import httpx
import numpy as np
import pytest

from service.embedding.embedder import EmbedderError, HashEmbedder, Vector
from service.embedding.scheduler import Purpose
from service.memory import reembed
from service.repository import embedding_model
from service.settings import Settings
from tests.helpers import PROJECT, assert_error, bearer, context, post_facts, write_events, write_facts
from tests.helpers.app import SharedApp
from tests.helpers.sql import load_test_queries

OLD, NEW = HashEmbedder(), HashEmbedder(model="model-b")
FACTS = [f"Alice visited city number {i} in spring" for i in range(7)] + ["Alice's cat is called Miso"]
EVENTS = [(f"Alice wrote a postcard home, the {i}th", "2024-03-01T09:30:00Z") for i in range(5)]


class Recording:
    """The new model, counting the texts it embeds; `fail_at` raises on that embed call (1-based),
    `before` runs before a call (a write landing while the job runs)."""

    def __init__(
        self,
        fail_at: int | None = None,
        before: Callable[[int], Awaitable[None]] | None = None,
        retry_after: float | None = None,
    ):
        self.inner = NEW
        self.retry_after = retry_after
        self.name = NEW.name
        self.dim = NEW.dim
        self.texts: list[str] = []
        self.calls = 0
        self.fail_at = fail_at
        self.before = before

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "write", project: str | None = None
    ) -> list[Vector]:
        self.calls += 1
        if self.before is not None:
            await self.before(self.calls)
        if self.fail_at is not None and self.calls <= self.fail_at and self.retry_after is not None:
            raise EmbedderError("HTTP 429", retry_after=self.retry_after)
        if self.calls == self.fail_at:
            raise EmbedderError("the model process died")
        self.texts += texts
        return await self.inner.embed(texts, purpose=purpose, project=project)

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def new_app(settings: Settings) -> SharedApp:
    return SharedApp(settings, NEW)


@pytest.fixture
async def new_client(new_app: SharedApp, conn: asyncpg.Connection) -> AsyncIterator[httpx.AsyncClient]:
    async with new_app.client(conn) as c:
        yield c


async def seed(client: httpx.AsyncClient, key: str) -> None:
    await write_facts(client, key, FACTS)
    await write_events(client, key, EVENTS)


async def served_vectors(conn: asyncpg.Connection) -> dict[str, tuple[str, np.ndarray]]:
    rows = load_test_queries().test_project_vectors(conn, project_id=PROJECT)
    return {str(r["item_id"]): (r["content"], r["embedding"].to_numpy()) async for r in rows}


def made_by(vectors: dict[str, tuple[str, np.ndarray]], model: HashEmbedder) -> bool:
    return all(np.allclose(vec, model.embed_one(text), atol=1e-6) for text, vec in vectors.values())


async def pending(conn: asyncpg.Connection) -> int:
    row = await load_test_queries().test_pending_vectors(conn, project_id=PROJECT)
    return int(row["pending"])


async def test_a_crash_mid_way_resumes_and_switches_atomically(
    client: httpx.AsyncClient,
    new_client: httpx.AsyncClient,
    key: str,
    conn: asyncpg.Connection,
) -> None:
    await seed(client, key)
    total = len(FACTS) + len(EVENTS)
    assert await embedding_model.get_model(conn, PROJECT) == OLD.name

    # The first run dies in its third batch: two batches (6 facts) are kept beside the old vectors.
    crashing = Recording(fail_at=3)
    with pytest.raises(EmbedderError):
        await reembed.reembed(conn, crashing, PROJECT, batch_size=3)
    assert await pending(conn) == 6
    assert await embedding_model.get_model(conn, PROJECT) == OLD.name

    # Meanwhile the project is served as before, from the old vectors, and the new model is refused.
    vectors = await served_vectors(conn)
    assert len(vectors) == total and made_by(vectors, OLD)
    packet = await context(client, key, "what is the cat called?")
    assert "Alice's cat is called Miso" in [f["content"] for f in packet["facts"]]
    assert_error(await post_facts(new_client, key, ["Bob likes tea"]), 409, "embedding_model_mismatch")
    # A write on the old model lands while the job is stopped.
    await write_facts(client, key, ["Alice sold her bicycle"])

    # The resume embeds only what is missing, then switches.
    resumed = Recording()
    result = await reembed.reembed(conn, resumed, PROJECT, batch_size=3)
    assert result.switched and result.plan.counts.done == 6
    assert result.embedded == total + 1 - 6 == len(resumed.texts)
    assert not set(resumed.texts) & set(crashing.texts)
    assert result.plan.previous_model == OLD.name and result.plan.model == NEW.name

    vectors = await served_vectors(conn)
    assert len(vectors) == total + 1 and made_by(vectors, NEW)
    assert await pending(conn) == 0
    assert await embedding_model.get_model(conn, PROJECT) == NEW.name
    # Now the new model serves the project and the old one is refused, writes included.
    packet = await context(new_client, key, "what is the cat called?")
    assert "Alice's cat is called Miso" in [f["content"] for f in packet["facts"]]
    assert_error(await post_facts(client, key, ["Bob likes tea"]), 409, "embedding_model_mismatch")

    # Nothing left to do on a second run.
    again = await reembed.reembed(conn, Recording(), PROJECT)
    assert not again.switched and again.embedded == 0


async def test_writes_landing_after_the_pass_are_embedded_by_the_switch(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    await seed(client, key)
    late: list[str] = []

    async def write_during_the_event_pass(call: int) -> None:
        # Facts go first, one batch of 10: the second call is the events' pass. A fact written now
        # is behind the facts' pass.
        if call == 2:
            late.extend(r["fact_id"] for r in await write_facts(client, key, ["Alice adopted a dog"]))

    job = Recording(before=write_during_the_event_pass)
    result = await reembed.reembed(conn, job, PROJECT, batch_size=10)
    assert late and result.caught_up == 1 and result.switched
    vectors = await served_vectors(conn)
    assert late[0] in vectors and made_by(vectors, NEW)


async def test_a_dry_run_estimates_and_writes_nothing(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    await seed(client, key)
    job = Recording()
    run = await reembed.dry_run(conn, job, PROJECT, sample=4)
    assert run.sample == 4 == len(job.texts)
    assert run.plan.remaining == len(FACTS) + len(EVENTS)
    assert run.estimated_seconds == pytest.approx(run.seconds_per_text * run.plan.remaining)
    assert await pending(conn) == 0
    assert made_by(await served_vectors(conn), OLD)
    assert await embedding_model.get_model(conn, PROJECT) == OLD.name


async def test_a_dry_run_of_a_project_already_on_the_model_embeds_nothing(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    """Nothing to do, nothing sent: the dry run sampled 64 texts to the provider first."""
    await seed(client, key)
    assert (await reembed.reembed(conn, Recording(), PROJECT)).switched
    job = Recording()
    run = await reembed.dry_run(conn, job, PROJECT)
    assert run.plan.current and run.sample == 0 and job.calls == 0


async def test_a_leftover_of_another_model_is_replaced_not_swapped_in(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    """A run towards a third model that was abandoned leaves vectors the next run must not reuse."""
    await seed(client, key)
    third = HashEmbedder(model="model-c")
    abandoned = Recording(fail_at=2)
    abandoned.inner, abandoned.name = third, third.name
    with pytest.raises(EmbedderError):
        await reembed.reembed(conn, abandoned, PROJECT, batch_size=5)
    assert await pending(conn) == 5
    result = await reembed.reembed(conn, Recording(), PROJECT, batch_size=5)
    assert result.plan.counts.done == 0 and result.embedded == len(FACTS) + len(EVENTS)
    assert made_by(await served_vectors(conn), NEW)


async def test_erasing_a_fact_erases_its_pending_vector(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    await seed(client, key)
    with pytest.raises(EmbedderError):
        await reembed.reembed(conn, Recording(fail_at=2), PROJECT, batch_size=100)
    assert await pending(conn) == len(FACTS)
    r = await client.delete("/v1/subjects/u1", params={"project_id": PROJECT}, headers=bearer(key))
    assert r.status_code in (200, 204), r.text
    assert await pending(conn) == 0


async def test_a_project_never_written_is_left_unrecorded(conn: asyncpg.Connection) -> None:
    """A mistyped --project: recording the new model for it would refuse its first writes from a
    server still on the old one."""
    job = Recording()
    result = await reembed.reembed(conn, job, "no-such-project")
    assert result.plan.unknown and not result.switched and job.calls == 0
    assert await embedding_model.get_model(conn, "no-such-project") is None
    run = await reembed.dry_run(conn, job, "no-such-project")
    assert run.plan.unknown and run.sample == 0


async def test_a_written_project_is_not_unknown(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    await seed(client, key)
    assert not (await reembed.plan(conn, NEW, PROJECT)).unknown


async def test_a_pass_waits_out_a_rate_limited_provider() -> None:
    """A 429 with Retry-After stops a request at once (its 503 passes the wait on), but a pass is
    a long job: it waits as asked, up to RATE_LIMIT_WAITS times a batch, then the error stops it."""
    paced = Recording(fail_at=2, retry_after=0.01)
    assert len(await reembed._embed_paced(paced, ["a", "b"], PROJECT)) == 2
    assert paced.calls == 3
    limited = Recording(fail_at=reembed.RATE_LIMIT_WAITS + 1, retry_after=0.01)
    with pytest.raises(EmbedderError, match="429"):
        await reembed._embed_paced(limited, ["a"], PROJECT)
    died = Recording(fail_at=1)
    with pytest.raises(EmbedderError, match="died"):
        await reembed._embed_paced(died, ["a"], PROJECT)
    assert died.calls == 1
