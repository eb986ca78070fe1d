"""`haki import FILE.jsonl`: bulk-load facts or events through the service's own write path.

Each line is one FactIn (or EventIn) object. Lines are validated one by one with the request
Structs, then written in batches of up to 1,000 by service.memory.writes.write_facts / write_events,
in-process, so an import obeys exactly the rules of POST /v1/facts (conflict detection,
supersedes, embeddings) without HTTP in between. With `--url` or HAKI_URL (and the key in
HAKI_API_KEY) the batches go through a running Haki's HTTP API instead, for an operator without
database access; the rules, the line-by-line rejection and the resuming are the same.

`--kind` left out, the kind is read off the first line: events have `occurred_at`, facts never.

Up to `--concurrency` batches (2 by default) are stored at once, each in its own transaction on
its own connection, and meanwhile the next one is read, checked and embedded (one batch ahead, no
more): the import waits on the database and the embedder together, and a server's second core
takes a second batch's index inserts. Batches are embedded in file order, so fact ids stay
ordered by line across batches; they may commit out of order.

A bad line never stops the import: invalid JSON, a Struct violation, or a rule only the service
checks (`InvalidInput` naming `facts[i]`) rejects that line alone, and the summary lists it with
its line number.

Resuming: after each committed batch FILE.haki-progress is written (atomically, fsynced): the
byte offset and line number up to which every batch has committed, and the spans of the batches
committed beyond it. Ctrl-C or SIGTERM finishes the batches in flight, saves the position and
exits 130; the same command then resumes after the position and skips the spans, so each line
is written once. A hard kill (SIGKILL, power loss) between a batch's COMMIT and the progress
write loses only the record: each batch is stored under an Idempotency-Key derived from the
import's `run_id` (saved before the first batch) and its lines, as POST /v1/facts stores one, so
the resumed import gets that batch's first answer back instead of writing it again (within
HAKI_IDEMPOTENCY_TTL_SECONDS). `--restart` ignores a saved position and starts a new run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, TypeVar
from uuid import NAMESPACE_URL, UUID, uuid5

import httpx
import msgspec
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from service.api.auth import Principal
from service.constants import IMPORT_CONCURRENCY, IMPORT_MAX_CONCURRENCY, MAX_BATCH
from service.db import connect, create_pool
from service.db.migrations import require_migrated
from service.embedding.embedder import Embedder, build_embedder, check_embedder
from service.errors import IDEMPOTENCY_KEY_REUSED, EmbeddingModelMismatch, IdempotencyKeyReused, InvalidInput
from service.ids import uuid7
from service.memory import idempotency
from service.memory import writes as memory
from service.memory.export import line_text
from service.memory.statistics import StatisticsKeeper
from service.repository.maintenance import MemoryTable
from service.settings import Settings
from service.structs import (
    EventIn,
    FactIn,
    ProjectId,
    SubjectId,
    WriteEventsRequest,
    WriteEventsResponse,
    WriteFactsRequest,
    WriteFactsResponse,
)

# What an import file holds: the rows of one memory table.
Kind = MemoryTable

PROGRESS_SUFFIX: Final = ".haki-progress"
# 2 adds `committed_ahead`, 3 `run_id`; an older file resumes as before (its batches keyed by
# file, scope and lines: batch_key).
PROGRESS_VERSION: Final = 3
# The summary names every rejected line up to this many; the progress file keeps as many.
MAX_LISTED_REJECTS: Final = 1000


class Exit(IntEnum):
    """The exit status of `haki import`."""

    OK = 0
    REJECTED = 1  # some lines were refused; every other line is written
    USAGE = 2  # nothing was imported: bad options, no such file, a remote that refuses the key
    INTERRUPTED = 130  # stopped by a signal after a committed batch; the same command resumes


# The CLI is the operator's own tool, run with database access: it acts for the project it is
# told, like `haki keys create`, without an API key.
CLI_KEY_ID: Final = UUID(int=0)

_ITEM_INDEX = re.compile(r"^(?:facts|events)\[(?P<i>\d+)\]")


class ImportAborted(Exception):
    """The import cannot start or go on (bad arguments, unreadable file, stale progress)."""


class Rejected(msgspec.Struct, frozen=True):
    line: int
    error: str


class Span(msgspec.Struct, frozen=True):
    """The lines of one batch: from the byte offset after line `start_line` to `end_offset`."""

    start_offset: int
    start_line: int
    end_offset: int
    end_line: int


class ImportProgress(msgspec.Struct, kw_only=True):
    version: int = PROGRESS_VERSION
    kind: Kind
    project_id: str
    subject_id: str
    # Every line up to here is done (written or rejected) ...
    offset: int = 0
    line: int = 0
    # ... and so are these batches beyond it, committed before a batch ahead of them.
    committed_ahead: list[Span] = msgspec.field(default_factory=list)
    written: int = 0
    rejected_count: int = 0
    rejected: list[Rejected] = msgspec.field(default_factory=list)
    done: bool = False
    # This run's id, saved before its first batch: the batches' Idempotency-Keys derive from it
    # (batch_key). None in a file before version 3.
    run_id: UUID | None = None
    # Of `written`, the lines found committed by an earlier run when the import resumed.
    replayed: int = 0


class _Scope(msgspec.Struct, forbid_unknown_fields=True):
    project_id: ProjectId
    subject_id: SubjectId


@dataclass(frozen=True)
class Remote:
    """A running Haki to import through (`--url` or HAKI_URL, with HAKI_API_KEY)."""

    url: str
    api_key: str


@dataclass(frozen=True)
class ImportOptions:
    path: Path
    project_id: str
    subject_id: str
    kind: Kind = "facts"
    restart: bool = False
    batch_size: int = MAX_BATCH
    show_progress: bool = True
    remote: Remote | None = None
    concurrency: int = IMPORT_CONCURRENCY


@dataclass
class _Batch:
    start_offset: int
    start_line: int
    items: list[tuple[int, Any]] = field(default_factory=list)
    rejects: list[Rejected] = field(default_factory=list)
    end_offset: int = 0
    end_line: int = 0
    # Lines an earlier run of this import had committed (answered from the batch key's record).
    replayed: int = 0

    def span(self) -> Span:
        return Span(self.start_offset, self.start_line, self.end_offset, self.end_line)


def progress_path(path: Path) -> Path:
    return path.with_name(path.name + PROGRESS_SUFFIX)


def _load_progress(opts: ImportOptions) -> ImportProgress:
    fresh = ImportProgress(
        kind=opts.kind, project_id=opts.project_id, subject_id=opts.subject_id, run_id=uuid7()
    )
    saved_at = progress_path(opts.path)
    if opts.restart or not saved_at.exists():
        return fresh
    try:
        saved = msgspec.json.decode(saved_at.read_bytes(), type=ImportProgress)
    except msgspec.DecodeError as exc:
        raise ImportAborted(f"{saved_at} is unreadable ({exc}); use --restart to start over") from exc
    if (saved.kind, saved.project_id, saved.subject_id) != (opts.kind, opts.project_id, opts.subject_id):
        raise ImportAborted(
            f"{saved_at} belongs to an import of {saved.kind} into {saved.project_id}/{saved.subject_id}; "
            "run that command again to resume it, or use --restart"
        )
    if saved.offset > opts.path.stat().st_size:
        raise ImportAborted(f"{opts.path} is shorter than the position saved in {saved_at}; use --restart")
    return saved


def _save_progress(opts: ImportOptions, progress: ImportProgress) -> None:
    progress.version = PROGRESS_VERSION  # a resumed version 1 file is saved as this version
    target = progress_path(opts.path)
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(msgspec.json.encode(progress))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def batch_key(opts: ImportOptions, run_id: UUID | None, lines: list[int]) -> str:
    """The Idempotency-Key of a batch of these lines: the same for every run of one import, so a
    batch that committed without its progress record is answered, not written, when the import
    resumes; another for a --restart. A progress file before version 3 (no run_id) keeps the
    keys its import was started with, of the file, the scope and the lines."""
    origin = (
        str(run_id) if run_id is not None else f"{opts.path.resolve()}|{opts.project_id}|{opts.subject_id}"
    )
    return str(uuid5(NAMESPACE_URL, f"{origin}|{lines}"))


class ChangedFile(ImportAborted):
    """A batch of these lines was committed by an earlier run of this import with other content."""

    def __init__(self, opts: ImportOptions, lines: list[int]) -> None:
        super().__init__(
            f"lines {lines[0]}-{lines[-1]} of {opts.path} were imported by an earlier run of this "
            "import with other content (the file changed since); --restart imports the file again"
        )


def count_lines(path: Path) -> int:
    lines = 0
    last = b"\n"
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (0 if last == b"\n" else 1)


def _short(exc: Exception) -> str:
    return str(exc).replace("\n", " ")[:300]


def _batches(
    opts: ImportOptions, start_offset: int, start_line: int, skip: list[Span] | None = None
) -> Iterator[_Batch]:
    """Reads from the saved position, past the spans already committed; yields batches of valid
    items with the lines they reject."""
    item_type: type[FactIn] | type[EventIn] = FactIn if opts.kind == "facts" else EventIn
    decoder = msgspec.json.Decoder(item_type)
    skipped = {span.start_offset: span for span in skip or ()}
    batch = _Batch(start_offset, start_line, end_offset=start_offset, end_line=start_line)
    with opts.path.open("rb") as f:
        f.seek(start_offset)
        offset, line_no = start_offset, start_line
        while True:
            while (span := skipped.get(offset)) is not None:  # spans may follow one another
                if batch.end_line > batch.start_line:
                    yield batch
                f.seek(span.end_offset)
                offset, line_no = span.end_offset, span.end_line
                batch = _Batch(offset, line_no, end_offset=offset, end_line=line_no)
            raw = f.readline()
            if not raw:
                break
            offset += len(raw)
            line_no += 1
            text = line_text(raw, line_no == 1)
            if text:
                try:
                    batch.items.append((line_no, decoder.decode(text)))
                except msgspec.ValidationError as exc:
                    error = f"invalid {opts.kind[:-1]}: {_short(exc)}"
                    if opts.kind == "facts" and "`occurred_at`" in str(exc):
                        error += " (an event? import events with --kind events)"
                    batch.rejects.append(Rejected(line_no, error))
                except msgspec.DecodeError as exc:
                    batch.rejects.append(Rejected(line_no, f"invalid JSON: {_short(exc)}"))
            batch.end_offset, batch.end_line = offset, line_no
            if len(batch.items) >= opts.batch_size:
                yield batch
                batch = _Batch(offset, line_no, end_offset=offset, end_line=line_no)
    if batch.end_line > batch.start_line:
        yield batch


Prepared = memory.PreparedFacts | memory.PreparedEvents
# The batch being checked and embedded while the one before it is stored.
Ahead: TypeAlias = "asyncio.Future[Prepared] | None"
_P = TypeVar("_P")


async def _prepare(embedder: Embedder, settings: Settings, opts: ImportOptions, items: list[Any]) -> Prepared:
    """The batch checked and embedded, as POST /v1/facts (/v1/events) does before its transaction."""
    principal = Principal(project_id=opts.project_id, key_id=CLI_KEY_ID)
    if opts.kind == "facts":
        facts_req = WriteFactsRequest(project_id=opts.project_id, subject_id=opts.subject_id, facts=items)
        return await memory.prepare_facts(embedder, settings, principal, facts_req)
    events_req = WriteEventsRequest(project_id=opts.project_id, subject_id=opts.subject_id, events=items)
    return await memory.prepare_events(embedder, settings, principal, events_req)


class _Held:
    """The connection a batch is stored on, lent as a request's is (idempotency.run_once)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def set_aside(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


