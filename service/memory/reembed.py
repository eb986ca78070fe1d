"""`haki reembed --project P`: a project's vectors made again by the configured model, online.

1. The new vectors are written beside the served ones (migration 0030: reembedded_facts,
   reembedded_events), a batch per transaction, the embedding outside it. They are the job's
   progress: a run that stops (crash, Ctrl-C, kill) leaves its batches, and the same command
   resumes with what is still missing. Context calls go on with the old vectors meanwhile.
2. The switch is one transaction: it records the new model (switch_embedding_model), which makes
   the project's writes wait and waits for those in flight (each write holds the record,
   hold_embedding_model); embeds what was written since the pass (usually nothing, or a few rows:
   the writes of the last batch's seconds); swaps every vector and drops the pending ones. A
   write that waited on the switch then reads the new model and, from a server still on the old
   one, is refused (embedding_model_mismatch) rather than stored with an old vector.

A dry run embeds a sample of the missing texts and extrapolates the time of the rest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

import msgspec

from service.embedding.embedder import Embedder, EmbedderError
from service.repository import Conn, long_transaction
from service.repository import embedding_model as repo
from service.repository.embedding_model import ItemKind, PendingText, ReembedCounts, Swapped

KINDS: tuple[ItemKind, ...] = ("fact", "event")
# The dry run's sample: enough texts for a steady per-text figure, a few seconds at most.
DRY_RUN_SAMPLE = 64
MAX_BATCH = 1000

# Told the texts embedded and stored by each batch (a progress bar's advance).
OnBatch = Callable[[int], None]


class ReembedPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Where a project stands before a run: its model, the target, what is left to embed."""

    project_id: str
    model: str
    previous_model: str | None
    counts: ReembedCounts

    @property
    def remaining(self) -> int:
        return self.counts.total - self.counts.done

    @property
    def unknown(self) -> bool:
        """No memory was ever written to the project (no recorded model, nothing stored): most
        likely a mistyped id. Recording a model for it would refuse its first writes from a
        server on another model."""
        return self.previous_model is None and self.counts.total == 0

    @property
    def current(self) -> bool:
        """The project's vectors are already the model's: nothing to do."""
        return self.previous_model == self.model and self.counts.done == 0


class ReembedResult(msgspec.Struct, frozen=True, kw_only=True):
    """A run: the plan it started from (`plan.counts.done` were found from an earlier run), what
    its pass embedded, what the switch embedded (written meanwhile), whether it switched, and the
    facts and events it switched (the plan's less what was erased meanwhile, plus new writes)."""

    plan: ReembedPlan
    embedded: int
    caught_up: int
    switched: bool
    facts: int = 0
    events: int = 0


class PartialSwap(RuntimeError):
    """The swap would have left vectors of another model: the switch rolled back, nothing changed
    (the same command runs it again). Not expected: erasures and writes wait for the switch."""


class DryRun(msgspec.Struct, frozen=True, kw_only=True):
    plan: ReembedPlan
    sample: int
    sample_seconds: float

    @property
    def seconds_per_text(self) -> float:
        return self.sample_seconds / self.sample if self.sample else 0.0

    @property
    def estimated_seconds(self) -> float:
        return self.seconds_per_text * self.plan.remaining


async def plan(conn: Conn, embedder: Embedder, project_id: str) -> ReembedPlan:
    counts = await repo.count_pending(conn, project_id, embedder.name)
    previous_model = await repo.get_model(conn, project_id)
    return ReembedPlan(
        project_id=project_id, model=embedder.name, previous_model=previous_model, counts=counts
    )


async def dry_run(conn: Conn, embedder: Embedder, project_id: str, sample: int = DRY_RUN_SAMPLE) -> DryRun:
    """Embeds up to `sample` of the missing texts (stores nothing) and times them. Load the model
    first: its one-off load is not a per-text cost."""
    where = await plan(conn, embedder, project_id)
    texts: list[str] = []
    # A project already on the model, or none, has nothing to embed: no text goes to the provider.
    for kind in KINDS if not (where.current or where.unknown) else ():
        if len(texts) < sample:
            rows = await repo.pending_texts(conn, kind, project_id, where.model, None, sample - len(texts))
            texts += [r.content for r in rows]
    started = time.perf_counter()
    if texts:
        await embedder.embed(texts, purpose="write", project=project_id)
    return DryRun(plan=where, sample=len(texts), sample_seconds=time.perf_counter() - started)


