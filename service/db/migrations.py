"""Forward-only migration runner, then the rule functions.

Each `migrations/NNNN_name.sql` file is applied in its own transaction, under a transaction-level
advisory lock waited for as long as another runner holds it (through a transaction-pooling
pgBouncer too, where a session lock can stay held on another server connection), with no
statement or lock timeout (HAKI_STATEMENT_TIMEOUT_MS is a request's bound, not an index build's),
and recorded with its sha256. A file that was applied and has since changed is refused: the
schema it describes is no longer the schema in the database.

`migrations/rules.sql` holds the spec's rule functions, hand-written and repeatable (CREATE OR
REPLACE). It is applied after the numbered files, in one transaction under the same lock, and
recorded as version `rules` with its sha256: again only when the file changed, or when a
numbered migration ran since (each one forgets the record, so the rules always have the last
word over the functions). Applying it on every start would be cheap here, but each replaced
function invalidates the cached plans that inlined it in every session of every running
instance.

Only `haki serve` and `haki migrate` apply migrations to a database that holds some already
(`migrate`); the other commands take `require_migrated`: a migration may drop or change what the
running servers of the previous release call, so it runs when the operator upgrades, not as a
side effect of `haki keys list` (docs/configuration.md, "Upgrading").
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

from service.db.sql import load_queries, resource_dir

# The schema as the migrations leave it, for reading (scripts/schema_dump.py); never applied.
SCHEMA_SNAPSHOT = "schema.sql"
# The rule functions, re-applied after the numbered migrations (see the module's docstring).
RULES = "rules.sql"
RULES_VERSION = "rules"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# What a statement meets when the server refuses it or the connection drops (a server restarted,
# a backend terminated): in the migration runner a MigrationError (exit 2), in a command exit 1.
DATABASE_FAILURES = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)

# The pause between two looks at a ledger with migrations pending: one that grew meanwhile is
# being migrated by another runner (each migration is a transaction of its own), so it is waited for.
MIGRATION_PROGRESS_SECONDS = 1.0

log = logging.getLogger("haki.migrations")


class MigrationError(RuntimeError):
    """The migrations folder and the database disagree, or the database refused a migration: the
    service must not start."""


class MigrationsPending(MigrationError):
    """A command other than `serve` and `migrate` found migrations to apply to a database that
    holds some already: the operator runs `haki migrate` (require_migrated)."""


class Migration:
    __slots__ = ("path", "sha256", "sql", "version")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.version = path.stem
        raw = path.read_bytes()
        self.sha256 = hashlib.sha256(raw).hexdigest()
        self.sql = raw.decode("utf-8")


def discover(directory: Path | None = None) -> list[Migration]:
    directory = directory or resource_dir("migrations")
    files = sorted(
        p for p in directory.iterdir() if p.suffix == ".sql" and p.name not in (SCHEMA_SNAPSHOT, RULES)
    )
    bad = [p.name for p in files if not _NAME.match(p.name)]
    if bad:
        raise MigrationError(f"migration files must be named NNNN_name.sql: {bad}")
    numbers = [p.name[:4] for p in files]
    if len(set(numbers)) != len(numbers):
        raise MigrationError(f"two migration files share a number: {numbers}")
    return [Migration(p) for p in files]


def rules_file(directory: Path | None = None) -> Migration | None:
    """migrations/rules.sql (version `rules`), or None for a folder without one."""
    path = (directory or resource_dir("migrations")) / RULES
    return Migration(path) if path.is_file() else None


def _to_apply(migrations: list[Migration], applied: dict[str, str]) -> list[Migration]:
    """The migrations not applied yet; MigrationError where the database and the files disagree."""
    unknown = sorted(set(applied) - {m.version for m in migrations} - {RULES_VERSION})
    if unknown:
        raise MigrationError(
            f"the database has migrations this build does not know: {unknown}; "
            "run a newer Haki or restore the missing files"
        )
    for m in migrations:
        recorded = applied.get(m.version)
        if recorded is not None and recorded != m.sha256:
            raise MigrationError(
                f"migration {m.path.name} has changed since it was applied (applied with "
                f"sha256 {recorded}, the file now has sha256 {m.sha256}); migrations are "
                "forward-only: restore the file and put the change in a new numbered migration"
            )
    return [m for m in migrations if m.version not in applied]


def _rules_due(rules: Migration | None, applied: dict[str, str], numbered: list[Migration]) -> bool:
    """Whether rules.sql is to be applied: changed since it was, or numbered migrations pending."""
    return rules is not None and (bool(numbered) or applied.get(RULES_VERSION) != rules.sha256)


async def pending_migrations(conn: asyncpg.Connection, directory: Path | None = None) -> list[str]:
    """The versions `migrate` would apply, read without applying anything (`haki doctor`)."""
    return _pending(await _applied(conn), directory)


async def _applied(conn: asyncpg.Connection) -> dict[str, str]:
    """The versions recorded as applied, with their sha256; none on a database never migrated."""
    try:
        # A savepoint in a runner's transaction: a missing ledger does not abort it.
        async with conn.transaction():
            return {r["version"]: r["sha256"] async for r in load_queries().applied_migrations(conn)}
    except asyncpg.UndefinedTableError:
        return {}


def _pending(applied: dict[str, str], directory: Path | None) -> list[str]:
    numbered = _to_apply(discover(directory), applied)
    due = _rules_due(rules_file(directory), applied, numbered)
    return [m.version for m in numbered] + ([RULES_VERSION] if due else [])


@asynccontextmanager
async def _locked(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """A transaction under the migration lock, without the request timeouts: a migration statement
    may run for minutes (an HNSW build over a large table), and a runner beside another waits for
    the lock as long as the other's migration takes. Lock and settings are the transaction's, so
    a transaction-pooling pgBouncer cannot leave them held on another server connection."""
    q = load_queries()
    async with conn.transaction():
        await q.lift_migration_timeouts(conn)
        if not await q.try_lock_migrations(conn):
            log.info("waiting for another process's migrations (the migration lock)")
            await q.lock_migrations(conn)
        yield


async def _ledger(conn: asyncpg.Connection) -> dict[str, str]:
    """The applied versions, read under the migration lock: a migration being applied is waited
    for, never seen half done."""
    try:
        async with _locked(conn):
            return await _applied(conn)
    except DATABASE_FAILURES as exc:
        raise MigrationError(f"the migration lock cannot be taken: {type(exc).__name__}: {exc}") from exc


async def require_migrated(conn: asyncpg.Connection, directory: Path | None = None) -> list[str]:
    """Every command but `serve` and `migrate`: a database no migration was applied to gets them
    all (nothing of an earlier release can be running on it: `haki keys create` before the first
    `haki serve`); one with migrations pending is refused, MigrationsPending, unless another
    runner is applying them (a `haki serve` migrating a fresh database: its ledger grows between
    two looks). Returns the versions applied."""
    seen: list[str] | None = None
    while True:
        applied = await _ledger(conn)
        if not applied:
            return await migrate(conn, directory)
        pending = _pending(applied, directory)
        if not pending:
            return []
        if pending == seen:
            raise MigrationsPending(
                f"the database needs {len(pending)} migration(s) of this release "
                f"({', '.join(pending)}): stop the servers of the previous release, then run "
                '`haki migrate` (docs/configuration.md, "Upgrading")'
            )
        seen = pending
        await asyncio.sleep(MIGRATION_PROGRESS_SECONDS)


async def migrate(conn: asyncpg.Connection, directory: Path | None = None) -> list[str]:
    """Applies the pending migrations, then rules.sql if due, each in a transaction of its own
    under the migration lock (a runner beside it applies the next one, or waits for it); returns
    the versions applied by this call (`rules` last when the rules were)."""
    q = load_queries()
    migrations = discover(directory)
    rules = rules_file(directory)
    done: list[str] = []
    while True:
        step: str | None = None  # None: the lock is not taken yet
        try:
            async with _locked(conn):
                step = "schema_migrations"
                await q.create_schema_migrations(conn)
                applied = await _applied(conn)
                numbered = _to_apply(migrations, applied)
                started = time.monotonic()
                if numbered:
                    step = numbered[0].version
                    await conn.execute(numbered[0].sql)
                    await q.record_migration(conn, version=step, sha256=numbered[0].sha256)
                    # Forgotten in the migration's transaction: the rules are applied again after it.
                    await q.forget_rules(conn, version=RULES_VERSION)
                elif rules is not None and _rules_due(rules, applied, numbered):
                    step = RULES_VERSION
                    await conn.execute(rules.sql)
                    await q.record_rules(conn, version=RULES_VERSION, sha256=rules.sha256)
                else:
                    return done
        except DATABASE_FAILURES as exc:
            # The server refused a statement (a role without CREATE, an object in the way) or the
            # connection was lost: the CLI prints `haki: <reason>` and exits 2.
            what = "the migration lock cannot be taken" if step is None else f"migration {step} cannot apply"
            raise MigrationError(f"{what}: {type(exc).__name__}: {exc}") from exc
        assert step is not None
        done.append(step)
        # Named as each commits: an operator sees what changed, and which one a long wait is.
        log.info("migration %s applied in %.1f s", step, time.monotonic() - started)
