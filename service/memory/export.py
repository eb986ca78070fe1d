"""GET /v1/subjects/{subject_id}/export and its way back in, `haki import` of an export document.

The document is JSON Lines: a header line `{"haki_export": 2, "project_id", "subject_id",
"exported_at"}`, then every event of the scope (`"kind": "event"`), every fact of any status
(`"kind": "fact"`), each in id (creation) order, and every conflict set of either status
(`"kind": "conflict_set"`: key, status, created_at, resolved_at, member fact ids), read in one
repeatable-read snapshot. Lines never carry a field they do not define.

Import reads the whole document first and refuses it, naming the line, when an item breaks a
rule of POST /v1/events or /v1/facts, repeats an id, or links to an item not before it. Into a
subject with no memories only (a merge would resolve conflicts against facts they never met), it
embeds every text, then, in one transaction holding the scope's lock (lock_erasure_scope: a
second import or a write of the scope waits, then finds it restored whole), writes the events,
then the facts. Version 2 restores the facts with their exported statuses and valid times and
recreates the conflict sets as exported, nothing replayed. Version 1 (no conflict set lines) is
read best effort, as before: the facts go through the service's write path
(service/memory/writes.py), then an open set the import opened is resolved keeping the facts
exported `active` (unless all its members were active), the facts exported `retracted` are
retracted, and a fact exported `superseded` that nothing ended is superseded at its exported
valid_to. New ids and recorded_from are the import's own.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal
from uuid import UUID

import msgspec

from service.api.auth import Principal
from service.constants import MAX_BATCH
from service.embedding.embedder import Embedder
from service.errors import Conflict, NotFound
from service.ids import uuid7_batch
from service.memory import writes as memory
from service.repository import Conn, embedding_model, long_transaction
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

EXPORT_VERSION: Final = 2
# Version 1 documents (no conflict set lines) are still read, best effort (the module's docstring).
READ_VERSIONS: Final = (1, 2)
MEDIA_TYPE: Final = "application/x-ndjson"
# Rows read per round trip while streaming.
EXPORT_PAGE: Final = 500

_ENCODER = msgspec.json.Encoder()


# forbid_unknown_fields: a misspelt field (a hand-edited `valid_form`) would drop the value silently.
class ExportHeader(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    haki_export: int
    project_id: str
    subject_id: str
    exported_at: datetime


class ExportedEvent(msgspec.Struct, kw_only=True, tag_field="kind", tag="event", forbid_unknown_fields=True):
    event_id: UUID
    content: str
    occurred_at: datetime
    recorded_at: datetime | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class ExportedFact(msgspec.Struct, kw_only=True, tag_field="kind", tag="fact", forbid_unknown_fields=True):
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


class ExportedConflictSet(
    msgspec.Struct, kw_only=True, tag_field="kind", tag="conflict_set", forbid_unknown_fields=True
):
    """A conflict set as stored: its members' statuses say which were kept (version 2)."""

    conflict_set_id: UUID
    key: str
    status: Literal["open", "resolved"]
    created_at: datetime | None = None
    resolved_at: datetime | None = None
    members: list[UUID] = msgspec.field(default_factory=list)


class ExportEnd(msgspec.Struct, kw_only=True, tag_field="kind", tag="end", forbid_unknown_fields=True):
    """The last line of a version 2 document, with how many lines of each kind came before it:
    a document cut at a line's end (a download or a copy stopped short) reads as complete
    otherwise, and its import would restore part of the subject."""

    events: int
    facts: int
    conflict_sets: int


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
            # Each kind in id order, a page a round trip; a page's last id starts the next one.
            pages: list[tuple[Any, type[msgspec.Struct], Callable[[Any], UUID]]] = [
                (repo.list_events, ExportedEvent, lambda e: e.event_id),
                (repo.export_facts, ExportedFact, lambda f: f["fact_id"]),
                (repo.export_conflict_sets, ExportedConflictSet, lambda c: c["conflict_set_id"]),
            ]
            counts = []
            for read, line_type, last_id in pages:
                after: UUID | None = None
                counts.append(0)
                while True:
                    rows = await read(conn, project_id, subject_id, after, EXPORT_PAGE)
                    for row in rows:
                        yield _line(msgspec.convert(row, line_type, from_attributes=True))
                    counts[-1] += len(rows)
                    if len(rows) < EXPORT_PAGE:
                        break
                    after = last_id(rows[-1])
            yield _line(ExportEnd(events=counts[0], facts=counts[1], conflict_sets=counts[2]))