async def _store(conn: Any, settings: Settings, prepared: Prepared, key: str) -> bool:
    """Stores the batch in one transaction under Idempotency-Key `key`, as POST /v1/facts
    (/v1/events) does: a key an earlier run committed is answered from its record (True)."""
    if isinstance(prepared, memory.PreparedFacts):
        facts = (prepared.req, "POST /v1/facts", WriteFactsResponse, memory.store_facts)
        return await _store_once(conn, settings, prepared, key, *facts)
    events = (prepared.req, "POST /v1/events", WriteEventsResponse, memory.store_events)
    return await _store_once(conn, settings, prepared, key, *events)


async def _store_once(
    conn: Any,
    settings: Settings,
    prepared: _P,
    key: str,
    request: WriteFactsRequest | WriteEventsRequest,
    route: str,
    response_type: type[idempotency.T],
    store: Callable[[Any, _P], Awaitable[idempotency.T]],
) -> bool:
    async def ready() -> _P:
        return prepared

    as_cli = Principal(project_id=request.project_id, key_id=CLI_KEY_ID)
    once = functools.partial(idempotency.run_once, _Held(conn), settings, as_cli, status_code=201)
    outcome = await once(
        project_id=request.project_id, subject_id=request.subject_id, key=key, route=route, request=request,
        response_type=response_type, prepare=ready, write=functools.partial(store, conn),
    )  # fmt: skip
    return outcome.replayed


