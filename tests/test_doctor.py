"""`haki doctor` and the start-up vector probe (service/doctor.py): what each check finds, and the
refusal's wording. The probe's failure on a real pgvector built for another CPU is in
tests/test_portability.py."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from service import doctor
from service.db import connect
from service.db.embedded import DataDirVersionError, check_data_dir_version
from service.db.migrations import pending_migrations
from service.db.pools import DatabaseUnreachable, unreachable_reason
from service.redaction import UNPARSABLE_URL, redacted_database_url
from service.repository import embedding_model, health
from service.settings import Settings
from tests.helpers.server import REPO, scratch_data_dir, server_env


def test_missing_cpu_features_are_the_x86_64_v3_ones_a_cpu_lacks() -> None:
    v2 = frozenset(["fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm"])
    assert doctor.missing_cpu_features(v2, "x86_64") == list(doctor.EMBEDDED_X86_FEATURES)
    assert doctor.missing_cpu_features(v2 | set(doctor.EMBEDDED_X86_FEATURES), "x86_64") == []
    assert doctor.missing_cpu_features(v2, "aarch64") == []


def test_cpu_flags_are_read_from_the_flags_line(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx avx2 fma\nbugs\t\t: none\n")
    assert doctor.cpu_flags(cpuinfo) == frozenset({"fpu", "avx", "avx2", "fma"})
    assert doctor.cpu_flags(tmp_path / "absent") is None


def test_the_refusal_names_the_cause_and_the_fix(tmp_path: Path) -> None:
    external = doctor.crash_explanation(Settings(database_url="postgresql://u:secret@db/haki"))
    assert "backend died" in external and "pgvector built for that CPU" in external
    assert "secret" not in external
    log = tmp_path / "pgdata" / "log"
    log.parent.mkdir()
    death = "LOG:  client backend (PID 42) was terminated by signal 4: Illegal instruction"
    log.write_text(f"LOG:  database system is ready\n{death}\nLOG:  all server processes terminated\n")
    embedded = doctor.crash_explanation(Settings(data_dir=tmp_path))
    assert "backend died" in embedded and "HAKI_DATABASE_URL" in embedded and "docs/platforms.md" in embedded
    assert death in embedded


def test_database_urls_lose_their_password() -> None:
    assert (
        redacted_database_url("postgresql://haki:s3cret@db:5432/haki") == "postgresql://haki:***@db:5432/haki"
    )
    assert redacted_database_url("postgresql:///haki?host=/tmp") == "postgresql:///haki?host=/tmp"
    # libpq's (and asyncpg's) query parameters hold passwords too.
    assert redacted_database_url("postgresql://u@db/x?password=s3cret") == "postgresql://u@db/x?password=***"
    assert (
        redacted_database_url("postgresql://u:a@db/x?sslmode=require&sslpassword=s3cret&Password=b")
        == "postgresql://u:***@db/x?sslmode=require&sslpassword=***&Password=***"
    )


@pytest.mark.parametrize(
    "url", ["postgresql://u@[::1/db", "postgresql://u:s3cret@[db/x", "host=db password=s3cret", ""]
)
def test_a_url_that_cannot_be_parsed_is_not_quoted(url: str) -> None:
    assert redacted_database_url(url) == UNPARSABLE_URL


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "connection refused: is PostgreSQL"),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "unknown host (Name or service"),
        (TimeoutError(), "no answer within 5 s (HAKI_CONNECT_TIMEOUT_SECONDS)"),
        (OSError(errno.EHOSTUNREACH, "failed"), f"unreachable ({os.strerror(errno.EHOSTUNREACH)})"),
        (asyncpg.InvalidPasswordError("password authentication failed"), "authentication failed: password"),
        (asyncpg.InvalidAuthorizationSpecificationError('role "u" does not exist'), "access refused: role"),
        (asyncpg.InvalidCatalogNameError('database "x" does not exist'), 'database missing: database "x"'),
        (asyncpg.TooManyConnectionsError("too many clients"), "the server refused the connection: too many"),
        (ValueError("Invalid IPv6 URL"), "malformed URL: Invalid IPv6 URL"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_a_failed_connection_is_named_in_one_line(exc: Exception, reason: str) -> None:
    said = unreachable_reason(exc, timeout=5.0)
    assert said.startswith(reason) and "\n" not in said, said


@pytest.mark.parametrize(
    "url", ["postgresql://u@127.0.0.1:1/x?password=s3cret", "postgresql://u:s3cret@[::1/x"]
)
async def test_every_check_has_its_line_when_the_database_cannot_be_reached(url: str) -> None:
    checks = await doctor.run_checks(Settings(database_url=url, embed_provider="hash"))
    assert [(c.name, c.ok, c.skipped) for c in checks] == [
        ("database", False, False),
        ("pgvector", False, True),
        ("migrations", False, True),
        ("vector probe", False, True),
        ("model", True, False),
        ("projects", False, True),
    ]
    assert all(c.detail.startswith("skipped: ") for c in checks[1:4])
    assert "s3cret" not in checks[0].detail
    with pytest.raises(DatabaseUnreachable) as refused:  # what every other command prints
        await connect(Settings(database_url=url))
    message = str(refused.value)
    assert message.startswith("cannot connect to the database at ") and "s3cret" not in message


def test_a_data_directory_of_another_major_version_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "PG_VERSION").write_text("16\n")
    with pytest.raises(DataDirVersionError, match="pg_dumpall"):
        check_data_dir_version(tmp_path)
    (tmp_path / "PG_VERSION").write_text("18\n")
    check_data_dir_version(tmp_path)


async def test_the_vector_probe_passes_here_and_leaves_nothing(settings: Settings, migrated: str) -> None:
    check = await doctor.check_vectors(settings)
    assert check.ok, check.detail
    conn = await asyncpg.connect(migrated)
    try:
        ext = await health.vector_extension(conn)
        assert ext.installed_version == ext.available_version
        assert await pending_migrations(conn) == []
    finally:
        await conn.close()


async def test_the_probe_finds_what_it_searched_and_leaves_nothing(conn: asyncpg.Connection) -> None:
    first = await health.probe_vectors(conn)
    assert first.nearest_id == doctor.PROBE_NEAREST_ID
    assert 0 < first.max_distance <= 2 and 0 < first.max_half_distance <= 2
    # Its temporary table went with its transaction: a second probe creates it again.
    assert await health.probe_vectors(conn) == first


@pytest.mark.integration
def test_doctor_reports_each_check_and_fails_until_migrated() -> None:
    with scratch_data_dir("haki-doc-") as data_dir:
        env = server_env(data_dir)

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "service.cli", *args],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip

        fresh = run("doctor")
        assert fresh.returncode == 1, fresh.stdout + fresh.stderr
        lines = dict(line.split(None, 2)[1::-1] for line in fresh.stdout.splitlines())
        assert lines == {
            "database": "ok", "pgvector": "ok", "migrations": "FAIL", "vector": "ok", "model": "ok",
            "projects": "skip",
        }, fresh.stdout  # fmt: skip
        assert "pending" in fresh.stdout
        assert run("migrate").returncode == 0
        ready = run("doctor")
        assert ready.returncode == 0, ready.stdout + ready.stderr
        assert all(line.startswith("ok ") for line in ready.stdout.splitlines()), ready.stdout


async def test_projects_on_another_model_than_the_configured_one_fail_by_name(
    conn: asyncpg.Connection,
) -> None:
    """A server on one model refuses every call of a project whose vectors another made: the
    check names the first of those projects with their models, and the way out."""
    await conn.execute("DELETE FROM project_embedding_models")  # the test's transaction only
    assert await embedding_model.list_projects_on_other_models(conn, "m:a") == []
    projects = [("p1", "m:a"), ("p2", "m:b"), ("p3", "m:c"), ("p4", "m:b"), ("p5", "m:b")]
    await conn.executemany(
        "INSERT INTO project_embedding_models (project_id, model) VALUES ($1, $2)", projects
    )
    others = await embedding_model.list_projects_on_other_models(conn, "m:a")
    assert others == ["p2", "p3", "p4", "p5"]
    named = [(p, await embedding_model.get_model(conn, p)) for p in others[: doctor.NAMED_PROJECTS]]
    check = doctor.projects_check(len(others), named, "m:a")
    assert not check.ok
    assert check.detail == (
        "4 on another model than m:a, refused (409 embedding_model_mismatch): p2 (m:b), p3 (m:c), "
        "p4 (m:b) and 1 more; `haki reembed --project P` moves one"
    ), check.detail
    assert await embedding_model.list_projects_on_other_models(conn, "m:b") == ["p1", "p3"]
    assert doctor.projects_check(0, [], "m:a") == doctor.Check(
        name="projects", ok=True, detail="every project's vectors are m:a's"
    )