# --- import ----------------------------------------------------------------------------------


class ExportDocument(msgspec.Struct, kw_only=True):
    header: ExportHeader | None
    events: list[ExportedEvent]
    facts: list[ExportedFact]
    conflict_sets: list[ExportedConflictSet] = msgspec.field(default_factory=list)

    @property
    def version(self) -> int:
        """The header's; a document without one is version 2 when it has conflict set lines."""
        if self.header is not None:
            return self.header.haki_export
        return 2 if self.conflict_sets else 1


_ITEM = msgspec.json.Decoder(ExportedEvent | ExportedFact | ExportedConflictSet | ExportEnd)
_HEADER = msgspec.json.Decoder(ExportHeader)


def is_export_line(first: Any) -> bool:
    return isinstance(first, dict) and (
        "haki_export" in first or first.get("kind") in ("fact", "event", "conflict_set", "end")
    )


def line_text(raw: bytes, first: bool) -> bytes:
    """A JSON Lines line without its surrounding whitespace, and line 1 without a UTF-8 byte order
    mark (Windows editors write one): it is no part of the JSON. `haki import` reads lines so."""
    return (raw.removeprefix(codecs.BOM_UTF8) if first else raw).strip()


class _Seen:
    """What the lines read so far hold: the links of a line name items before it."""

    def __init__(self) -> None:
        self.event_ids: set[UUID] = set()
        self.facts: dict[UUID, ExportedFact] = {}
        self.set_ids: set[UUID] = set()
        self.open_keys: set[str] = set()


def parse_document(lines: Iterable[bytes]) -> ExportDocument:
    """Reads an export document; raises ValueError naming the line of the first bad one."""
    header: ExportHeader | None = None
    events: list[ExportedEvent] = []
    facts: list[ExportedFact] = []
    sets: list[ExportedConflictSet] = []
    seen = _Seen()
    end: ExportEnd | None = None
    for n, raw in enumerate(lines, start=1):
        text = line_text(raw, n == 1)
        if not text:
            continue
        if end is not None:
            raise ValueError(f"line {n}: a line after the document's end line")
        try:
            if header is None and not events and not facts and b'"haki_export"' in text:
                header = _HEADER.decode(text)
                if header.haki_export not in READ_VERSIONS:
                    raise ValueError(
                        f"haki_export {header.haki_export}: this version reads versions "
                        f"{', '.join(map(str, READ_VERSIONS))}"
                    )
                continue
            item = _ITEM.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ValueError(f"line {n}: {exc}") from exc
        if isinstance(item, ExportEnd):
            problem = _wrong_end(item, header, len(events), len(facts), len(sets))
            if problem is not None:
                raise ValueError(f"line {n}: {problem}")
            end = item
            continue
        problem = _unwritable(item, seen, header)
        if problem is not None:
            raise ValueError(f"line {n}: {problem}")
        if isinstance(item, ExportedEvent):
            events.append(item)
            seen.event_ids.add(item.event_id)
        elif isinstance(item, ExportedFact):
            facts.append(item)
            seen.facts[item.fact_id] = item
        else:
            sets.append(item)
            seen.set_ids.add(item.conflict_set_id)
            if item.status == "open":
                seen.open_keys.add(item.key)
    if end is None and header is not None and header.haki_export >= 2:
        raise ValueError(
            "the document has no end line: it was cut short (its end line counts the lines of "
            "each kind an export wrote)"
        )
    return ExportDocument(header=header, events=events, facts=facts, conflict_sets=sets)


