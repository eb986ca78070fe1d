"""`haki` command line: serve, migrate, keys (spec/API.md, "Command line")."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar
from uuid import UUID

import asyncpg

from service import auth
from service import repository as repo
from service.db import connect
from service.migrations import MigrationError, migrate
from service.settings import Settings, SettingsError

T = TypeVar("T")


async def _with_migrated_conn(settings: Settings, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
    conn = await connect(settings)
    try:
        await migrate(conn)
        return await work(conn)
    finally:
        await conn.close()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app

    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal with the handler it
    # found at start-up. Python's default handler would end the process without running atexit,
    # so the embedded PostgreSQL handle would never be released and the server would outlive the
    # last `haki` process. A normal exit runs that cleanup.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    asyncio.run(_migrate_only(settings))
    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
    )
    return 0


async def _migrate_only(settings: Settings) -> list[str]:
    conn = await connect(settings)
    try:
        return await migrate(conn)
    finally:
        await conn.close()


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    applied = asyncio.run(_migrate_only(settings))
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}", file=sys.stderr)
    return 0


def _keys_create(settings: Settings, args: argparse.Namespace) -> int:
    project_id: str = args.project_id
    if not (1 <= len(project_id) <= 200) or "\x00" in project_id:
        print("PROJECT_ID must be 1..200 characters", file=sys.stderr)
        return 2
    key_id, key = asyncio.run(
        _with_migrated_conn(settings, lambda conn: auth.create_key(conn, project_id, args.label))
    )
    print(f"key id {key_id} for project {project_id!r}", file=sys.stderr)
    print(key)
    return 0


def _keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    target: str = args.key

    async def work(conn: asyncpg.Connection) -> bool:
        if target.startswith(auth.KEY_PREFIX):
            return await auth.revoke_key(conn, target)
        if not args.project:
            raise SettingsError("revoking by key id needs --project PROJECT_ID")
        return await auth.revoke_key_id(conn, args.project, UUID(target))

    revoked = asyncio.run(_with_migrated_conn(settings, work))
    print("revoked" if revoked else "no such live key", file=sys.stderr)
    return 0 if revoked else 1


def _keys_list(settings: Settings, args: argparse.Namespace) -> int:
    rows = asyncio.run(_with_migrated_conn(settings, lambda conn: repo.list_api_keys(conn, args.project_id)))
    for r in rows:
        state = f"revoked {r['revoked_at'].isoformat()}" if r["revoked_at"] else "live"
        print(f"{r['key_id']}\t{r['created_at'].isoformat()}\t{state}\t{r['label'] or ''}")
    return 0


def _import(settings: Settings, args: argparse.Namespace) -> int:
    # Imported here: rich and the embedder stack are not needed by the other commands.
    from service import importer

    options = importer.ImportOptions(
        path=Path(args.file),
        project_id=args.project,
        subject_id=args.subject,
        kind=args.kind,
        restart=args.restart,
        batch_size=args.batch_size,
    )
    return importer.main_sync(settings, options)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="haki", description="Haki memory service for AI agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="apply pending migrations, then serve the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--log-level", default="info")
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.set_defaults(func=_serve)

    mig = sub.add_parser("migrate", help="apply pending migrations and exit")
    mig.set_defaults(func=_migrate)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser(
        "create", help="print a new API key for PROJECT_ID (only its hash is stored)"
    )
    create.add_argument("project_id", metavar="PROJECT_ID")
    create.add_argument("--label", default=None, help="a note to tell keys apart")
    create.set_defaults(func=_keys_create)
    revoke = keys_sub.add_parser("revoke", help="revoke a key at once (the key itself, or a key id)")
    revoke.add_argument("key", metavar="KEY_OR_KEY_ID")
    revoke.add_argument("--project", default=None, help="the project, when revoking by key id")
    revoke.set_defaults(func=_keys_revoke)
    lst = keys_sub.add_parser("list", help="list the keys of a project (ids, never the keys)")
    lst.add_argument("project_id", metavar="PROJECT_ID")
    lst.set_defaults(func=_keys_list)

    imp = sub.add_parser(
        "import",
        help="bulk-load a JSONL file of facts (or events) into one scope, resumably",
        description="Each line is one fact (or event) object as in POST /v1/facts (/v1/events). "
        "Bad lines are reported by line number and never stop the import; the position of the "
        "last committed batch is kept in FILE.haki-progress, so the same command resumes.",
        epilog="Exit status: 0 every line written; 1 finished with rejected lines, or stopped by an "
        "error (the position is kept); 2 usage error; 130 interrupted (the position is kept).",
    )
    imp.add_argument("file", metavar="FILE.jsonl")
    imp.add_argument("--project", required=True, help="project id")
    imp.add_argument("--subject", required=True, help="subject id")
    imp.add_argument("--kind", choices=["facts", "events"], default="facts")
    imp.add_argument("--restart", action="store_true", help="ignore a saved position and start over")
    imp.add_argument("--batch-size", type=int, default=1000, help="lines per atomic batch (1..1000)")
    imp.set_defaults(func=_import)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        settings = Settings.from_env()
        code: int = args.func(settings, args)
    except (SettingsError, MigrationError) as exc:
        print(f"haki: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
