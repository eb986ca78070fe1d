"""The write side: facts, events and conflict sets (docs/spec/api.md, "Write side")."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import msgspec

from service.api.auth import Principal
from service.constants import CONFLICT_PAGE_MEMBERS
from service.embedding.embedder import Embedder, EmbedderError
from service.errors import Conflict, InvalidInput, NotFound, Unavailable
from service.ids import uuid7_batch
from service.instants import check_storable
from service.memory.cursors import (
    decode_conflict_cursor,
    decode_id_cursor,
    encode_conflict_cursor,
    encode_id_cursor,
)
from service.repository import Conn, embedding_model, long_transaction
from service.repository import conflicts as conflicts_repo
from service.repository import events as events_repo
from service.repository import facts as facts_repo
from service.repository import lifecycle as lifecycle_repo
from service.settings import PG_MAX_INT, Settings
from service.structs import (
    ConflictList,
    ConflictSet,
    EventWriteResult,
    Fact,
    FactPage,
    FactWriteResult,
    PatchFactRequest,
    ResolveConflictRequest,
    WriteEventsRequest,
    WriteEventsResponse,
    WriteFactsRequest,
    WriteFactsResponse,
)

log = logging.getLogger("haki.writes")


async def embed_or_unavailable(embedder: Embedder, texts: list[str], project: str | None = None) -> list[Any]:
    try:
        return await embedder.embed(texts, purpose="write", project=project)
    except EmbedderError as exc:
        # The cause names the provider's URL (its credentials too) and its reply: the operator's
        # log has it, a tenant's answer does not.
        log.warning("embedding a write failed (%s): %s", embedder.name, exc)
        if exc.permanent:
            raise Unavailable(
                "The embedder refused the request; a retry gets the same answer until its "
                "configuration changes (the server's log has the cause).",
                embedder=embedder.name,
                permanent=True,
            ) from exc
        wait = {} if exc.retry_after is None else {"retry_after_seconds": max(1, math.ceil(exc.retry_after))}
        raise Unavailable(
            "The embedder is unavailable; retry shortly (the server's log has the cause).",
            embedder=embedder.name,
            **wait,
        ) from exc


async def refuse_other_model(conn: Conn, embedder: Embedder, project_id: str) -> None:
    """A server on another model than the project's vectors is refused (409
    embedding_model_mismatch) before its embedder, or a chat model, is called and billed for a
    write that would be refused anyway; the store checks again under the record's lock."""
    await embedding_model.check_model(conn, project_id, embedder.name)