def _without(prepared: Prepared, i: int) -> Prepared:
    """The prepared batch less its item `i`, the others' vectors kept (an OpenAI-compatible
    embedder has no cache: embedding the batch again would pay for every text again)."""

    def drop(values: list[Any]) -> list[Any]:
        return values[:i] + values[i + 1 :]

    if isinstance(prepared, memory.PreparedFacts):
        return memory.only_facts(prepared, [j for j in range(len(prepared.fact_ids)) if j != i])
    events_req = msgspec.structs.replace(prepared.req, events=drop(prepared.req.events))
    return dataclasses.replace(prepared, req=events_req, embeddings=drop(prepared.embeddings))


async def _write_batch(
    conn: Any,
    embedder: Embedder,
    settings: Settings,
    opts: ImportOptions,
    run_id: UUID | None,
    batch: _Batch,
    ahead: Ahead = None,
) -> int:
    """Writes the batch atomically, at most once (batch_key); a line the service refuses is
    rejected and the rest retried.

    `ahead` is the batch already being checked and embedded (started while the previous batch
    was stored). A line the checks refuse is dropped and the rest checked again before any
    embedding; a line the transaction refuses is dropped with the others' vectors kept.
    """
    items = list(batch.items)
    prepared: Prepared | None = None
    while items:
        lines = [n for n, _ in items]
        try:
            if prepared is None:
                started, ahead = ahead, None
                prepared = await (started or _prepare(embedder, settings, opts, [i for _, i in items]))
            if await _store(conn, settings, prepared, batch_key(opts, run_id, lines)):
                batch.replayed = len(items)
        except IdempotencyKeyReused as exc:
            raise ChangedFile(opts, lines) from exc
        except InvalidInput as exc:
            where = _ITEM_INDEX.match(str((exc.details or {}).get("field", "")))
            if where is None or int(where.group("i")) >= len(items):
                batch.rejects.extend(Rejected(n, f"refused: {exc.message}") for n, _ in items)
                return 0
            index = int(where.group("i"))
            line_no, _ = items.pop(index)
            prepared = None if prepared is None else _without(prepared, index)
            message = re.sub(r"^(?:facts|events)\[\d+\]\.?", "", exc.message).lstrip(": ")
            batch.rejects.append(Rejected(line_no, f"refused: {message or exc.message}"))
            continue
        return len(items)
    return 0