async def reembed(
    conn: Conn,
    embedder: Embedder,
    project_id: str,
    *,
    batch_size: int = 64,
    on_batch: OnBatch | None = None,
    on_plan: Callable[[ReembedPlan], None] | None = None,
) -> ReembedResult:
    """Re-embeds the project with `embedder` and switches it to it (see the module's doc).
    Raises whatever stops it (the embedder, the database); what it stored stays for the next run."""
    batch_size = max(1, min(batch_size, MAX_BATCH))
    where = await plan(conn, embedder, project_id)
    if on_plan is not None:
        on_plan(where)
    if where.current or where.unknown:
        return ReembedResult(plan=where, embedded=0, caught_up=0, switched=False)
    model = where.model
    embedded = 0
    for kind in KINDS:
        after: UUID | None = None
        while rows := await repo.pending_texts(conn, kind, project_id, model, after, batch_size):
            vectors = await _embed_paced(embedder, [r.content for r in rows], project_id)
            async with conn.transaction():
                await repo.insert_vectors(conn, kind, project_id, model, [r.item_id for r in rows], vectors)
            embedded += len(rows)
            after = rows[-1].item_id
            if on_batch is not None:
                on_batch(len(rows))
    caught_up, swapped = await _switch(conn, embedder, project_id, batch_size)
    return ReembedResult(
        plan=where,
        embedded=embedded,
        caught_up=caught_up,
        switched=True,
        facts=swapped.facts,
        events=swapped.events,
    )


async def _switch(conn: Conn, embedder: Embedder, project_id: str, batch_size: int) -> tuple[int, Swapped]:
    """The one transaction that makes the new vectors the served ones; returns how many texts it
    embedded (the writes that landed after the pass read them) and what it swapped."""
    model = embedder.name
    caught_up = 0
    # The swap rewrites every vector of the project (and its HNSW entries): no statement timeout
    # for this transaction; the project's writes wait meanwhile.
    async with long_transaction(conn, 0):
        await repo.switch_model(conn, project_id, model)
        for kind in KINDS:
            while rows := await repo.pending_texts(conn, kind, project_id, model, None, batch_size):
                await _store(conn, embedder, kind, project_id, model, rows)
                caught_up += len(rows)
        swapped = await repo.swap_vectors(conn, project_id, model)
        if swapped.facts_swapped != swapped.facts or swapped.events_swapped != swapped.events:
            # Cannot happen under the switch's lock; a partial swap would mix two models.
            raise PartialSwap(f"the switch of {project_id!r} would leave vectors of another model: {swapped}")
    return caught_up, swapped


# How many times a pass waits out a provider's rate limit (its Retry-After) for one batch.
RATE_LIMIT_WAITS = 5


async def _embed_paced(embedder: Embedder, texts: list[str], project_id: str) -> list[Any]:
    """The batch's vectors; a provider that rate-limits with a Retry-After is waited for (a pass
    is a long job, unlike a request), up to RATE_LIMIT_WAITS times, then its error stops the run."""
    for _ in range(RATE_LIMIT_WAITS):
        try:
            return await embedder.embed(texts, purpose="write", project=project_id)
        except EmbedderError as exc:
            if exc.retry_after is None:
                raise
            await asyncio.sleep(exc.retry_after)
    return await embedder.embed(texts, purpose="write", project=project_id)


async def _store(
    conn: Conn, embedder: Embedder, kind: ItemKind, project_id: str, model: str, rows: list[PendingText]
) -> None:
    vectors = await embedder.embed([r.content for r in rows], purpose="write", project=project_id)
    await repo.insert_vectors(conn, kind, project_id, model, [r.item_id for r in rows], vectors)