def _has_nul(value: Any) -> bool:
    """PostgreSQL jsonb cannot hold \\u0000 in any string, keys included."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _check_metadata(field: str, metadata: dict[str, Any] | None) -> None:
    if metadata is not None and _has_nul(metadata):
        raise InvalidInput(field, "must not contain NUL characters (\\u0000)")


def _check_fact_items(req: WriteFactsRequest) -> None:
    # A fact has one successor: two of one batch would both stay active, unseen by conflicts.
    superseded_by: dict[UUID, int] = {}
    for i, f in enumerate(req.facts):
        check_storable(f"facts[{i}].valid_from", f.valid_from)
        check_storable(f"facts[{i}].valid_to", f.valid_to)
        _check_metadata(f"facts[{i}].metadata", f.metadata)
        if f.valid_from is not None and f.valid_to is not None and f.valid_to <= f.valid_from:
            raise InvalidInput(f"facts[{i}].valid_to", "must be later than valid_from")
        if f.stale_after_seconds is not None and f.volatility != "volatile":
            raise InvalidInput(f"facts[{i}].stale_after_seconds", "applies to volatile facts only")
        if f.supersedes is not None and superseded_by.setdefault(f.supersedes, i) != i:
            raise InvalidInput(
                f"facts[{i}].supersedes",
                f"names the fact that facts[{superseded_by[f.supersedes]}] of this batch already supersedes",
                fact_id=str(f.supersedes),
            )


async def write_facts(
    conn: Conn, embedder: Embedder, settings: Settings, principal: Principal, req: WriteFactsRequest
) -> WriteFactsResponse:
    """Checks and embeds the batch, then stores it (the importer's path; POST /v1/facts runs the
    two steps through idempotency.run_once, which claims its key between them)."""
    return await store_facts(conn, await prepare_facts(embedder, settings, principal, req))


@dataclass(frozen=True, slots=True)
class PreparedFacts:
    """A checked and embedded batch: all a write transaction needs, so none waits on the embedder."""

    req: WriteFactsRequest
    fact_ids: list[UUID]
    columns: dict[str, list[Any]]
    # Each statement of the store's transaction may take this long (write_timeout_ms); no default:
    # 0 would be no limit.
    timeout_ms: int
    # The embedder's name: the store records it as the project's model, or refuses another.
    model: str | None = None


def write_timeout_ms(settings: Settings, items: int) -> int:
    """The statement timeout of a batch's store: HAKI_STATEMENT_TIMEOUT_MS plus
    HAKI_WRITE_TIMEOUT_PER_ITEM_MS an item, as its HNSW inserts grow with the batch and the scope
    (docs/performance.md); a base of 0 stays no limit."""
    base = settings.statement_timeout_ms
    return base and min(base + items * settings.write_timeout_per_item_ms, PG_MAX_INT)


async def prepare_facts(
    embedder: Embedder, settings: Settings, principal: Principal, req: WriteFactsRequest
) -> PreparedFacts:
    """Everything before the transaction: checks, and the embedder call, which can take minutes on
    a slow provider (a transaction held across it was killed by idle_in_transaction_session_timeout)."""
    principal.require(req.project_id)
    _check_fact_items(req)
    embeddings = await embed_or_unavailable(embedder, [f.content for f in req.facts], principal.project_id)
    return _prepared_facts(settings, req, embeddings, embedder.name)


def _prepared_facts(
    settings: Settings, req: WriteFactsRequest, embeddings: list[Any], model: str
) -> PreparedFacts:
    facts = req.facts
    fact_ids = uuid7_batch(len(facts))
    columns: dict[str, list[Any]] = {
        "fact_ids": fact_ids,
        "contents": [f.content for f in facts],
        "keys": [f.key for f in facts],
        "valid_froms": [f.valid_from for f in facts],
        "valid_tos": [f.valid_to for f in facts],
        "volatilities": [f.volatility for f in facts],
        "stale_after_seconds": [
            float(f.stale_after_seconds or settings.volatile_stale_after_seconds)
            if f.volatility == "volatile"
            else None
            for f in facts
        ],
        "supersedes": [f.supersedes for f in facts],
        "source_event_ids": [f.source_event_id for f in facts],
        "metadatas": [f.metadata for f in facts],
        "embeddings": embeddings,
    }
    return PreparedFacts(
        req=req,
        fact_ids=fact_ids,
        columns=columns,
        model=model,
        timeout_ms=write_timeout_ms(settings, len(facts)),
    )


async def store_facts(conn: Conn, prepared: PreparedFacts) -> WriteFactsResponse:
    req, fact_ids, columns = prepared.req, prepared.fact_ids, prepared.columns
    facts = req.facts
    async with long_transaction(conn, prepared.timeout_ms):
        # First: no erasure of the scope runs beside the write (whose conflict members named the
        # facts an erasure deleted meanwhile: a foreign key error, tests/test_erasure_scope_lock.py).
        await lifecycle_repo.share_erasure_scope(conn, req.project_id, req.subject_id)
        # Before the rest: a re-embedding's switch waits for this write, or this write for it.
        if prepared.model is not None:
            await embedding_model.hold_model(conn, req.project_id, prepared.model)
        # Then, before any row lock: a concurrent write of one of these keys commits before this
        # one goes on, so detect_conflicts below sees its facts (without it, racing
        # writes escaped detection: tests/test_write_races.py).
        keys = [f.key for f in facts if f.key is not None]
        superseded = [f.supersedes for f in facts if f.supersedes is not None]
        if superseded:
            # A superseded fact's conflict set may resolve below: its key is locked with the rest.
            keys += await facts_repo.fact_keys(conn, req.project_id, req.subject_id, superseded)
        if keys:
            await facts_repo.lock_fact_keys(conn, req.project_id, req.subject_id, keys)
        superseding = [(i, f.supersedes, f.valid_from) for i, f in enumerate(facts) if f.supersedes]
        if superseding:
            changed = await facts_repo.supersede_facts(
                conn,
                req.project_id,
                req.subject_id,
                [s[1] for s in superseding if s[1] is not None],
                [s[2] for s in superseding],
            )
            for i, old_id, _ in superseding:
                if old_id not in changed:
                    raise InvalidInput(
                        f"facts[{i}].supersedes",
                        "is not an active fact of this scope, or it does not start before the new fact",
                        fact_id=str(old_id),
                    )
        sources = {f.source_event_id for f in facts if f.source_event_id is not None}
        if sources:
            missing = await facts_repo.missing_events(conn, req.project_id, req.subject_id, list(sources))
            for i, f in enumerate(facts):
                if f.source_event_id in missing:
                    raise InvalidInput(
                        f"facts[{i}].source_event_id",
                        "is not an event of this scope",
                        event_id=str(f.source_event_id),
                    )
        await facts_repo.insert_facts(conn, req.project_id, req.subject_id, columns)
        in_conflict: dict[UUID, UUID] = {}
        # A successor too: it replaces one claim of its key, not the key's other claims.
        keyed = [fid for fid, f in zip(fact_ids, facts, strict=True) if f.key is not None]
        if keyed:
            in_conflict = await facts_repo.detect_conflicts(conn, req.project_id, req.subject_id, keyed)
        if superseded:
            # After detection (each was superseded, or the batch was refused): a set that a
            # successor joins keeps two claims and stays open.
            await conflicts_repo.resolve_left_conflict_sets(conn, req.project_id, superseded)
    return WriteFactsResponse(
        facts=[
            FactWriteResult(fact_id=fid, status="active", conflict_set_id=in_conflict.get(fid))
            for fid in fact_ids
        ]
    )


async def list_facts(
    conn: Conn,
    principal: Principal,
    project_id: str,
    subject_id: str | None,
    status: str | None,
    limit: int,
    cursor: str | None,
) -> FactPage:
    principal.require(project_id)
    listing = (project_id, subject_id, status)
    after = decode_id_cursor("facts", listing, cursor) if cursor else None
    rows = await facts_repo.list_facts(conn, project_id, subject_id, status, after, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return FactPage(
        facts=rows,
        next_cursor=encode_id_cursor("facts", listing, rows[-1].fact_id) if more and rows else None,
    )


async def replaced_by(conn: Conn, principal: Principal, fact: Fact) -> list[Fact]:
    """The facts that name `fact` in `supersedes` (none unless it is superseded)."""
    principal.require(fact.project_id)
    if fact.status != "superseded":
        return []
    return await facts_repo.list_successors(conn, fact.project_id, fact.subject_id, fact.fact_id)


async def get_fact(conn: Conn, principal: Principal, fact_id: UUID) -> Fact:
    fact = await facts_repo.get_fact(conn, principal.project_id, fact_id)
    if fact is None:
        raise NotFound("No fact with this id in the key's project.", fact_id=str(fact_id))
    return fact


async def patch_fact(conn: Conn, principal: Principal, fact_id: UUID, req: PatchFactRequest) -> Fact:
    if req.status is None and req.valid_to is None:
        raise InvalidInput("status", "send `status: retracted` and/or `valid_to`")
    check_storable("valid_to", req.valid_to)
    retract = req.status == "retracted"
    missing = NotFound("No fact with this id in the key's project.", fact_id=str(fact_id))
    async with conn.transaction():
        fact = await facts_repo.get_fact(conn, principal.project_id, fact_id)
        if fact is None:
            raise missing
        # The scope's lock, as every write takes it first: no erasure runs beside the patch.
        await lifecycle_repo.share_erasure_scope(conn, principal.project_id, fact.subject_id)
        if retract and fact.key is not None:
            # The key's lock next, as writes and resolutions of the key take it: a conflict set
            # holding the fact may resolve below, and sees a concurrent change of another member.
            await facts_repo.lock_fact_keys(conn, principal.project_id, fact.subject_id, [fact.key])
        found = await facts_repo.patch_fact(
            conn, principal.project_id, fact_id, retract=retract, valid_to=req.valid_to
        )
        if not found:
            # Read again: its status now, after the locks (or gone, erased before them).
            fact = await facts_repo.get_fact(conn, principal.project_id, fact_id)
            if fact is None:
                raise missing
            raise Conflict(
                f"This fact is {fact.status}: only an active fact is retracted or given a valid_to "
                "(a retracted one may be retracted again).",
                fact_id=str(fact_id),
                status=fact.status,
                reason="fact_not_active",
            )
        if retract:
            await conflicts_repo.resolve_left_conflict_sets(conn, principal.project_id, [fact_id])
        # Read before the commit, under the scope's lock: an erasure after it would make it a 404.
        return await get_fact(conn, principal, fact_id)


async def write_events(
    conn: Conn, embedder: Embedder, settings: Settings, principal: Principal, req: WriteEventsRequest
) -> WriteEventsResponse:
    """Checks and embeds the batch, then stores it (see write_facts)."""
    return await store_events(conn, await prepare_events(embedder, settings, principal, req))


@dataclass(frozen=True, slots=True)
class PreparedEvents:
    """A checked and embedded batch of events (see PreparedFacts)."""

    req: WriteEventsRequest
    embeddings: list[Any]
    timeout_ms: int
    model: str | None = None


async def prepare_events(
    embedder: Embedder, settings: Settings, principal: Principal, req: WriteEventsRequest
) -> PreparedEvents:
    principal.require(req.project_id)
    _check_event_items(req)
    embeddings = await embed_or_unavailable(embedder, [e.content for e in req.events], principal.project_id)
    return _prepared_events(settings, req, embeddings, embedder.name)


def _check_event_items(req: WriteEventsRequest) -> None:
    for i, e in enumerate(req.events):
        check_storable(f"events[{i}].occurred_at", e.occurred_at)
        _check_metadata(f"events[{i}].metadata", e.metadata)


def _prepared_events(
    settings: Settings, req: WriteEventsRequest, embeddings: list[Any], model: str
) -> PreparedEvents:
    timeout_ms = write_timeout_ms(settings, len(req.events))
    return PreparedEvents(req=req, embeddings=embeddings, model=model, timeout_ms=timeout_ms)


async def store_events(conn: Conn, prepared: PreparedEvents) -> WriteEventsResponse:
    event_ids = uuid7_batch(len(prepared.req.events))
    async with long_transaction(conn, prepared.timeout_ms):
        # First, as store_facts: no erasure of the scope runs beside the write (both change
        # the vectors in context of the events after theirs).
        await lifecycle_repo.share_erasure_scope(conn, prepared.req.project_id, prepared.req.subject_id)
        if prepared.model is not None:
            await embedding_model.hold_model(conn, prepared.req.project_id, prepared.model)
        await events_repo.lock_event_order(conn, prepared.req.project_id, prepared.req.subject_id)
        await events_repo.insert_events(conn, prepared.req, event_ids, prepared.embeddings)
    return WriteEventsResponse(events=[EventWriteResult(event_id=eid) for eid in event_ids])


async def list_conflicts(
    conn: Conn,
    principal: Principal,
    project_id: str,
    subject_id: str | None,
    status: str | None,
    cursor: str | None = None,
    page_members: int | None = None,
) -> ConflictList:
    """One page: whole sets, `page_members` (CONFLICT_PAGE_MEMBERS) members at most (a larger set
    alone), then `next_cursor`: a silent bound on member rows hid a big set's members and older sets."""
    principal.require(project_id)
    listing = (project_id, subject_id, status)
    after = decode_conflict_cursor(listing, cursor) if cursor else None
    bound = CONFLICT_PAGE_MEMBERS if page_members is None else page_members
    sets, more = await conflicts_repo.conflict_page(
        conn, project_id, subject_id, status, after=after, page_members=bound
    )
    last = sets[-1] if more and sets else None
    return ConflictList(
        conflicts=sets,
        next_cursor=encode_conflict_cursor(listing, last.created_at, last.conflict_set_id) if last else None,
    )


