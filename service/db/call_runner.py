"""One context call against the database: its connections, its transaction, its trace.

The assembler (service/context/assembler.py) retrieves and packs on the connection it is given;
this runner decides which connection and transaction that is, waits for the query's vector, and
writes the trace where it belongs:

- the query embeds on the embedder's thread while the transaction opens and is configured
  (open_context_call), so that their round trips leave the critical path;
- a call given the request's lease (`Lent`) whose vector has not come within
  CONTEXT_EMBED_PATIENCE_SECONDS rolls back (it has only read), gives its connection back to the
  pool until the vector comes or the embedder times out (a degraded packet), then starts over on
  a connection lent anew;
- on a streaming standby (`primary` given: service/db/replica.py) the retrieval runs in a read-only
  transaction, and the trace is written afterwards on the primary in a transaction of its own;
  otherwise the trace commits with the retrieval, in one transaction. Either way the trace is
  committed before the packet is returned, and durably: the call's terms leave synchronous_commit
  on, so the commit waits for the WAL flush (docs/spec/context-profiles.md);
- the transaction that writes the trace holds the scope's erasure lock, shared, from its first
  statement (open_context_call): an erasure of the scope waits for the trace, then erases it. On
  the primary the retrieval is inside that transaction; after a standby's retrieval, an erasure
  may have committed between the two, so a trace naming an item no longer in the scope is not
  written, and the call runs again on the primary (`ErasedSinceRetrieval`);
- on the primary, a packet shows one state of its scope: each statement of the call reads what
  had committed when it started (read committed), so a write that commits between two of them
  (a rival of a served fact, its successor) could mix two states in one packet, and a
  re-embedding's switch two vector spaces. Before its trace, the call counts the served facts
  the hard filters would hide now and reads the project's model again, and runs again when
  either moved (CONTEXT_CALL_RUNS at most; after a switch, the run's model check refuses it). A
  standby's retrieval reads one snapshot (repeatable read), as it takes no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import asyncpg

from service.constants import CONTEXT_CALL_RUNS, CONTEXT_EMBED_PATIENCE_SECONDS
from service.context import assembler
from service.context.call import ContextCall
from service.db.pools import Acquire, Lent
from service.embedding.embedder import Embedder
from service.errors import Unavailable
from service.observability.timing import StageTimer
from service.repository import Conn, embedding_model
from service.repository import context as repo
from service.structs import ContextPacket

# Called with the connection that committed a trace, its project and subject: the read replica's
# bookkeeping of the trace (service/db/replica.py Reads.trace_noted), so that reads of traces
# served after the call's answer see it.
NoteTrace: TypeAlias = Callable[[Conn, str, str], Awaitable[None]]


async def run_context_call(
    held: Lent | Conn,
    embedder: Embedder,
    call: ContextCall,
    *,
    timer: StageTimer | None = None,
    primary: Acquire | None = None,
    noted: NoteTrace | None = None,
) -> ContextPacket:
    """Builds, traces and returns the packet of `call`.

    `held` is the request's lease, which the call may set aside while its query embeds slowly
    (so its `conn` may be another one afterwards), or a connection kept for the whole call.
    `primary` lends a connection of the primary when `held` is a standby's; None: one
    transaction, as always. `timer` gets the call's stages (the embedding, the assembler's, the
    trace). `noted`, when given, is called once the trace committed, on the connection that
    wrote it."""
    timer = timer or StageTimer()
    lent: Lent | None = None if isinstance(held, asyncpg.Connection) else held
    conn: Conn = held if lent is None else lent.conn
    embedding = asyncio.create_task(assembler.timed_embedding(embedder, call, timer))
    # A standby's retrieval takes no lock: one snapshot for all its statements.
    isolation = None if primary is None else "repeatable_read"
    changed_runs = 0
    try:
        while True:
            try:
                async with conn.transaction(isolation=isolation, readonly=primary is not None):
                    # Refuses a call whose embedder did not make the project's vectors; on the
                    # primary, holds the scope's erasure lock (a standby's is not the primary's).
                    scope = call.subject_id if primary is None else None
                    recorded = await repo.open_context_call(conn, assembler.EF_SEARCH, call.project_id, scope)
                    embedding_model.require_model(call.project_id, recorded, embedder.name)
                    if lent is not None and not await finished(embedding, CONTEXT_EMBED_PATIENCE_SECONDS):
                        raise _EmbedderSlow  # rolls the transaction back: it has only read
                    assembled = await assembler.assemble(conn, call, await embedding, timer)
                    if primary is None:
                        with timer.stage("trace"):
                            unservable, model = await repo.recheck_context_call(conn, call, assembled.packet)
                            if unservable or model != recorded:
                                raise _ChangedDuringCall  # rolls back: nothing was written
                            await repo.insert_context_trace(conn, call, assembled.packet, assembled.decisions)
                break
            except _ChangedDuringCall:
                changed_runs += 1
                if changed_runs >= CONTEXT_CALL_RUNS:
                    raise ScopeKeptChanging(
                        "The subject's memories changed during each run of this call; retry.",
                        subject_id=call.subject_id,
                    ) from None
            except _EmbedderSlow:
                assert lent is not None
                # Back in the pool until the vector comes (or the embedder's time-out: a degraded
                # call), then the call starts over on a connection lent anew.
                async with lent.set_aside():
                    await asyncio.wait({embedding})
                conn, lent = lent.conn, None
        if primary is not None:
            with timer.stage("trace"):
                async with primary() as on_primary:
                    async with on_primary.transaction():
                        # The terms of the trace's own transaction, and the scope's lock: no
                        # erasure of the scope runs between the check below and the commit.
                        await repo.open_context_call(
                            on_primary, assembler.EF_SEARCH, call.project_id, call.subject_id
                        )
                        if await repo.count_erased_items(on_primary, call, assembled.decisions):
                            raise ErasedSinceRetrieval(
                                "An erasure of this subject ran during the call; retry."
                            )
                        await repo.insert_context_trace(
                            on_primary, call, assembled.packet, assembled.decisions
                        )
                    if noted is not None:
                        await noted(on_primary, call.project_id, call.subject_id)
        elif noted is not None:
            with timer.stage("trace"):
                await noted(conn, call.project_id, call.subject_id)
    finally:
        if not embedding.done():  # the database failed first: the vector is not needed
            embedding.cancel()
    return assembled.packet


class ErasedSinceRetrieval(Unavailable, status=503, code="unavailable"):
    """Internal control flow: the standby served an item that an erasure has removed from the
    primary since (or that a lagging standby still held). Neither the trace nor the packet may
    leave: the read replica's hook runs the call again on the primary (service/db/replica.py);
    a 503 `unavailable` if it ever reached a client."""


class ScopeKeptChanging(Unavailable, status=503, code="unavailable"):
    """Writes to the scope committed during each of the call's CONTEXT_CALL_RUNS runs, each
    hiding a fact it served: nothing was served nor traced; retrying is safe."""


class _ChangedDuringCall(Exception):
    """A fact the call served is hidden by a write committed since the call read it, or the
    project's embedding model changed."""


class _EmbedderSlow(Exception):
    """The query's vector did not come within CONTEXT_EMBED_PATIENCE_SECONDS."""


async def finished(task: asyncio.Task[Any], seconds: float) -> bool:
    """Whether `task` is done within `seconds` (it runs on either way)."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    return bool(done)


__all__ = ["ErasedSinceRetrieval", "NoteTrace", "ScopeKeptChanging", "run_context_call"]