def detect_kind(path: Path) -> Kind | Literal["export"]:
    """`export` when the file's first non-empty line is the header of an export document
    (service/memory/export.py), `events` when it is an object with `occurred_at` (every event
    has it, no fact does), else `facts`; an unreadable first line is left to the import to report."""
    try:
        with path.open("rb") as f:
            for n, raw in enumerate(f):
                text = line_text(raw, n == 0)
                if text:
                    first = msgspec.json.decode(text)
                    if isinstance(first, dict) and "haki_export" in first:
                        return "export"
                    return "events" if isinstance(first, dict) and "occurred_at" in first else "facts"
    except (OSError, msgspec.DecodeError):
        pass
    return "facts"


class _LocalWriter:
    """Writes batches in-process, straight to the database (the default)."""

    def __init__(self, settings: Settings, embedder: Embedder, pool: Any) -> None:
        self.settings, self.embedder, self.pool = settings, embedder, pool
        # As the service does after its bulk writes: the table's planner statistics follow the
        # import (an ANALYZE per 10 % of growth), not autovacuum's naptime.
        self.statistics = StatisticsKeeper(pool)
        self._refreshing = asyncio.Lock()  # batches stored at once: one ANALYZE for all of them

    @classmethod
    async def open(cls, settings: Settings, project_id: str) -> _LocalWriter:
        """Raises EmbeddingModelMismatch before any line is embedded when the project's vectors
        were made by another model than this one."""
        conn = await connect(settings)
        try:
            await require_migrated(conn)
        finally:
            await conn.close()
        embedder = build_embedder(settings)
        await check_embedder(embedder)
        writer = cls(settings, embedder, await create_pool(settings))
        try:
            async with writer.pool.acquire() as conn:
                await memory.refuse_other_model(conn, embedder, project_id)
            await writer.statistics.load_estimates()
        except BaseException:
            await writer.aclose()
            raise
        return writer

    def start(self, opts: ImportOptions, batch: _Batch) -> Ahead:
        """Starts checking and embedding the batch, to overlap the store of the one before it."""
        if not batch.items:
            return None
        items = [i for _, i in batch.items]
        return asyncio.ensure_future(_prepare(self.embedder, self.settings, opts, items))

    async def write(self, opts: ImportOptions, run: UUID | None, batch: _Batch, ahead: Ahead = None) -> int:
        async with self.pool.acquire() as conn:
            written = await _write_batch(conn, self.embedder, self.settings, opts, run, batch, ahead)
        self.statistics.note(opts.kind, written)
        async with self._refreshing:
            await self.statistics.refresh_due()
        return written

    async def aclose(self) -> None:
        await self.pool.close()
        await self.embedder.aclose()