async def resolve_conflict(
    conn: Conn,
    principal: Principal,
    conflict_set_id: UUID,
    req: ResolveConflictRequest,
    settings: Settings | None = None,
) -> ConflictSet:
    """Resolves an open set. With `settings`, each statement may take write_timeout_ms of the
    set's size, as a batch write of that many facts: every member not kept is superseded, its
    indexes written again (an import passes none: its transaction keeps its batches' timeout)."""
    project_id = principal.project_id
    # Read before the transaction, whose timeout it sets: the subject and key never change.
    scope = await conflicts_repo.conflict_set_scope(conn, project_id, conflict_set_id)
    size = scope[2] if scope is not None else 0
    transaction = (
        conn.transaction() if settings is None else long_transaction(conn, write_timeout_ms(settings, size))
    )
    async with transaction:
        # The scope's lock first and the key's next, as a write of that key takes them
        # (store_facts), then the set's row: a write racing the resolution sees its members
        # either all before it or all after it. Without the key's, a write of the key that read
        # the members before the resolution committed opened a new set listing the ones it had
        # just superseded (tests/test_write_races.py).
        if scope is not None:
            await lifecycle_repo.share_erasure_scope(conn, project_id, scope[0])
            await embedding_model.share_model(conn, project_id)
            await facts_repo.lock_fact_keys(conn, project_id, scope[0], [scope[1]])
        locked = await conflicts_repo.lock_conflict_set(conn, project_id, conflict_set_id)
        if locked is None:
            raise NotFound(
                "No conflict set with this id in the key's project.", conflict_set_id=str(conflict_set_id)
            )
        status, members, active = locked
        if status != "open":
            raise Conflict("This conflict set is already resolved.", conflict_set_id=str(conflict_set_id))
        for i, fact_id in enumerate(req.keep):
            if fact_id not in members:
                raise InvalidInput(f"keep[{i}]", "is not a member of this conflict set", fact_id=str(fact_id))
            if fact_id not in active:
                raise InvalidInput(
                    f"keep[{i}]",
                    "is retracted or superseded: only an active member can be kept",
                    fact_id=str(fact_id),
                )
        await conflicts_repo.resolve_conflict_set(conn, project_id, conflict_set_id, req.keep)
        # Read before the commit, under the scope's lock: an erasure right after it left no set to
        # read, a 500 for a resolution that had committed.
        (resolved,) = await conflicts_repo.list_conflicts(conn, project_id, None, None, conflict_set_id)
    return resolved


