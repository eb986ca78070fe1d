"""Forward-only migration runner.

Each `migrations/NNNN_name.sql` file is applied in its own transaction, under a session-level
advisory lock, and recorded with its sha256. A file that was applied and has since changed
is refused: the schema it describes is no longer the schema in the database.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import asyncpg

from service.sql import load_queries, resource_dir

# The schema as the migrations leave it, for reading (scripts/schema_dump.py); never applied.
SCHEMA_SNAPSHOT = "schema.sql"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class MigrationError(RuntimeError):
    """The migrations folder and the database disagree; the service must not start."""


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
    files = sorted(p for p in directory.iterdir() if p.suffix == ".sql" and p.name != SCHEMA_SNAPSHOT)
    bad = [p.name for p in files if not _NAME.match(p.name)]
    if bad:
        raise MigrationError(f"migration files must be named NNNN_name.sql: {bad}")
    numbers = [p.name[:4] for p in files]
    if len(set(numbers)) != len(numbers):
        raise MigrationError(f"two migration files share a number: {numbers}")
    return [Migration(p) for p in files]


def _to_apply(migrations: list[Migration], applied: dict[str, str]) -> list[Migration]:
    """The migrations not applied yet; MigrationError where the database and the files disagree."""
    unknown = sorted(set(applied) - {m.version for m in migrations})
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


async def pending_migrations(conn: asyncpg.Connection, directory: Path | None = None) -> list[str]:
    """The versions `migrate` would apply, read without applying anything (`haki doctor`)."""
    q = load_queries()
    try:
        applied = {r["version"]: r["sha256"] async for r in q.applied_migrations(conn)}
    except asyncpg.UndefinedTableError:  # a database Haki never migrated
        applied = {}
    return [m.version for m in _to_apply(discover(directory), applied)]


async def migrate(conn: asyncpg.Connection, directory: Path | None = None) -> list[str]:
    """Applies the pending migrations; returns the versions applied by this call."""
    q = load_queries()
    migrations = discover(directory)
    await q.lock_migrations(conn)
    try:
        await q.create_schema_migrations(conn)
        applied = {r["version"]: r["sha256"] async for r in q.applied_migrations(conn)}
        done: list[str] = []
        for m in _to_apply(migrations, applied):
            async with conn.transaction():
                await conn.execute(m.sql)
                await q.record_migration(conn, version=m.version, sha256=m.sha256)
            done.append(m.version)
        return done
    finally:
        await q.unlock_migrations(conn)
