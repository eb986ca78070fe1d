"""The forward-only migration runner, each test on its own throw-away embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import msgspec
import pytest
from asyncpg.transaction import Transaction

from service import cli
from service.api import auth
from service.db import connect, init_connection
from service.db.embedded import embedded_url
from service.db.migrations import (
    RULES,
    RULES_VERSION,
    MigrationError,
    MigrationsPending,
    discover,
    migrate,
    pending_migrations,
    require_migrated,
    rules_file,
)
from service.db.sql import load_queries, resource_dir
from service.embedding.embedder import Embedder
from service.repository import conflicts as conflicts_repo
from service.repository import facts as facts_repo
from service.repository import health as health_repo
from service.settings import Settings
from tests.helpers import PROJECT, context_and_trace
from tests.helpers.app import make_client
from tests.helpers.server import scratch_data_dir
from tests.helpers.sql import load_test_queries

# Each test migrates fresh databases of its own (2 s apiece on 2 cores): out of the fast lane.
pytestmark = pytest.mark.slow


FIRST_FOUR = ["0001_extensions", "0002_memory", "0003_context_log", "0004_search_vector"]


@pytest.fixture
def fresh_dir() -> Iterator[Path]:
    """A data dir for a new embedded server (short path: PostgreSQL's socket path is limited)."""
    with scratch_data_dir("haki-mig-") as path:
        yield path


@pytest.fixture
def fresh_settings(fresh_dir: Path) -> Settings:
    return Settings(data_dir=fresh_dir, embed_provider="hash", database_url=embedded_url(fresh_dir))


@pytest.fixture
async def fresh_conn(fresh_settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    c = await connect(fresh_settings)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def migrations_copy(tmp_path: Path) -> Path:
    target = tmp_path / "migrations"
    shutil.copytree(resource_dir("migrations"), target)
    return target


async def applied(conn: asyncpg.Connection) -> dict[str, str]:
    return {r["version"]: r["sha256"] async for r in load_queries().applied_migrations(conn)}


def everything(directory: Path | None = None) -> list[str]:
    """What `migrate` applies to a fresh database: the numbered files, then rules.sql."""
    return [m.version for m in discover(directory)] + [RULES_VERSION]


async def test_fresh_database_gets_every_migration_once(fresh_conn: asyncpg.Connection) -> None:
    expected = everything()
    assert expected[:4] == FIRST_FOUR
    assert await pending_migrations(fresh_conn) == expected

    done = await migrate(fresh_conn)
    assert done == expected
    rules = rules_file()
    assert rules is not None
    recorded = {m.version: m.sha256 for m in discover()} | {RULES_VERSION: rules.sha256}
    assert await applied(fresh_conn) == recorded
    assert await pending_migrations(fresh_conn) == []

    assert await migrate(fresh_conn) == []
    assert await migrate(fresh_conn) == []
    assert list(await applied(fresh_conn)) == expected

    # The schema is really there: the named queries of the service run against it.
    await init_connection(fresh_conn)
    assert await facts_repo.list_facts(fresh_conn, "p", None, None, None, 10) == []
    assert await conflicts_repo.list_conflicts(fresh_conn, "p", None, None) == []
    assert await health_repo.ping(fresh_conn)


async def test_changed_applied_file_is_refused(
    fresh_conn: asyncpg.Connection, fresh_settings: Settings, migrations_copy: Path
) -> None:
    assert await migrate(fresh_conn, migrations_copy) == everything(migrations_copy)
    target = migrations_copy / "0002_memory.sql"
    target.write_text(target.read_text() + "\n-- an innocent-looking edit\n")
    with pytest.raises(MigrationError) as err:
        await migrate(fresh_conn, migrations_copy)
    message = str(err.value)
    assert "0002_memory.sql" in message
    assert "changed" in message
    # The refusal released the migration lock: another session can take it at once.
    other = await connect(fresh_settings)
    try:
        held = await asyncio.wait_for(hold_migration_lock(other), timeout=5)
        await held.rollback()
    finally:
        await other.close()


async def test_file_added_later_is_applied(fresh_conn: asyncpg.Connection, migrations_copy: Path) -> None:
    first = await migrate(fresh_conn, migrations_copy)
    assert first[:4] == FIRST_FOUR
    (migrations_copy / "0900_later.sql").write_text(
        "CREATE TABLE later_test (project_id text NOT NULL, n integer, PRIMARY KEY (project_id));\n"
    )
    # The rules have the last word over the functions, after every numbered migration.
    assert await migrate(fresh_conn, migrations_copy) == ["0900_later", RULES_VERSION]
    assert await migrate(fresh_conn, migrations_copy) == []
    assert "0900_later" in await applied(fresh_conn)


async def test_failing_migration_is_rolled_back_and_not_recorded(
    fresh_conn: asyncpg.Connection, migrations_copy: Path
) -> None:
    await migrate(fresh_conn, migrations_copy)
    broken = migrations_copy / "0901_broken.sql"
    broken.write_text("CREATE TABLE half_done (x int);\nTHIS IS NOT SQL;\n")
    # A MigrationError naming the file and the server's reason: `haki migrate` and `haki serve`
    # print it as `haki: ...` and exit 2 (a traceback and exit 1 before).
    with pytest.raises(
        MigrationError, match=r"migration 0901_broken cannot apply: PostgresSyntaxError"
    ) as raised:
        await migrate(fresh_conn, migrations_copy)
    assert isinstance(raised.value.__cause__, asyncpg.PostgresSyntaxError)
    assert "0901_broken" not in await applied(fresh_conn)
    broken.write_text("CREATE TABLE half_done (x int);\n")
    assert await migrate(fresh_conn, migrations_copy) == ["0901_broken", RULES_VERSION]


async def test_database_ahead_of_the_files_is_refused(
    fresh_conn: asyncpg.Connection, migrations_copy: Path
) -> None:
    await migrate(fresh_conn, migrations_copy)
    (migrations_copy / "0004_search_vector.sql").unlink()
    with pytest.raises(MigrationError, match="0004_search_vector"):
        await migrate(fresh_conn, migrations_copy)


@pytest.mark.parametrize("name", ["5_short.sql", "0005-dash.sql", "0005_Upper.sql"])
def test_badly_named_file_is_refused(migrations_copy: Path, name: str) -> None:
    """`migrate` runs `discover` before it touches the database."""
    (migrations_copy / name).write_text("SELECT 1;\n")
    with pytest.raises(MigrationError, match=r"NNNN_name\.sql"):
        discover(migrations_copy)


def test_duplicate_number_is_refused(migrations_copy: Path) -> None:
    (migrations_copy / "0002_again.sql").write_text("SELECT 1;\n")
    with pytest.raises(MigrationError, match="share a number"):
        discover(migrations_copy)


def test_non_sql_files_are_ignored(migrations_copy: Path) -> None:
    (migrations_copy / "README.md").write_text("notes\n")
    assert [m.version for m in discover(migrations_copy)] == [m.version for m in discover()]


async def test_concurrent_runners_apply_each_file_once(fresh_settings: Settings) -> None:
    expected = everything()
    conns = [await connect(fresh_settings) for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in conns))
        # Each migration is a transaction under the lock: the runners share the work, each file
        # applied by exactly one of them, in order.
        assert sorted(v for done in results for v in done) == expected
        rows = [r async for r in load_queries().applied_migrations(conns[0])]
        assert [r["version"] for r in rows] == expected  # `rules` sorts after the numbers
        # Every runner released the advisory lock.
        for c in conns:
            assert await asyncio.wait_for(migrate(c), timeout=10) == []
    finally:
        for c in conns:
            await c.close()


async def test_a_command_waits_for_a_migration_in_progress(settings: Settings, migrated: str) -> None:
    """`haki keys create` beside a `haki serve` migrating a fresh database (the README's first
    steps): the ledger is half written until the runner releases its lock, so a command reads it
    under the lock and finds nothing pending, not a half-migrated database it must refuse."""
    holder, waiter = await connect(settings), await connect(settings)
    try:
        held = await hold_migration_lock(holder)
        command = asyncio.create_task(require_migrated(waiter))
        done, _ = await asyncio.wait({command}, timeout=0.5)
        assert not done, "read the ledger while a runner held the lock"
        await held.commit()
        assert await asyncio.wait_for(command, timeout=30) == []
        assert await asyncio.wait_for(migrate(waiter), timeout=10) == []  # the lock was released
    finally:
        await holder.close()
        await waiter.close()


def haki_env(monkeypatch: pytest.MonkeyPatch, settings: Settings, **env: str) -> None:
    """The environment of a `haki` command run in-process (cli.main) against the test server."""
    for name in [k for k in os.environ if k.startswith("HAKI_")]:
        monkeypatch.delenv(name)
    assert settings.database_url is not None
    env = {
        "DATABASE_URL": settings.database_url,
        "DATA_DIR": str(settings.data_dir),
        "EMBED_PROVIDER": "hash",
        **env,
    }
    for name, value in env.items():
        monkeypatch.setenv(f"HAKI_{name}", value)


async def hold_migration_lock(conn: asyncpg.Connection) -> Transaction:
    """conn holds the migration lock, as a runner does, until the returned transaction ends."""
    held = conn.transaction()
    await held.start()
    await load_queries().lock_migrations(conn)
    return held


async def lock_waiters(conn: asyncpg.Connection, count: int) -> list[int]:
    """The pids of the `count` sessions of conn's database waiting on a lock, once they all wait."""
    deadline = asyncio.get_running_loop().time() + 30
    q = load_test_queries()
    # A holder in a transaction (a runner's lock is the transaction's) sees a fresh view each time.
    while (
        await q.test_clear_stats_snapshot(conn)
        and len(pids := [r["pid"] async for r in q.test_lock_waiters(conn)]) < count
    ):
        assert asyncio.get_running_loop().time() < deadline, f"{len(pids)} of {count} waiting for the lock"
        await asyncio.sleep(0.05)
    return pids


async def test_a_runner_waits_for_the_lock_past_the_statement_timeout(
    settings: Settings, migrated: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another runner's migrations outlast HAKI_STATEMENT_TIMEOUT_MS (a request's bound): `haki
    migrate` and a command beside it wait for its lock as long as it is held, then go on."""
    haki_env(monkeypatch, settings, STATEMENT_TIMEOUT_MS="200")
    short = msgspec.structs.replace(settings, statement_timeout_ms=200)
    holder, waiter = await connect(settings), await connect(short)
    try:
        held = await hold_migration_lock(holder)
        commands = [
            asyncio.create_task(asyncio.to_thread(cli.main, argv)) for argv in (["migrate"], ["keys", "list"])
        ]
        command = asyncio.create_task(require_migrated(waiter))
        await lock_waiters(holder, 3)
        await asyncio.sleep(0.5)  # past the statement timeout, still waiting
        assert not any(t.done() for t in [*commands, command])
        await held.commit()
        assert await asyncio.wait_for(asyncio.gather(*commands), timeout=60) == [0, 0]
        assert await asyncio.wait_for(command, timeout=30) == []
        assert "applied 0 migration(s): none pending" in capsys.readouterr().err
        # The session goes on with its own timeouts (a command's work after the migrations).
        timeouts = await load_test_queries().test_migration_session_timeouts(waiter)
        assert (timeouts["statement_timeout"], timeouts["lock_timeout"]) == ("200ms", "0")
    finally:
        await holder.close()
        await waiter.close()


@pytest.fixture
async def scratch_database(settings: Settings, migrated: str) -> AsyncIterator[Settings]:
    """A new database in the session's server (no migration applied), dropped after the test."""
    name = f"haki_scratch_{uuid.uuid4().hex[:8]}"
    admin = await connect(settings)
    try:
        await admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        yield msgspec.structs.replace(settings, database_url=embedded_url(settings.data_dir, name))
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


async def test_a_migration_outlasting_the_statement_timeout_applies(
    scratch_database: Settings, migrations_copy: Path
) -> None:
    """A migration statement longer than HAKI_STATEMENT_TIMEOUT_MS (an index build over a large
    table) applies: the bound is a request's, not an upgrade's."""
    (migrations_copy / "0900_slow.sql").write_text("SELECT pg_sleep(0.5);\n")
    conn = await connect(msgspec.structs.replace(scratch_database, statement_timeout_ms=200))
    try:
        assert await migrate(conn, migrations_copy) == everything(migrations_copy)
    finally:
        await conn.close()


async def test_a_command_beside_a_runner_waits_for_each_of_its_migrations(
    scratch_database: Settings, migrations_copy: Path
) -> None:
    """Each migration is a transaction of its own under the lock, so a command can look at the
    ledger between two of a runner's migrations: one that grew since its last look is being
    migrated, waited for, not refused as a database of an earlier release."""
    runner, command = await connect(scratch_database), await connect(scratch_database)
    try:
        assert await migrate(runner, migrations_copy) == everything(migrations_copy)
        (migrations_copy / "0900_slow.sql").write_text("SELECT pg_sleep(1.5);\n")
        (migrations_copy / "0901_later.sql").write_text("CREATE TABLE later_test (id text PRIMARY KEY);\n")
        applying = asyncio.create_task(migrate(runner, migrations_copy))
        await asyncio.sleep(0.3)  # 0900 is being applied
        assert await asyncio.wait_for(require_migrated(command, migrations_copy), timeout=30) == []
        assert await applying == ["0900_slow", "0901_later", RULES_VERSION]
        # A database of an earlier release, with nobody migrating it, is refused.
        (migrations_copy / "0902_next.sql").write_text("SELECT 1;\n")
        with pytest.raises(MigrationsPending):
            await require_migrated(command, migrations_copy)
    finally:
        await runner.close()
        await command.close()


async def test_a_runner_ended_while_it_waits_for_the_lock_says_why(
    settings: Settings, migrated: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failure in the wait for the lock (here its session ended, as a server restart would) is
    `haki: <reason>`, exit 2, as docs/spec/api.md says of a migration that cannot apply."""
    haki_env(monkeypatch, settings)
    holder = await connect(settings)
    try:
        await hold_migration_lock(holder)
        command = asyncio.create_task(asyncio.to_thread(cli.main, ["migrate"]))
        (pid,) = await lock_waiters(holder, 1)
        await load_test_queries().test_terminate_backend(holder, pid=pid)
        assert await asyncio.wait_for(command, timeout=30) == 2
        err = capsys.readouterr().err
        assert err.startswith("haki: the migration lock cannot be taken: "), err
        assert "Traceback" not in err
    finally:
        await holder.close()


def keep_only_before(directory: Path, version: str) -> None:
    """The numbered files before `version` (and no rules.sql: today's rules need the later ones)."""
    for later in sorted(directory.glob("*.sql")):
        if later.name >= version:
            later.unlink()
    assert not (directory / RULES).exists()


# --- migrations/rules.sql -----------------------------------------------------------------------


async def rule_functions(conn: asyncpg.Connection) -> list[tuple[str, ...]]:
    """Every haki_ function as the catalog holds it: signature, body, volatility, parallel
    safety, settings, comment."""
    rows = await conn.fetch(
        "SELECT p.oid::regprocedure::text, p.prosrc, p.provolatile::text, p.proparallel::text, "
        "coalesce(p.proconfig::text, ''), coalesce(pg_catalog.obj_description(p.oid, 'pg_proc'), '') "
        "FROM pg_catalog.pg_proc AS p "
        "WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'haki\\_%' ORDER BY 1"
    )
    return [tuple(r) for r in rows]


async def test_rules_are_applied_again_only_when_they_change(
    fresh_conn: asyncpg.Connection, migrations_copy: Path
) -> None:
    """Recorded with their sha256 (version `rules`); `haki doctor` sees a change as pending; a
    change that fails leaves the rules and the record as they were, and is tried again."""
    await migrate(fresh_conn, migrations_copy)
    assert await migrate(fresh_conn, migrations_copy) == []
    rules = migrations_copy / RULES
    original = rules.read_text()
    rules.write_text(original + "\nCOMMENT ON FUNCTION public.haki_tokens(text) IS 'changed';\n")
    assert await pending_migrations(fresh_conn, migrations_copy) == [RULES_VERSION]
    assert await migrate(fresh_conn, migrations_copy) == [RULES_VERSION]
    changed = rules_file(migrations_copy)
    assert changed is not None and (await applied(fresh_conn))[RULES_VERSION] == changed.sha256
    assert (
        await fresh_conn.fetchval("SELECT obj_description('public.haki_tokens(text)'::regprocedure)")
        == "changed"
    )
    assert await migrate(fresh_conn, migrations_copy) == []

    before = await rule_functions(fresh_conn)
    rules.write_text(
        original.replace("SELECT greatest(1, pg_catalog.char_length(content) / 4)", "SELECT 7")
        + "\nNOT SQL;\n"
    )
    with pytest.raises(MigrationError, match="migration rules cannot apply: PostgresSyntaxError"):
        await migrate(fresh_conn, migrations_copy)
    assert await rule_functions(fresh_conn) == before  # one transaction: nothing of it stayed
    assert (await applied(fresh_conn))[RULES_VERSION] == changed.sha256
    rules.write_text(original)
    assert await migrate(fresh_conn, migrations_copy) == [RULES_VERSION]
    assert await fresh_conn.fetchval("SELECT public.haki_tokens('abcdefgh')") == 2


async def test_a_numbered_migration_never_has_the_last_word_over_a_rule(
    fresh_conn: asyncpg.Connection, migrations_copy: Path
) -> None:
    """A numbered migration that replaces a rule function is followed by rules.sql again, even
    when rules.sql has not changed, and even when that second step failed once."""
    await migrate(fresh_conn, migrations_copy)
    (migrations_copy / "0900_tokens.sql").write_text(
        "CREATE OR REPLACE FUNCTION public.haki_tokens(content text) RETURNS integer\n"
        "LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 7 $$;\n"
    )
    rules = migrations_copy / RULES
    original = rules.read_text()
    rules.write_text(original + "\nNOT SQL;\n")
    with pytest.raises(MigrationError, match="migration rules cannot apply"):
        await migrate(fresh_conn, migrations_copy)
    assert RULES_VERSION not in await applied(fresh_conn)  # the numbered migration forgot it
    rules.write_text(original)
    assert await pending_migrations(fresh_conn, migrations_copy) == [RULES_VERSION]
    assert await migrate(fresh_conn, migrations_copy) == [RULES_VERSION]
    assert await fresh_conn.fetchval("SELECT public.haki_tokens('abcdefgh')") == 2


async def test_an_existing_database_ends_with_the_functions_of_a_fresh_one(
    fresh_conn: asyncpg.Connection, fresh_dir: Path, migrations_copy: Path
) -> None:
    """A database migrated before rules.sql existed (migrations 0001-0024) takes 0025 and the
    rules, and ends with exactly the functions a fresh database gets."""
    keep_only_before(migrations_copy, "0025")
    await migrate(fresh_conn, migrations_copy)
    assert await migrate(fresh_conn) == [m.version for m in discover() if m.version >= "0025"] + [
        RULES_VERSION
    ]
    await fresh_conn.execute("CREATE DATABASE haki_fresh TEMPLATE template0")
    other = await asyncpg.connect(embedded_url(fresh_dir, "haki_fresh"))
    try:
        await migrate(other)
        assert await rule_functions(fresh_conn) == await rule_functions(other)
    finally:
        await other.close()


async def test_time_travel_backfills_recorded_to(
    fresh_conn: asyncpg.Connection, migrations_copy: Path
) -> None:
    """Migration 0012 on facts that stopped being believed before it (docs/time-travel.md): a
    superseded fact ends where its successor was recorded, a loser of a conflict where the set
    was resolved (both exact), a retraction at the migration's instant; active facts stay null."""
    keep_only_before(migrations_copy, "0012")
    await migrate(fresh_conn, migrations_copy)
    t = load_test_queries()
    await t.test_seed_pre_time_travel_history(fresh_conn, project_id="p")
    before = datetime.now(UTC) - timedelta(seconds=5)  # the database's clock is this machine's
    await migrate(fresh_conn)
    await init_connection(fresh_conn)
    facts = {f.content: f for f in await facts_repo.list_facts(fresh_conn, "p", None, None, None, 10)}
    day = datetime(2026, 1, 1, tzinfo=UTC)
    assert facts["lives in paris"].recorded_to == day + timedelta(days=1)  # Berlin's recorded_from
    assert facts["works at acme"].recorded_to == day + timedelta(days=2)  # the set's resolved_at
    tea = facts["likes tea"].recorded_to
    assert tea is not None and tea >= before  # unknown: the migration's instant
    for active in ("lives in berlin", "works at globex", "has a cat"):
        assert facts[active].recorded_to is None
    # A status change that forgets recorded_to is refused from now on.
    with pytest.raises(asyncpg.CheckViolationError):
        await t.test_set_fact_status(
            fresh_conn, project_id="p", fact_id=facts["has a cat"].fact_id, status="retracted"
        )


async def test_sets_left_open_with_one_claim_are_resolved(
    fresh_conn: asyncpg.Connection, migrations_copy: Path, hash_embedder: Embedder
) -> None:
    """Migration 0046 on sets an earlier release left open after a member was retracted: the set
    left with one claim resolves (now), its claim is served again; a set of two claims stays open."""
    keep_only_before(migrations_copy, "0046")
    await migrate(fresh_conn, migrations_copy)
    await load_test_queries().test_seed_sets_left_open(fresh_conn, project_id=PROJECT)
    before = datetime.now(UTC) - timedelta(seconds=5)  # the database's clock is this machine's
    assert await migrate(fresh_conn) == [m.version for m in discover() if m.version >= "0046"] + [
        RULES_VERSION
    ]
    await init_connection(fresh_conn)
    sets = {c.key: c for c in await conflicts_repo.list_conflicts(fresh_conn, PROJECT, "u1", None)}
    assert sets["sport"].status == "resolved"
    resolved_at = sets["sport"].resolved_at
    assert resolved_at is not None and resolved_at >= before
    assert sets["food"].status == "open" and sets["food"].resolved_at is None

    _, key = await auth.create_key(fresh_conn, PROJECT)
    settings = Settings(embed_provider="hash", database_url="postgresql://unused")
    async with make_client(settings, fresh_conn, hash_embedder) as client:
        packet, trace = await context_and_trace(client, key, "which sport does the user play?")
    served = {f["content"] for f in packet["facts"]}
    assert "plays tennis" in served
    assert not served & {"plays golf", "eats fish", "eats no fish"}
    blocked = {d["item_id"]: d["reason_code"] for d in trace["decisions"] if d["decision"] == "blocked"}
    assert blocked == {
        "00000000-0000-7000-8000-0000000000b1": "conflict_open",
        "00000000-0000-7000-8000-0000000000b2": "conflict_open",
    }


async def test_the_vector_probe_beside_a_first_migration_lets_the_server_start(
    scratch_database: Settings,
) -> None:
    """`haki serve` started while another's migration 0001 creates pgvector on a new database: its
    vector probe's CREATE EXTENSION waits on that one, which commits; it starts, not refusing with
    a wrong diagnosis ("pgvector cannot run here: UniqueViolationError")."""
    first, watcher = await connect(scratch_database), await connect(scratch_database)
    try:
        tx = await hold_migration_lock(first)
        await first.execute(discover()[0].sql)  # 0001_extensions, uncommitted
        start_up = asyncio.create_task(cli._start_up(scratch_database))
        # Watched from outside the transaction, whose view of pg_stat_activity stays as it began.
        await lock_waiters(watcher, 1)  # the probe waits on the extension's row
        await tx.commit()
        assert await asyncio.wait_for(start_up, timeout=120) is None
    finally:
        await first.close()
        await watcher.close()