# --- extraction (POST /v1/extract, service/extraction) -----------------------------------------


async def prepare_extraction(
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    events: WriteEventsRequest,
    facts: WriteFactsRequest | None,
) -> tuple[PreparedEvents, PreparedFacts | None]:
    """An extraction's events and facts, checked, then embedded in one call: the embedding budget
    takes the whole extraction at once, so one larger than the budget passes a full one (charged
    in two parts, the events' passed and the facts' was refused, on every retry)."""
    principal.require(events.project_id)
    _check_event_items(events)
    texts = [e.content for e in events.events]
    if facts is not None:
        _check_fact_items(facts)
        texts += [f.content for f in facts.facts]
    vectors = await embed_or_unavailable(embedder, texts, principal.project_id)
    n = len(events.events)
    prepared = _prepared_events(settings, events, vectors[:n], embedder.name)
    if facts is None:
        return prepared, None
    return prepared, _prepared_facts(settings, facts, vectors[n:], embedder.name)


def only_facts(prepared: PreparedFacts, keep: Sequence[int]) -> PreparedFacts:
    """The same embedded batch with only the facts at these indexes (in their order): an
    extraction drops the proposals a concurrent one wrote first, without embedding again."""
    req = msgspec.structs.replace(prepared.req, facts=[prepared.req.facts[i] for i in keep])
    columns = {name: [values[i] for i in keep] for name, values in prepared.columns.items()}
    return dataclasses.replace(prepared, req=req, fact_ids=columns["fact_ids"], columns=columns)


def with_source_events(prepared: PreparedFacts, source_event_ids: list[UUID]) -> PreparedFacts:
    """The same embedded batch, each fact linked to its event: the extraction embeds its facts
    before the transaction that creates their events (and so their ids)."""
    facts = [
        msgspec.structs.replace(f, source_event_id=e)
        for f, e in zip(prepared.req.facts, source_event_ids, strict=True)
    ]
    req = msgspec.structs.replace(prepared.req, facts=facts)
    columns = {**prepared.columns, "source_event_ids": list(source_event_ids)}
    return dataclasses.replace(prepared, req=req, columns=columns)