def _wrong_end(end: ExportEnd, header: ExportHeader | None, events: int, facts: int, sets: int) -> str | None:
    """Why an end line does not close the lines before it, or None."""
    if header is None or header.haki_export < 2:
        return "an end line comes in haki_export 2 documents, after their header"
    read = {"events": events, "facts": facts, "conflict_sets": sets}
    counted = {"events": end.events, "facts": end.facts, "conflict_sets": end.conflict_sets}
    if read != counted:
        wrong = ", ".join(f"{k} {read[k]} read, {counted[k]} exported" for k in read if read[k] != counted[k])
        return f"the end line counts other lines than the document holds ({wrong}): lines are missing"
    return None


def _unwritable(
    item: ExportedEvent | ExportedFact | ExportedConflictSet, seen: _Seen, header: ExportHeader | None
) -> str | None:
    """Why an item could not be written as POST /v1/events or /v1/facts would write it (or stored
    as a conflict set), or None. msgspec checks a Struct's bounds when it decodes one, never when
    code builds it, so the item is converted to the request's Struct. Links name items before
    it: a document the service exports has no other (an erasure nulls the links to what it
    erases)."""
    try:
        if isinstance(item, ExportedEvent):
            if item.event_id in seen.event_ids:
                return f"event_id {item.event_id} appears twice"
            msgspec.convert(msgspec.to_builtins(_event_in(item)), EventIn)
            return None
        if isinstance(item, ExportedConflictSet):
            return _unstorable_set(item, seen, header)
        if seen.set_ids:
            return "a fact after the conflict sets: they come last, naming facts before them"
        if item.fact_id in seen.facts:
            return f"fact_id {item.fact_id} appears twice"
        if item.supersedes is not None:
            replaced = seen.facts.get(item.supersedes)
            if replaced is None:
                return f"supersedes {item.supersedes}: no fact before it in the document"
            if replaced.status == "retracted":
                # As a write answers 422: only an active fact is superseded.
                return f"supersedes {item.supersedes}: a retracted fact, which nothing supersedes"
        if item.source_event_id is not None and item.source_event_id not in seen.event_ids:
            return f"source_event_id {item.source_event_id}: no event before the facts in the document"
        if item.valid_from is not None and item.valid_to is not None and item.valid_to <= item.valid_from:
            return "valid_to must be later than valid_from"
        msgspec.convert(msgspec.to_builtins(_fact_in(item, {}, {})), FactIn)
    except msgspec.ValidationError as exc:
        return str(exc)
    return None


def _unstorable_set(item: ExportedConflictSet, seen: _Seen, header: ExportHeader | None) -> str | None:
    """Why a conflict set line could not be restored, or None."""
    if header is not None and header.haki_export < 2:
        return "conflict_set lines come in haki_export 2 documents"
    if item.conflict_set_id in seen.set_ids:
        return f"conflict_set_id {item.conflict_set_id} appears twice"
    msgspec.convert({"content": "key", "key": item.key}, FactIn)  # the key's bounds
    if item.status == "open" and item.resolved_at is not None:
        return "an open conflict set has no resolved_at"
    if item.status == "open" and item.key in seen.open_keys:
        return f"a second open conflict set of key {item.key!r}: a key has one open set"
    if len(set(item.members)) != len(item.members):
        return "a member appears twice"
    for member in item.members:
        fact = seen.facts.get(member)
        if fact is None:
            return f"member {member}: no fact before it in the document"
        if fact.key != item.key:
            return f"member {member}: a fact of another key than {item.key!r}"
    return None


class ImportSummary(msgspec.Struct, kw_only=True):
    events: int
    facts: int
    retracted: int
    conflicts_resolved: int
    fact_ids: dict[str, str]
    event_ids: dict[str, str]
    conflict_sets: int = 0


def _event_in(e: ExportedEvent) -> EventIn:
    return EventIn(content=e.content, occurred_at=e.occurred_at, metadata=e.metadata or None)


def _fact_in(f: ExportedFact, fact_ids: dict[UUID, UUID], event_ids: dict[UUID, UUID]) -> FactIn:
    # A superseded fact is written with the valid_to it had while believed: its successor's
    # `supersedes` ends it again, as it did the first time (version 1's replay).
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
    """Writes an export document into (project_id, subject_id) in one transaction. Every text is
    embedded first, outside it (the write path's `prepare_*`): a transaction held across the
    embedder was killed by idle_in_transaction_session_timeout."""
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
    job = _Import(embedder, settings, principal, project_id, subject_id, event_batches)
    return await (_restore if doc.version >= 2 else _replay)(conn, doc, job)