class RemoteError(Exception):
    """The remote Haki refused a batch as a whole (bad key, another project, unavailable)."""


class RemoteModelMismatch(RemoteError):
    """The remote Haki embeds with another model than the project's vectors (its 409
    `embedding_model_mismatch`): no batch of this import can be written there."""


class _RemoteWriter:
    """Writes batches through a running Haki's HTTP API, with the same per-line rejection as the
    local writer: a 4xx naming `facts[i]` (`events[i]`) rejects that line and the rest is sent
    again. Each request carries the batch's Idempotency-Key (the run and the lines sent), so a
    batch resent after a lost answer is never written twice, and one whose key the server holds
    with other content stops the import as the local writer does (ChangedFile)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    def start(self, opts: ImportOptions, batch: _Batch) -> None:
        """Nothing ahead: the remote service embeds each batch inside its own request."""
        return None

    @classmethod
    async def open(cls, remote: Remote, opts: ImportOptions) -> _RemoteWriter:
        client = httpx.AsyncClient(
            base_url=remote.url.rstrip("/"),
            headers={"Authorization": f"Bearer {remote.api_key}"},
            timeout=httpx.Timeout(120.0, connect=10.0),
        )
        try:
            # The key and the project are checked before the first batch, not by it.
            r = await client.get("/v1/facts", params={"project_id": opts.project_id, "limit": 1})
        except httpx.HTTPError as exc:
            await client.aclose()
            raise ImportAborted(f"{remote.url}: no answer ({exc!r})") from exc
        if r.status_code != 200:
            await client.aclose()
            raise ImportAborted(f"{remote.url}: {r.status_code} {_error_message(r)}")
        return cls(client)

    async def write(self, opts: ImportOptions, run: UUID | None, batch: _Batch, ahead: Ahead = None) -> int:
        items = list(batch.items)
        while items:
            body = {
                "project_id": opts.project_id,
                "subject_id": opts.subject_id,
                opts.kind: [msgspec.to_builtins(i) for _, i in items],
            }
            lines = [n for n, _ in items]
            r = await self.client.post(
                f"/v1/{opts.kind}",
                content=msgspec.json.encode(body),
                headers={
                    "content-type": "application/json",
                    "Idempotency-Key": batch_key(opts, run, lines),
                },
            )
            if r.status_code in (200, 201):
                if r.headers.get("Idempotent-Replayed") == "true":
                    batch.replayed = len(items)
                return len(items)
            if r.status_code == 409 and _error_detail(r, "reason") == IDEMPOTENCY_KEY_REUSED:
                raise ChangedFile(opts, lines)
            if r.status_code == 409 and _error_body(r).get("code") == "embedding_model_mismatch":
                raise RemoteModelMismatch(_error_message(r))
            field_name = _error_detail(r, "field")
            where = _ITEM_INDEX.match(field_name)
            if r.status_code not in (400, 422) or where is None or int(where.group("i")) >= len(items):
                raise RemoteError(f"{r.status_code} {_error_message(r)}")
            line_no, _ = items.pop(int(where.group("i")))
            message = re.sub(r"^(?:facts|events)\[\d+\]\.?", "", _error_message(r)).lstrip(": ")
            batch.rejects.append(Rejected(line_no, f"refused: {message}"))
        return 0

    async def aclose(self) -> None:
        await self.client.aclose()


def _error_body(r: httpx.Response) -> dict[str, Any]:
    try:
        body = r.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error_message(r: httpx.Response) -> str:
    return str(_error_body(r).get("message") or r.reason_phrase)


def _error_detail(r: httpx.Response, name: str) -> str:
    details = _error_body(r).get("details")
    return str(details.get(name, "")) if isinstance(details, dict) else ""


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- lines/s" if speed is None else f"{speed:,.0f} lines/s", style="progress.data.speed")


def _progress_bar(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("lines"),
        _RateColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not enabled,
    )


def _summary(out: Console, opts: ImportOptions, progress: ImportProgress, total_lines: int) -> None:
    out.print(
        f"{opts.path}: {progress.written} {opts.kind} written into {opts.project_id}/{opts.subject_id}"
        + (f" ({progress.replayed} of them found committed by an earlier run)" if progress.replayed else "")
        + f", {progress.rejected_count} line(s) rejected, "
        f"{progress.line} of {total_lines} line(s) read",
        highlight=False,
    )
    if progress.rejected:
        out.print("rejected lines:", highlight=False)
        for r in sorted(progress.rejected, key=lambda r: r.line):
            out.print(f"  line {r.line}: {r.error}", highlight=False, markup=False)
        hidden = progress.rejected_count - len(progress.rejected)
        if hidden > 0:
            out.print(f"  ... and {hidden} more", highlight=False)


def _record(opts: ImportOptions, progress: ImportProgress, batch: _Batch, written: int) -> None:
    """A batch is done: its counts join the progress, and the position moves past every batch
    done from it on; a batch done before one ahead of it is kept as a span. Saved at once."""
    progress.written += written
    progress.replayed += batch.replayed
    progress.rejected_count += len(batch.rejects)
    room = MAX_LISTED_REJECTS - len(progress.rejected)
    progress.rejected.extend(batch.rejects[: max(0, room)])
    ahead = {span.start_offset: span for span in progress.committed_ahead}
    ahead[batch.start_offset] = batch.span()
    while (span := ahead.pop(progress.offset, None)) is not None:
        progress.offset, progress.line = span.end_offset, span.end_line
    progress.committed_ahead = sorted(ahead.values(), key=lambda span: span.start_offset)
    _save_progress(opts, progress)


class _Stores:
    """The batches being stored, at most `opts.concurrency` at once, each recorded as it commits."""

    def __init__(self, opts: ImportOptions, progress: ImportProgress, on_commit: Callable[[], None]) -> None:
        self.opts, self.progress, self.on_commit = opts, progress, on_commit
        self.running: dict[asyncio.Future[int], _Batch] = {}

    async def add(self, batch: _Batch, store: Callable[[], Awaitable[int]]) -> None:
        """Starts storing `batch` once a place is free; a batch of rejected lines only is done."""
        if not batch.items:
            _record(self.opts, self.progress, batch, 0)
            self.on_commit()
            return
        while len(self.running) >= self.opts.concurrency:
            await self._settle()
        self.running[asyncio.ensure_future(store())] = batch

    async def drain(self, *, quietly: bool = False) -> None:
        """Waits for every batch in flight; the first failure is raised unless `quietly`."""
        failure: BaseException | None = None
        while self.running:
            try:
                await self._settle()
            except Exception as exc:
                failure = failure or exc
        if failure is not None and not quietly:
            raise failure

    async def _settle(self) -> None:
        done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
        failure: BaseException | None = None
        for store in done:
            batch = self.running.pop(store)
            if (exc := store.exception()) is not None:
                failure = failure or exc
                continue
            _record(self.opts, self.progress, batch, store.result())
            self.on_commit()
        if failure is not None:
            raise failure


async def run_import(settings: Settings, opts: ImportOptions) -> int:
    # No emoji codes: a model name, a project id or a line's text holding `:b:` or `:x:` is
    # printed as it is.
    err = Console(stderr=True, soft_wrap=True, emoji=False)
    out = Console(soft_wrap=True, emoji=False)
    try:
        msgspec.convert({"project_id": opts.project_id, "subject_id": opts.subject_id}, _Scope)
        if not 1 <= opts.batch_size <= MAX_BATCH:
            raise ImportAborted(f"--batch-size must be within 1..{MAX_BATCH}")
        if not 1 <= opts.concurrency <= IMPORT_MAX_CONCURRENCY:
            raise ImportAborted(f"--concurrency must be within 1..{IMPORT_MAX_CONCURRENCY}")
        if not opts.path.is_file():
            raise ImportAborted(f"{opts.path}: no such file")
        progress = _load_progress(opts)
    except (ImportAborted, msgspec.ValidationError, OSError) as exc:
        err.print(f"haki import: {exc}", highlight=False, markup=False)
        return Exit.USAGE
    total_lines = count_lines(opts.path)
    if progress.done:
        err.print(
            f"{opts.path} was already imported (see {progress_path(opts.path)}); --restart imports it again",
            highlight=False,
        )
        _summary(out, opts, progress, total_lines)
        return Exit.REJECTED if progress.rejected_count else Exit.OK
    if progress.line or progress.committed_ahead:
        err.print(f"resuming after line {progress.line} ({progress.written} {opts.kind} already written)")
    fresh = not progress_path(opts.path).exists()
    try:
        # The run's id is on disk before any batch can commit under a key derived from it.
        _save_progress(opts, progress)
    except OSError as exc:
        err.print(f"haki import: {exc}", highlight=False, markup=False)
        return Exit.USAGE

    writer: _LocalWriter | _RemoteWriter
    opened = False
    try:
        if opts.remote is not None:
            writer = await _RemoteWriter.open(opts.remote, opts)
        else:
            writer = await _LocalWriter.open(settings, opts.project_id)
        opened = True
    except (ImportAborted, EmbeddingModelMismatch) as exc:
        said = exc.message if isinstance(exc, EmbeddingModelMismatch) else str(exc)
        err.print(f"haki import: nothing written: {said}", highlight=False, markup=False)
        return Exit.USAGE
    finally:
        # Whatever stopped the start (a refusal, the database or the embedder, Ctrl-C), nothing
        # began: the file may go to another scope without --restart.
        if not opened and fresh:
            progress_path(opts.path).unlink(missing_ok=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def request_stop() -> None:
        if not stop.is_set():
            err.print("stopping after the batches in flight (Ctrl-C again to abort at once)...")
            stop.set()
            # A second Ctrl-C falls back to the default: KeyboardInterrupt, batches rolled back.
            loop.remove_signal_handler(signal.SIGINT)

    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, request_stop)
            handled.append(sig)
    ahead: asyncio.Future[Any] | None = None
    with _progress_bar(err, opts.show_progress and err.is_terminal) as bar:
        task = bar.add_task(f"importing {opts.kind}", total=total_lines, completed=progress.line)
        stores = _Stores(opts, progress, on_commit=lambda: bar.update(task, completed=progress.line))
        try:
            batches = _batches(opts, progress.offset, progress.line, progress.committed_ahead)
            batch = next(batches, None)
            ahead = writer.start(opts, batch) if batch is not None else None
            while batch is not None:
                current, current_ahead = batch, ahead
                if current_ahead is not None:
                    # One batch ahead, no more: the next one's embedding starts once this one's
                    # is done, so batches keep their order (their fact ids are time-ordered).
                    await asyncio.wait([current_ahead])
                batch = next(batches, None)
                ahead = writer.start(opts, batch) if batch is not None and not stop.is_set() else None
                await stores.add(
                    current, functools.partial(writer.write, opts, progress.run_id, current, current_ahead)
                )
                if stop.is_set():
                    break
            await stores.drain()
            if batch is None:
                progress.done = True
                _save_progress(opts, progress)
        except Exception as exc:
            await stores.drain(quietly=True)  # what else commits is kept, then the position
            if isinstance(exc, RemoteModelMismatch) and fresh and progress.written == 0:
                # Refused as the local writer refuses before any line (exit 2): nothing began.
                err.print(f"haki import: nothing written: {exc}", highlight=False, markup=False)
                progress_path(opts.path).unlink(missing_ok=True)
                return Exit.USAGE
            advice = (
                str(exc) if isinstance(exc, ImportAborted) else f"{exc!r}; run the same command to resume"
            )
            err.print(
                f"haki import: stopped after line {progress.line} ({advice})", highlight=False, markup=False
            )
            _summary(out, opts, progress, total_lines)
            return Exit.REJECTED
        finally:
            if ahead is not None and not ahead.done():
                ahead.cancel()  # the batch read ahead is written by the next run, which resumes before it
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ahead
            elif ahead is not None and not ahead.cancelled():
                ahead.exception()  # retrieved, so asyncio does not log it as never retrieved
            for sig in handled:
                loop.remove_signal_handler(sig)
            await writer.aclose()

    _summary(out, opts, progress, total_lines)
    if not progress.done:
        err.print(
            f"interrupted after line {progress.line}: run the same command to resume "
            f"(position kept in {progress_path(opts.path)})",
            highlight=False,
        )
        return Exit.INTERRUPTED
    return Exit.REJECTED if progress.rejected_count else Exit.OK


def main_sync(settings: Settings, opts: ImportOptions) -> int:
    try:
        return asyncio.run(run_import(settings, opts))
    except KeyboardInterrupt:
        print(
            "haki import: aborted; a batch in flight was rolled back, the same command resumes",
            file=sys.stderr,
        )
        return Exit.INTERRUPTED
