"""GET /v1/subjects/{subject_id}/export and its way back in, `haki import` of an export document.

The document is JSON Lines: a header line `{"haki_export": 1, "project_id", "subject_id",
"exported_at"}`, then every event of the scope (`"kind": "event"`) and every fact of any status
(`"kind": "fact"`), each in id (creation) order, read in one repeatable-read snapshot.

Import reads the whole document first and refuses it, naming the line, when an item breaks a
rule of POST /v1/events or /v1/facts, repeats an id, or links to an item not before it. Into a
subject with no memories only (a merge would resolve conflicts against facts they never met), it
embeds every text, then, in one transaction (all of it or nothing), writes the events, then the
facts in their order through the service's own write path (service/memory/writes.py), with
`supersedes` and `source_event_id` mapped to the new ids; then it gives the facts their exported
statuses: an open conflict set the import opened is resolved keeping the facts exported `active`
(unless all its members were active: the set was open), the facts exported `retracted` are
retracted, and a fact exported `superseded` that nothing ended (its successor was erased) is
superseded at its exported valid_to. New ids, recorded_from and conflict set ids are the import's
own.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any, Final, Literal
from uuid import UUID

import msgspec

from service.api.auth import Principal
from service.constants import MAX_BATCH
from service.embedding.embedder import Embedder
from service.errors import Conflict, NotFound
from service.memory import writes as memory
from service.repository import Conn
from service.repository import conflicts as conflicts_repo
from service.repository import facts as facts_repo
from service.repository import lifecycle as repo
from service.settings import Settings
from service.structs import (
    EventIn,
    FactIn,
    PatchFactRequest,
    ResolveConflictRequest,
    WriteEventsRequest,
    WriteFactsRequest,
)

EXPORT_VERSION: Final = 1
MEDIA_TYPE: Final = "application/x-ndjson"
# Rows read per round trip while streaming.
EXPORT_PAGE: Final = 500

_ENCODER = msgspec.json.Encoder()


class ExportHeader(msgspec.Struct, kw_only=True):
    haki_export: int
    project_id: str
    subject_id: str
    exported_at: datetime


class ExportedEvent(msgspec.Struct, kw_only=True, tag_field="kind", tag="event"):
    event_id: UUID
    content: str
    occurred_at: datetime
    recorded_at: datetime | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class ExportedFact(msgspec.Struct, kw_only=True, tag_field="kind", tag="fact"):
    fact_id: UUID
    content: str
    key: str | None = None
    status: Literal["active", "superseded", "retracted"] = "active"
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    believed_valid_to: datetime | None = None
    recorded_from: datetime | None = None
    recorded_to: datetime | None = None
    volatility: Literal["stable", "volatile"] = "stable"
    stale_after_seconds: int | None = None
    supersedes: UUID | None = None
    source_event_id: UUID | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    conflict_set_id: UUID | None = None


def _line(item: msgspec.Struct) -> bytes:
    return _ENCODER.encode(item) + b"\n"


async def check_exportable(conn: Conn, principal: Principal, project_id: str, subject_id: str) -> None:
    """404 before the stream starts (a stream cannot change its status) when the scope is empty."""
    principal.require(project_id)
    if await repo.export_facts(conn, project_id, subject_id, None, 1):
        return
    if await repo.list_events(conn, project_id, subject_id, None, 1):
        return
    raise NotFound("No fact or event of this subject in the project.", subject_id=subject_id)


async def stream_export(pool: Any, project_id: str, subject_id: str) -> AsyncIterator[bytes]:
    """The document, page by page, from one snapshot on a connection of its own."""
    async with pool.acquire() as conn:
        nested = conn.is_in_transaction()
        tx = conn.transaction() if nested else conn.transaction(isolation="repeatable_read", readonly=True)
        async with tx:
            header = ExportHeader(
                haki_export=EXPORT_VERSION,
                project_id=project_id,
                subject_id=subject_id,
                exported_at=datetime.now(UTC),
            )
            yield _line(header)
            after: UUID | None = None
            while True:
                events = await repo.list_events(conn, project_id, subject_id, after, EXPORT_PAGE)
                for e in events:
                    yield _line(msgspec.convert(e, ExportedEvent, from_attributes=True))
                if len(events) < EXPORT_PAGE:
                    break
                after = events[-1].event_id
            after = None
            while True:
                facts = await repo.export_facts(conn, project_id, subject_id, after, EXPORT_PAGE)
                for f in facts:
                    yield _line(msgspec.convert(f, ExportedFact))
                if len(facts) < EXPORT_PAGE:
                    break
                after = facts[-1]["fact_id"]


# --- import ----------------------------------------------------------------------------------


class ExportDocument(msgspec.Struct, kw_only=True):
    header: ExportHeader | None
    events: list[ExportedEvent]
    facts: list[ExportedFact]


_ITEM = msgspec.json.Decoder(ExportedEvent | ExportedFact)
_HEADER = msgspec.json.Decoder(ExportHeader)


def is_export_line(first: Any) -> bool:
    return isinstance(first, dict) and ("haki_export" in first or first.get("kind") in ("fact", "event"))


def line_text(raw: bytes, first: bool) -> bytes:
    """A JSON Lines line without its surrounding whitespace, and line 1 without a UTF-8 byte order
    mark (Windows editors write one): it is no part of the JSON. `haki import` reads lines so."""
    return (raw.removeprefix(codecs.BOM_UTF8) if first else raw).strip()


def parse_document(lines: Iterable[bytes]) -> ExportDocument:
    """Reads an export document; raises ValueError naming the line of the first bad one."""
    header: ExportHeader | None = None
    events: list[ExportedEvent] = []
    facts: list[ExportedFact] = []
    # The ids read so far, grown line by line: the links of a line name items before it.
    event_ids: set[UUID] = set()
    fact_ids: set[UUID] = set()
    for n, raw in enumerate(lines, start=1):
        text = line_text(raw, n == 1)
        if not text:
            continue
        try:
            if header is None and not events and not facts and b'"haki_export"' in text:
                header = _HEADER.decode(text)
                continue
            item = _ITEM.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ValueError(f"line {n}: {exc}") from exc
        problem = _unwritable(item, event_ids, fact_ids)
        if problem is not None:
            raise ValueError(f"line {n}: {problem}")
        if isinstance(item, ExportedEvent):
            events.append(item)
            event_ids.add(item.event_id)
        else:
            facts.append(item)
            fact_ids.add(item.fact_id)
    if header is not None and header.haki_export != EXPORT_VERSION:
        raise ValueError(f"haki_export {header.haki_export}: this version reads version {EXPORT_VERSION}")
    return ExportDocument(header=header, events=events, facts=facts)


def _unwritable(item: ExportedEvent | ExportedFact, event_ids: set[UUID], fact_ids: set[UUID]) -> str | None:
    """Why an item could not be written as POST /v1/events or /v1/facts would write it, or None.
    msgspec checks a Struct's bounds when it decodes one, never when code builds it, so the item is
    converted to the request's Struct. Links name items before it: a document the service exports
    has no other (an erasure nulls the links to what it erases)."""
    try:
        if isinstance(item, ExportedEvent):
            if item.event_id in event_ids:
                return f"event_id {item.event_id} appears twice"
            msgspec.convert(msgspec.to_builtins(_event_in(item)), EventIn)
            return None
        if item.fact_id in fact_ids:
            return f"fact_id {item.fact_id} appears twice"
        if item.supersedes is not None and item.supersedes not in fact_ids:
            return f"supersedes {item.supersedes}: no fact before it in the document"
        if item.source_event_id is not None and item.source_event_id not in event_ids:
            return f"source_event_id {item.source_event_id}: no event before the facts in the document"
        msgspec.convert(msgspec.to_builtins(_fact_in(item, {}, {})), FactIn)
    except msgspec.ValidationError as exc:
        return str(exc)
    return None


class ImportSummary(msgspec.Struct, kw_only=True):
    events: int
    facts: int
    retracted: int
    conflicts_resolved: int
    fact_ids: dict[str, str]
    event_ids: dict[str, str]


def _event_in(e: ExportedEvent) -> EventIn:
    return EventIn(content=e.content, occurred_at=e.occurred_at, metadata=e.metadata or None)


def _fact_in(f: ExportedFact, fact_ids: dict[UUID, UUID], event_ids: dict[UUID, UUID]) -> FactIn:
    # A superseded fact is written with the valid_to it had while believed: its successor's
    # `supersedes` ends it again, as it did the first time.
    valid_to = f.believed_valid_to if f.status == "superseded" else f.valid_to
    return FactIn(
        content=f.content,
        key=f.key,
        valid_from=f.valid_from,
        valid_to=valid_to,
        volatility=f.volatility,
        stale_after_seconds=f.stale_after_seconds if f.volatility == "volatile" else None,
        supersedes=fact_ids.get(f.supersedes) if f.supersedes else None,
        source_event_id=event_ids.get(f.source_event_id) if f.source_event_id else None,
        metadata=f.metadata or None,
    )


def _fact_batches(facts: list[ExportedFact]) -> list[list[ExportedFact]]:
    """Batches in id order; a fact that supersedes one of its own batch starts the next one (a
    batch supersedes facts already stored)."""
    batches: list[list[ExportedFact]] = [[]]
    in_batch: set[UUID] = set()
    for f in facts:
        if len(batches[-1]) >= MAX_BATCH or (f.supersedes is not None and f.supersedes in in_batch):
            batches.append([])
            in_batch = set()
        batches[-1].append(f)
        in_batch.add(f.fact_id)
    return [b for b in batches if b]


async def import_document(
    conn: Conn,
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    doc: ExportDocument,
    project_id: str,
    subject_id: str,
) -> ImportSummary:
    """Writes an export document into (project_id, subject_id) through the write path, in one
    transaction. Every text is embedded first, outside it (the write path's `prepare_*`): a
    transaction held across the embedder was killed by idle_in_transaction_session_timeout."""
    await _check_empty(conn, project_id, subject_id)
    await memory.refuse_other_model(conn, embedder, project_id)  # before a whole document is embedded
    event_batches = []
    for start in range(0, len(doc.events), MAX_BATCH):
        chunk = doc.events[start : start + MAX_BATCH]
        req = WriteEventsRequest(
            project_id=project_id,
            subject_id=subject_id,
            events=[_event_in(e) for e in chunk],
        )
        event_batches.append((chunk, await memory.prepare_events(embedder, settings, principal, req)))
    fact_ids: dict[UUID, UUID] = {}
    fact_batches = []
    for batch in _fact_batches(doc.facts):
        # `supersedes` names a fact of an earlier batch, whose new id is known (ids are made by
        # prepare_facts); the new event ids are known once the events are stored.
        req_facts = WriteFactsRequest(
            project_id=project_id,
            subject_id=subject_id,
            facts=[_fact_in(f, fact_ids, {}) for f in batch],
        )
        prepared = await memory.prepare_facts(embedder, settings, principal, req_facts)
        fact_ids.update(zip((f.fact_id for f in batch), prepared.fact_ids, strict=True))
        fact_batches.append((batch, prepared))
    exported_status = {fact_ids[f.fact_id]: f.status for f in doc.facts}
    async with conn.transaction():
        # Again, inside: an import that raced this one has committed by now.
        await _check_empty(conn, project_id, subject_id)
        event_ids: dict[UUID, UUID] = {}
        for chunk, prepared_events in event_batches:
            written = await memory.store_events(conn, prepared_events)
            event_ids.update(
                zip((e.event_id for e in chunk), (r.event_id for r in written.events), strict=True)
            )
        opened: set[UUID] = set()
        for batch, prepared in fact_batches:
            sources = [event_ids.get(f.source_event_id) if f.source_event_id else None for f in batch]
            for item, source in zip(prepared.req.facts, sources, strict=True):
                item.source_event_id = source
            prepared.columns["source_event_ids"] = sources
            written_facts = await memory.store_facts(conn, prepared)
            opened.update(r.conflict_set_id for r in written_facts.facts if r.conflict_set_id is not None)
        resolved = 0
        for conflict_set_id in sorted(opened):
            (current,) = await conflicts_repo.list_conflicts(conn, project_id, None, None, conflict_set_id)
            if current.status != "open":
                continue
            members = [m.fact_id for m in current.members]
            keep = [m for m in members if exported_status.get(m) == "active"]
            if keep and len(keep) < len(members):
                await memory.resolve_conflict(
                    conn, principal, conflict_set_id, ResolveConflictRequest(keep=keep)
                )
                resolved += 1
        retracted = 0
        for f in doc.facts:
            if f.status == "retracted":
                try:
                    await memory.patch_fact(
                        conn, principal, fact_ids[f.fact_id], PatchFactRequest(status="retracted")
                    )
                except Conflict:
                    # Superseded by an exported successor: retracted after it, before PATCH kept
                    # a superseded fact as it was. Its successor already ended its belief.
                    continue
                retracted += 1
        await _supersede_orphans(conn, project_id, subject_id, doc.facts, fact_ids)
    return ImportSummary(
        events=len(event_ids),
        facts=len(fact_ids),
        retracted=retracted,
        conflicts_resolved=resolved,
        fact_ids={str(k): str(v) for k, v in fact_ids.items()},
        event_ids={str(k): str(v) for k, v in event_ids.items()},
    )


async def _check_empty(conn: Conn, project_id: str, subject_id: str) -> None:
    """An export is imported into a subject with no memories: merged into another history, its
    conflict sets and statuses would be resolved against facts they never met."""
    if await facts_repo.list_facts(conn, project_id, subject_id, None, None, 1) or await repo.list_events(
        conn, project_id, subject_id, None, 1
    ):
        raise Conflict(
            f"{project_id}/{subject_id} already holds facts or events: an export is imported into an "
            "empty subject (erase it first, or choose another subject id)",
            subject_id=subject_id,
        )


async def _supersede_orphans(
    conn: Conn, project_id: str, subject_id: str, facts: list[ExportedFact], fact_ids: dict[UUID, UUID]
) -> None:
    """The facts exported `superseded` that no successor and no resolution of the import ended (the
    fact that replaced one was erased since): superseded again, ending where they had ended. The
    statement skips those no longer active."""
    orphans = [f for f in facts if f.status == "superseded"]
    if orphans:
        new_ids = [fact_ids[f.fact_id] for f in orphans]
        await facts_repo.supersede_facts(conn, project_id, subject_id, new_ids, [f.valid_to for f in orphans])
        await conflicts_repo.resolve_left_conflict_sets(conn, project_id, new_ids)


async def import_file(
    settings: Settings, doc: ExportDocument, project_id: str, subject_id: str
) -> ImportSummary:
    """`haki import` of an export document, straight into the database (the operator's tool, like
    `haki keys create`: it acts for the project it is told)."""
    from service.db import connect, init_connection
    from service.db.migrations import migrate
    from service.embedding.embedder import build_embedder, check_embedder

    principal = Principal(project_id=project_id, key_id=UUID(int=0))
    conn = await connect(settings)
    embedder = build_embedder(settings)
    try:
        await migrate(conn)
        await init_connection(conn)
        await check_embedder(embedder)
        return await import_document(conn, embedder, settings, principal, doc, project_id, subject_id)
    finally:
        await embedder.aclose()
        await conn.close()