@dataclass(frozen=True, slots=True)
class _Import:
    """Where an import writes, with what, and its events, embedded before its transaction."""

    embedder: Embedder
    settings: Settings
    principal: Principal
    project_id: str
    subject_id: str
    event_batches: list[tuple[list[ExportedEvent], Any]]


async def _begin_import(conn: Conn, project_id: str, subject_id: str) -> None:
    """First in the import's transaction: the scope's lock, exclusive (a concurrent import waits,
    then is refused below; a write waits, then meets the scope restored whole), then emptiness
    again, as an import that raced this one has committed by now."""
    await repo.lock_erasure_scope(conn, project_id, "subject", subject_id=subject_id)
    await _check_empty(conn, project_id, subject_id)


async def _store_events(conn: Conn, event_batches: list[tuple[list[ExportedEvent], Any]]) -> dict[UUID, UUID]:
    event_ids: dict[UUID, UUID] = {}
    for chunk, prepared_events in event_batches:
        written = await memory.store_events(conn, prepared_events)
        event_ids.update(zip((e.event_id for e in chunk), (r.event_id for r in written.events), strict=True))
    return event_ids


async def _restore(conn: Conn, doc: ExportDocument, job: _Import) -> ImportSummary:
    """Version 2: facts written with their exported statuses, conflict sets recreated as
    exported. Replaying writes cannot: a supersession resolved a set the original left open, a
    retraction became a supersession, sets of one key merged (docs/lifecycle.md)."""
    fact_ids: dict[UUID, UUID] = {}
    fact_batches = []
    for start in range(0, len(doc.facts), MAX_BATCH):
        batch = doc.facts[start : start + MAX_BATCH]
        # Links are set below, once every new id is known; valid_to is the exported one.
        items = [msgspec.structs.replace(_fact_in(f, {}, {}), valid_to=f.valid_to) for f in batch]
        req = WriteFactsRequest(project_id=job.project_id, subject_id=job.subject_id, facts=items)
        prepared = await memory.prepare_facts(job.embedder, job.settings, job.principal, req)
        fact_ids.update(zip((f.fact_id for f in batch), prepared.fact_ids, strict=True))
        fact_batches.append((batch, prepared))
    set_ids = dict(
        zip((c.conflict_set_id for c in doc.conflict_sets), uuid7_batch(len(doc.conflict_sets)), strict=True)
    )
    async with conn.transaction():
        await _begin_import(conn, job.project_id, job.subject_id)
        event_ids = await _store_events(conn, job.event_batches)
        for batch, prepared in fact_batches:
            columns = {
                **prepared.columns,
                "statuses": [f.status for f in batch],
                "believed_valid_tos": [f.believed_valid_to for f in batch],
                "supersedes": [fact_ids[f.supersedes] if f.supersedes else None for f in batch],
                "source_event_ids": [
                    event_ids[f.source_event_id] if f.source_event_id else None for f in batch
                ],
            }
            async with long_transaction(conn, prepared.timeout_ms):
                if prepared.model is not None:
                    await embedding_model.hold_model(conn, job.project_id, prepared.model)
                await facts_repo.restore_facts(conn, job.project_id, job.subject_id, columns)
        if doc.conflict_sets:
            sets = doc.conflict_sets
            await conflicts_repo.restore_conflict_sets(
                conn,
                job.project_id,
                job.subject_id,
                {
                    "conflict_set_ids": [set_ids[c.conflict_set_id] for c in sets],
                    "keys": [c.key for c in sets],
                    "statuses": [c.status for c in sets],
                    "created_ats": [c.created_at for c in sets],
                    "resolved_ats": [c.resolved_at for c in sets],
                },
            )
            pairs = [(set_ids[c.conflict_set_id], fact_ids[m]) for c in sets for m in c.members]
            await conflicts_repo.restore_conflict_members(
                conn, job.project_id, [p[0] for p in pairs], [p[1] for p in pairs]
            )
    return ImportSummary(
        events=len(event_ids),
        facts=len(fact_ids),
        retracted=sum(f.status == "retracted" for f in doc.facts),
        conflicts_resolved=sum(c.status == "resolved" for c in doc.conflict_sets),
        conflict_sets=len(doc.conflict_sets),
        fact_ids={str(k): str(v) for k, v in fact_ids.items()},
        event_ids={str(k): str(v) for k, v in event_ids.items()},
    )


