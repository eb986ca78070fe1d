"""Haki behind pgBouncer in transaction mode (docs/scaling.md, "pgBouncer in transaction mode").

A real pgBouncer (Debian's, 1.18: no `max_prepared_statements`) in front of a throw-away embedded
PostgreSQL; the app's real request path (pool, repository, assembler) through it, with
concurrent requests so that consecutive transactions of one client land on different server
connections. With HAKI_DB_STATEMENT_CACHE_SIZE=0 every request succeeds; with asyncpg's default
cache, requests fail with "prepared statement ... does not exist", which is why the setting
exists.

Skips when pgBouncer is not installed (Debian: `apt-get install -y pgbouncer`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from service.db import migrations
from service.db.embedded import embedded_server, embedded_url
from service.embedding.embedder import HashEmbedder
from service.settings import Settings
from tests.helpers import bearer, needs_program, post_context, post_facts
from tests.helpers.app import migrated_key, pooled_client
from tests.helpers.server import free_port, stop_process
from tests.helpers.sql import load_test_queries

PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
)
pytestmark = needs_program(PGBOUNCER, "pgBouncer", "`apt-get install -y pgbouncer`")
PROJECT = "pgb"


@pytest.fixture(scope="module")
def bouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    assert PGBOUNCER is not None
    base = Path(tmp_path_factory.mktemp("pgbouncer"))
    direct = embedded_url(base / "db")
    socket_dir = urllib.parse.parse_qs(urllib.parse.urlsplit(direct).query)["host"][0]
    port = free_port()
    conf = base / "conf"
    conf.mkdir()
    (conf / "users.txt").write_text('"postgres" ""\n')
    (conf / "pgbouncer.ini").write_text(
        f"[databases]\npostgres = host={socket_dir} dbname=postgres user=postgres\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {conf}/users.txt\npool_mode = transaction\n"
        "default_pool_size = 4\n"
        # Startup parameters pgBouncer does not forward (set them on the role in production).
        "ignore_startup_parameters = statement_timeout,idle_in_transaction_session_timeout\n"
        f"logfile = {conf}/pgbouncer.log\n"
    )
    cmd = [PGBOUNCER, str(conf / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # pgBouncer refuses to run as root; the embedded server's own user can reach its socket.
        os.chmod(base, 0o755)
        os.chmod(conf, 0o777)
        cmd[1:1] = ["-u", "pgserver"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"pgBouncer did not start: {err}")
            time.sleep(0.1)
        yield {"direct": direct, "bounced": f"postgresql://postgres@127.0.0.1:{port}/postgres"}
    finally:
        stop_process(proc, signal.SIGINT, timeout=10)
        embedded_server(base / "db").cleanup()


async def hammer(database_url: str, cache_size: int, key: str) -> dict[int, int]:
    """Concurrent writes, context calls and reads through the app; status code -> count."""
    settings = Settings(
        database_url=database_url, embed_provider="hash", db_statement_cache_size=cache_size, pool_max_size=8
    )
    statuses: dict[int, int] = {}
    async with pooled_client(settings, HashEmbedder()) as (client, _):

        async def one(i: int) -> None:
            subject = f"s{i % 4}"
            calls: list[Any] = [
                post_facts(client, key, [f"Zed fact {i}"], subject, PROJECT),
                post_context(client, key, "What about Zed?", subject, PROJECT),
                client.get(
                    "/v1/facts", params={"project_id": PROJECT, "subject_id": subject}, headers=bearer(key)
                ),
            ]
            for call in calls:
                r = await call
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

        for _ in range(4):
            await asyncio.gather(*(one(i) for i in range(16)))
    return statuses


async def test_transaction_pooling_needs_the_statement_cache_off(bouncer: dict[str, str]) -> None:
    key = await migrated_key(Settings(database_url=bouncer["bounced"], db_statement_cache_size=0), PROJECT)

    ok = await hammer(bouncer["bounced"], 0, key)
    assert set(ok) <= {200, 201}, ok
    assert sum(ok.values()) == 4 * 16 * 3

    cached = await hammer(bouncer["bounced"], 100, key)
    assert cached.get(500, 0) > 0, f"expected prepared-statement failures with the cache on: {cached}"


async def test_the_migration_lock_is_never_left_held_through_the_bouncer(
    bouncer: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock taken and released by two statements of a session can be released on another server
    connection through transaction pooling, and stay held there: every later runner then waits
    for ever. The migration lock is a transaction's. Here another client takes the runner's server
    connection between two of its statements, as traffic does (pgBouncer reuses the last one)."""
    runner, traffic, direct = (
        await asyncpg.connect(bouncer["bounced"], statement_cache_size=0),
        await asyncpg.connect(bouncer["bounced"], statement_cache_size=0),
        await asyncpg.connect(bouncer["direct"]),
    )
    ledger = migrations._applied
    busy = traffic.transaction()
    taken: list[bool] = []

    async def read_beside_traffic(conn: asyncpg.Connection) -> dict[str, str]:
        if conn is runner and not taken:
            taken.append(True)
            await busy.start()
            await traffic.fetchval("SELECT 1")
        return await ledger(conn)

    monkeypatch.setattr(migrations, "_applied", read_beside_traffic)
    try:
        await migrations.migrate(direct)
        assert await migrations.require_migrated(runner) == []
        await busy.commit()
        assert await load_test_queries().test_migration_lock_holders(direct) == 0
        assert await asyncio.wait_for(migrations.migrate(runner), timeout=30) == []
    finally:
        for conn in (runner, traffic, direct):
            await conn.close()