async def _replay(conn: Conn, doc: ExportDocument, job: _Import) -> ImportSummary:
    """Version 1, best effort: the facts through the write path, then the exported statuses."""
    fact_ids: dict[UUID, UUID] = {}
    fact_batches = []
    for batch in _fact_batches(doc.facts):
        # `supersedes` names a fact of an earlier batch, whose new id is known (ids are made by
        # prepare_facts); the new event ids are known once the events are stored.
        req_facts = WriteFactsRequest(
            project_id=job.project_id,
            subject_id=job.subject_id,
            facts=[_fact_in(f, fact_ids, {}) for f in batch],
        )
        prepared = await memory.prepare_facts(job.embedder, job.settings, job.principal, req_facts)
        fact_ids.update(zip((f.fact_id for f in batch), prepared.fact_ids, strict=True))
        fact_batches.append((batch, prepared))
    exported_status = {fact_ids[f.fact_id]: f.status for f in doc.facts}
    # Version 1 names a fact's set only while that set is open.
    exported_open = {fact_ids[f.fact_id] for f in doc.facts if f.conflict_set_id is not None}
    async with conn.transaction():
        await _begin_import(conn, job.project_id, job.subject_id)
        event_ids = await _store_events(conn, job.event_batches)
        opened: set[UUID] = set()
        for batch, prepared in fact_batches:
            sources = [event_ids.get(f.source_event_id) if f.source_event_id else None for f in batch]
            for item, source in zip(prepared.req.facts, sources, strict=True):
                item.source_event_id = source
            prepared.columns["source_event_ids"] = sources
            written_facts = await memory.store_facts(conn, prepared)
            opened.update(r.conflict_set_id for r in written_facts.facts if r.conflict_set_id is not None)
        # Retractions first: resolving a set supersedes its members not kept, and a retracted one
        # would stay superseded (PATCH refuses a superseded fact). A set left with one claim resolves.
        retracted = 0
        for f in doc.facts:
            if f.status == "retracted":
                try:
                    await memory.patch_fact(
                        conn, job.principal, fact_ids[f.fact_id], PatchFactRequest(status="retracted")
                    )
                except Conflict:
                    # Superseded by an exported successor: retracted after it, before PATCH kept
                    # a superseded fact as it was. Its successor already ended its belief.
                    continue
                retracted += 1
        resolved = 0
        for conflict_set_id in sorted(opened):
            (current,) = await conflicts_repo.list_conflicts(
                conn, job.project_id, None, None, conflict_set_id
            )
            if current.status != "open":
                resolved += 1  # left with one claim by a retraction or a successor of the replay
                continue
            # The claims left: a member retracted above is neither kept nor superseded.
            claims = [m.fact_id for m in current.members if m.status == "active"]
            keep = [m for m in claims if exported_status.get(m) == "active"]
            # Claims exported active outside any open set were served: their set was resolved
            # keeping them. Claims of an open set stay in one.
            if keep and (len(keep) < len(claims) or not exported_open.intersection(keep)):
                await memory.resolve_conflict(
                    conn, job.principal, conflict_set_id, ResolveConflictRequest(keep=keep)
                )
                resolved += 1
        await _supersede_orphans(conn, job.project_id, job.subject_id, doc.facts, fact_ids)
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
    from service.db.migrations import require_migrated
    from service.embedding.embedder import build_embedder, check_embedder

    principal = Principal(project_id=project_id, key_id=UUID(int=0))
    conn = await connect(settings)
    embedder = build_embedder(settings)
    try:
        await require_migrated(conn)
        await init_connection(conn)
        await check_embedder(embedder)
        return await import_document(conn, embedder, settings, principal, doc, project_id, subject_id)
    finally:
        await embedder.aclose()
        await conn.close()
