"""The `haki` command line, run as real processes on a throw-away embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api import auth
from service.db import connect
from service.db.embedded import embedded_server
from service.db.migrations import RULES_VERSION, pending_migrations
from service.db.sql import load_queries
from service.errors import Unauthorized
from service.repository import keys as keys_repo
from service.settings import Settings
from tests.helpers.server import (
    free_port,
    postmaster_pid,
    scratch_data_dir,
    server_env,
    short_tmp_dir,
    spawn_serve,
    stop_process,
)
from tests.helpers.sql import load_test_queries
from tests.helpers.stub_http import serve_posts

pytestmark = pytest.mark.integration


REPO = Path(__file__).resolve().parent.parent
HEALTH_TIMEOUT_SECONDS = 60.0
KEY_ID_LINE = re.compile(r"key id (?P<key_id>[0-9a-f-]{36}) ")


def wait_stopped(data_dir: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if postmaster_pid(data_dir) is None:
            return True
        time.sleep(0.2)
    return False


def stop_embedded(data_dir: Path) -> None:
    """Stops the embedded server of `data_dir` if it is still up, then removes the dir."""
    if postmaster_pid(data_dir) is not None:
        embedded_server(data_dir).cleanup()
    pid = postmaster_pid(data_dir)
    if pid is not None:
        # Another handle (a process of this test that died) kept it alive: fast shutdown by pid.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
        wait_stopped(data_dir, 15)
    shutil.rmtree(data_dir, ignore_errors=True)


def cli_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update(HAKI_DATA_DIR=str(data_dir), HAKI_EMBED_PROVIDER="hash", PYTHONUNBUFFERED="1")
    env.update(extra)  # the hash embedder unless told otherwise
    return env


def run_cli(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`haki ARGS...` on `data_dir`, with the HAKI_ variables of `env` set too."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env=cli_env(data_dir, **env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def create_key(data_dir: Path, project_id: str) -> tuple[str, str]:
    """(key, key id) from `haki keys create`."""
    res = run_cli(data_dir, "keys", "create", project_id)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    assert res.stdout == lines[0] + "\n"
    key = lines[0]
    assert key.startswith("hk_")
    m = KEY_ID_LINE.search(res.stderr)
    assert m is not None, res.stderr
    # It names the database it wrote to: the CLI's own environment may point elsewhere than a server's.
    assert f"in embedded, in {data_dir}" in res.stderr, res.stderr
    return key, m.group("key_id")


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    with scratch_data_dir("haki-cli-", stop_embedded) as path:
        yield path


async def authenticates(data_dir: Path, key: str) -> bool:
    conn = await connect(Settings(data_dir=data_dir, embed_provider="hash"))
    try:
        try:
            principal = await auth.authenticate(conn, f"Bearer {key}")
        except Unauthorized:
            return False
        return principal.project_id == "proj-x"
    finally:
        await conn.close()


def test_migrate_exits_0_and_is_idempotent(data_dir: Path) -> None:
    first = run_cli(data_dir, "migrate")
    assert first.returncode == 0, first.stderr
    assert first.stdout == ""
    second = run_cli(data_dir, "migrate")
    assert second.returncode == 0, second.stderr
    assert "applied 0 migration(s)" in second.stderr


def test_keys_create_prints_exactly_the_key(data_dir: Path) -> None:
    key, _ = create_key(data_dir, "proj-x")
    other, _ = create_key(data_dir, "proj-x")
    assert key != other
    assert len(key) >= 40


@pytest.mark.parametrize("project_id", ["", "p" * 201, "a\tb", "two\nlines"])
def test_keys_create_refuses_bad_project_ids(data_dir: Path, project_id: str) -> None:
    res = run_cli(data_dir, "keys", "create", project_id)
    assert res.returncode == 2
    assert res.stdout == ""


@pytest.mark.parametrize("label", ["evil\tlabel", "two\nlines"])
def test_keys_create_refuses_a_label_that_would_break_keys_list(data_dir: Path, label: str) -> None:
    res = run_cli(data_dir, "keys", "create", "proj-x", "--label", label)
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and "--label" in res.stderr, res.stderr


@pytest.mark.parametrize("days", ["-1", "36501", "3000000"])
def test_purge_refuses_days_out_of_range(data_dir: Path, days: str) -> None:
    """The cut-off, now minus the days, must stay a timestamp: 3,000,000 days was a traceback."""
    res = run_cli(data_dir, "purge", "--days", days)
    assert (res.returncode, res.stderr) == (
        2,
        "haki purge: --days must be within [0, 36500] (0 keeps traces for ever)\n",
    )


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_reembed_of_a_project_never_written_exits_1(data_dir: Path, dry_run: tuple[str, ...]) -> None:
    res = run_cli(data_dir, "reembed", "--project", "no-such-project", *dry_run)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "'no-such-project' holds no facts or events" in res.stderr and "--project" in res.stderr


def test_reembed_tells_a_log_its_progress_and_counts_what_it_switched(data_dir: Path, tmp_path: Path) -> None:
    """Without a terminal (a job's log) the progress bar drew nothing until the end: a line every
    tenth of the texts. The summary counts what the switch swapped, not what the plan found."""
    facts = tmp_path / "facts.jsonl"
    facts.write_text("".join(f'{{"content": "reembed fact {i}"}}\n' for i in range(20)))
    loaded = run_cli(data_dir, "import", str(facts), "--project", "re-p", "--subject", "s")
    assert loaded.returncode == 0, loaded.stderr
    res = run_cli(data_dir, "reembed", "--project", "re-p", "--batch", "1", HAKI_EMBED_MODEL="other")
    assert res.returncode == 0, (res.stdout, res.stderr)
    progress = re.findall(r"re-embedding re-p: (\d+)/20 text\(s\)", res.stderr)
    assert [int(n) for n in progress] == [1, *range(2, 21, 2)], res.stderr
    assert "switched from hash to hash:other: 20 fact(s) and 0 event(s)" in res.stdout, res.stdout


async def test_keys_revoke_and_list(data_dir: Path) -> None:
    key, key_id = await asyncio.to_thread(create_key, data_dir, "proj-x")
    assert await authenticates(data_dir, key)

    listed = await asyncio.to_thread(run_cli, data_dir, "keys", "list", "proj-x")
    assert listed.returncode == 0, listed.stderr
    assert key not in listed.stdout  # ids only, never the keys
    (line,) = [ln for ln in listed.stdout.splitlines() if ln.startswith(key_id)]
    assert line.split("\t")[2] == "live"

    revoked = await asyncio.to_thread(run_cli, data_dir, "keys", "revoke", key)
    assert revoked.returncode == 0, revoked.stderr
    assert not await authenticates(data_dir, key)

    listed = await asyncio.to_thread(run_cli, data_dir, "keys", "list", "proj-x")
    assert listed.returncode == 0, listed.stderr
    (line,) = [ln for ln in listed.stdout.splitlines() if ln.startswith(key_id)]
    assert line.split("\t")[2].startswith("revoked ")

    again = await asyncio.to_thread(run_cli, data_dir, "keys", "revoke", key)
    assert again.returncode == 1


async def test_keys_revoke_by_id(data_dir: Path) -> None:
    key, key_id = await asyncio.to_thread(create_key, data_dir, "proj-x")
    elsewhere = await asyncio.to_thread(run_cli, data_dir, "keys", "revoke", key_id, "--project", "proj-y")
    assert elsewhere.returncode == 1 and "no such live key" in elsewhere.stderr
    assert await authenticates(data_dir, key)
    res = await asyncio.to_thread(run_cli, data_dir, "keys", "revoke", key_id, "--project", "proj-x")
    assert res.returncode == 0, res.stderr
    assert not await authenticates(data_dir, key)


async def test_keys_revoke_by_id_needs_no_project_when_the_id_is_unique(data_dir: Path) -> None:
    key, key_id = await asyncio.to_thread(create_key, data_dir, "proj-x")
    res = await asyncio.to_thread(run_cli, data_dir, "keys", "revoke", key_id)
    assert res.returncode == 0, res.stderr
    assert not await authenticates(data_dir, key)
    again = await asyncio.to_thread(run_cli, data_dir, "keys", "revoke", key_id)
    assert again.returncode == 1 and "no such live key" in again.stderr
    unknown = await asyncio.to_thread(run_cli, data_dir, "keys", "revoke", str(uuid.uuid4()))
    assert unknown.returncode == 1


async def test_a_key_id_held_by_two_projects_needs_the_project(data_dir: Path) -> None:
    key, key_id = await asyncio.to_thread(create_key, data_dir, "proj-x")
    conn = await connect(Settings(data_dir=data_dir, embed_provider="hash"))
    try:  # the same id in another project: possible in the schema, never made by `keys create`
        await keys_repo.insert_api_key(conn, "proj-twin", uuid.UUID(key_id), os.urandom(32), None)
    finally:
        await conn.close()
    res = await asyncio.to_thread(run_cli, data_dir, "keys", "revoke", key_id)
    assert res.returncode == 2
    assert "in 2 projects (proj-twin, proj-x): pass --project" in res.stderr
    assert await authenticates(data_dir, key)


async def test_keys_list_without_a_project_lists_every_project(data_dir: Path) -> None:
    _, x_id = await asyncio.to_thread(create_key, data_dir, "proj-x")
    _, z_id = await asyncio.to_thread(create_key, data_dir, "proj-z")
    listed = await asyncio.to_thread(run_cli, data_dir, "keys", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == "project_id\tkey_id\tcreated_at\tstate\tlabel"
    rows = {line.split("\t")[1]: line.split("\t") for line in lines[1:]}
    assert rows[x_id][0] == "proj-x" and rows[z_id][0] == "proj-z"
    assert rows[x_id][3] == "live"


async def test_only_serve_and_migrate_apply_pending_migrations(data_dir: Path) -> None:
    """A database with migrations pending (here the rules) is refused by the other commands, which
    leave it as it is: a migration may drop what the running servers of the previous release
    call. `haki migrate` applies them and logs each one by name."""
    await asyncio.to_thread(create_key, data_dir, "proj-x")  # a new database: migrated
    conn = await connect(Settings(data_dir=data_dir, embed_provider="hash"))
    try:
        await load_queries().forget_rules(conn, version=RULES_VERSION)
        for command in (["keys", "list"], ["keys", "create", "proj-x"], ["purge", "--days", "30"]):
            refused = await asyncio.to_thread(run_cli, data_dir, *command)
            assert refused.returncode == 2, refused.stderr
            needs = "haki: the database needs 1 migration(s) of this release (rules): "
            assert refused.stderr.startswith(needs), refused.stderr
            assert "then run `haki migrate`" in refused.stderr
        assert await pending_migrations(conn) == [RULES_VERSION]
    finally:
        migrated = await asyncio.to_thread(run_cli, data_dir, "migrate", "--log-level", "info")
        await conn.close()
    assert migrated.returncode == 0, migrated.stderr
    assert "INFO haki.migrations: migration rules applied" in migrated.stderr, migrated.stderr
    assert "applied 1 migration(s): rules" in migrated.stderr
    listed = await asyncio.to_thread(run_cli, data_dir, "keys", "list")
    assert listed.returncode == 0, listed.stderr


# --- a database that cannot be reached ----------------------------------------------------------

# Nothing listens on port 1: the connection is refused at once. Its password must not be printed.
UNREACHABLE_URL = "postgresql://u:hunter2@127.0.0.1:1/x"
UNREACHABLE_LINE = (
    "haki: cannot connect to the database at postgresql://u:***@127.0.0.1:1/x: connection refused"
)


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--port", "0"],
        ["migrate"],
        ["keys", "create", "proj-x"],
        ["keys", "list"],
        ["keys", "revoke", "hk_not_a_key"],
        ["import", "{facts}", "--kind", "facts", "--project", "p", "--subject", "s"],
        ["import", "{export}", "--project", "p", "--subject", "s"],
        ["reembed", "--project", "p"],
        ["purge"],
    ],
    ids=" ".join,
)
def test_every_command_refuses_an_unreachable_database_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    files = {"facts": tmp_path / "facts.jsonl", "export": tmp_path / "export.jsonl"}
    files["facts"].write_text('{"content": "never written"}\n')
    header = '{"haki_export": 1, "project_id": "p", "subject_id": "s", "exported_at": "2026-01-01T00:00:00Z"}'
    files["export"].write_text(header + "\n")
    argv = [a.format(**files) for a in command]
    res = run_cli(tmp_path, *argv, HAKI_DATABASE_URL=UNREACHABLE_URL)
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.splitlines()  # one line, no traceback
    assert line.startswith(UNREACHABLE_LINE), line
    assert "hunter2" not in res.stdout + res.stderr


@pytest.mark.parametrize(
    ("command", "embedder"),
    [
        (["import", "{facts}", "--project", "p", "--subject", "s"], "no_model"),
        (["reembed", "--project", "p", "--dry-run"], "no_model"),
        (["serve", "--port", "{port}"], "no_model"),
        (["serve", "--port", "{port}"], "no_answer"),
    ],
    ids=["import", "reembed", "serve", "serve-openai"],
)
def test_an_embedder_that_cannot_start_is_one_line_exit_2(
    data_dir: Path, tmp_path: Path, command: list[str], embedder: str
) -> None:
    """A model directory that does not exist, or an OpenAI-compatible server that does not answer,
    is a configuration error: `haki: <reason>`, exit 2 (a traceback, exit 1, and `haki serve`
    exited 3 after uvicorn's start-up traceback)."""
    facts = tmp_path / "facts.jsonl"
    facts.write_text('{"content": "never written"}\n')
    argv = [a.format(facts=facts, port=free_port()) for a in command]
    env = (
        {"HAKI_EMBED_PROVIDER": "local", "HAKI_EMBED_MODEL": str(tmp_path / "no-such-model")}
        if embedder == "no_model"
        else {"HAKI_EMBED_PROVIDER": "openai", "HAKI_EMBED_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
              "HAKI_EMBED_TIMEOUT_SECONDS": "2"}
    )  # fmt: skip
    res = run_cli(data_dir, *argv, **env)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("haki: "), res.stderr
    assert ("HAKI_EMBED_MODEL" if embedder == "no_model" else "HAKI_EMBED_BASE_URL") in last, last
    assert not Path(f"{facts}.haki-progress").exists()


def test_a_data_dir_that_cannot_be_one_is_one_line_exit_2(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    for where in (taken, taken / "below"):
        res = run_cli(where, "migrate")
        assert res.returncode == 2, res.stderr
        (line,) = res.stderr.splitlines()
        assert line.startswith(f"haki: HAKI_DATA_DIR={where} cannot hold the embedded PostgreSQL"), line


@pytest.mark.parametrize("port", ["65536", "99999", "-1", "http"])
def test_serve_refuses_a_port_that_is_not_one(tmp_path: Path, port: str) -> None:
    """uvicorn listened on 99999 modulo 65536 while logging 99999; -1 was called an unknown host."""
    res = run_cli(tmp_path, "serve", "--port", port)
    assert res.returncode == 2 and "is not a TCP port (0..65535)" in res.stderr, res.stderr


@pytest.mark.parametrize("argv", [["keys", "create", "p\udcff"], ["keys", "list", "p\udcff"]])
def test_an_argument_that_is_not_utf8_is_one_line_exit_2(tmp_path: Path, argv: list[str]) -> None:
    """Bytes that are not UTF-8 (`$'p\\xff'`) reach Python as a lone surrogate: refused before
    anything runs (it was a traceback from the database driver)."""
    res = run_cli(tmp_path, *argv)
    assert res.returncode == 2, res.stderr
    assert res.stderr == "haki: the argument 'p\\udcff' is not valid UTF-8\n", res.stderr


def test_ctrl_c_in_an_export_document_import_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The document is written in one transaction, so an interrupted import wrote nothing: it
    says so and exits 130, as the other imports (it was a KeyboardInterrupt traceback, exit 1)."""
    from service import cli
    from service.memory import export

    async def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "import_file", interrupted)
    for name in [k for k in os.environ if k.startswith("HAKI_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HAKI_EMBED_PROVIDER", "hash")
    doc = tmp_path / "export.jsonl"
    doc.write_text(
        '{"haki_export": 1, "project_id": "p", "subject_id": "s", "exported_at": "2026-01-01T00:00:00Z"}\n'
    )
    assert cli.main(["import", str(doc), "--project", "p", "--subject", "s"]) == 130
    assert capsys.readouterr().err.endswith("interrupted; nothing written (all or nothing)\n")


def _no_haki_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("HAKI_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HAKI_EMBED_PROVIDER", "hash")


def test_a_purge_the_database_fails_is_one_line_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A statement timeout mid-purge was a traceback, exit 1; now one line that says what stays
    purged (the batches before it committed)."""
    import asyncpg

    from service import cli, db
    from service.memory import retention

    class Pool:
        async def close(self) -> None:
            pass

    async def nothing(*args: Any, **kwargs: Any) -> Any:
        return Pool()

    async def timed_out(pool: Any, settings: Settings, *, on_batch: Any, **kwargs: Any) -> None:
        on_batch(200, 600)
        raise asyncpg.QueryCanceledError("canceling statement due to statement timeout")

    monkeypatch.setattr(cli, "_migrate_only", nothing)
    monkeypatch.setattr(db, "create_pool", nothing)
    monkeypatch.setattr(retention, "purge_once", timed_out)
    _no_haki_env(monkeypatch)
    assert cli.main(["purge"]) == 1
    assert capsys.readouterr().err == (
        "haki purge: stopped: QueryCanceledError: canceling statement due to statement timeout "
        "(after 200 context call(s) purged in 1 batch(es), which stay purged)\n"
    )


@pytest.mark.parametrize(
    "command", [["keys", "list"], ["keys", "create", "proj-x"], ["keys", "revoke", "hk_x"]], ids=" ".join
)
def test_every_command_a_database_fails_once_connected_is_one_line_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """The database gone mid-command (the connection closed) was a traceback."""
    import asyncpg

    from service import cli

    async def gone(*args: Any) -> None:
        raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")

    monkeypatch.setattr(cli, "_with_migrated_conn", gone)
    _no_haki_env(monkeypatch)
    assert cli.main(command) == 1
    assert capsys.readouterr().err == (
        f"haki {' '.join(command[:2])}: stopped: ConnectionDoesNotExistError: connection was closed "
        "in the middle of operation\n"
    )


def test_doctor_prints_every_check_when_the_database_is_unreachable(tmp_path: Path) -> None:
    res = run_cli(tmp_path, "doctor", HAKI_DATABASE_URL=f"{UNREACHABLE_URL}?sslpassword=hunter2")
    assert res.returncode == 1, res.stderr
    rows = [line.split(None, 1) for line in res.stdout.splitlines()]
    statuses = [(status, rest.split("  ")[0]) for status, rest in rows]
    skipped = [("skip", name) for name in ("pgvector", "migrations", "vector probe")]
    assert statuses == [("FAIL", "database"), *skipped, ("ok", "model"), ("skip", "projects")], res.stdout
    assert "connection refused" in res.stdout and "sslpassword=***" in res.stdout
    assert "hunter2" not in res.stdout + res.stderr


# --- haki serve --------------------------------------------------------------------------------


def start_serve(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            env=cli_env(data_dir),
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_healthy(proc: subprocess.Popen[bytes], port: int, log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"haki serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            if r.status_code == 200:
                body: dict[str, Any] = r.json()
                return body
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"/healthz not 200 within {HEALTH_TIMEOUT_SECONDS}s:\n{log.read_text()}")


def test_two_serve_processes_share_one_embedded_server() -> None:
    data_dir = short_tmp_dir("haki-srv-")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port1, port2 = free_port(), free_port()
        log1, log2 = data_dir / "serve1.log", data_dir / "serve2.log"
        procs.append(start_serve(data_dir, port1, log1))
        health = wait_healthy(procs[0], port1, log1)
        assert health == {"status": "ok", "database": "ok", "embedder": health["embedder"]}

        key, _ = create_key(data_dir, "proj-serve")
        headers = {"Authorization": f"Bearer {key}"}
        body = {"project_id": "proj-serve", "subject_id": "u1", "facts": [{"content": "served over HTTP"}]}
        r = httpx.post(f"http://127.0.0.1:{port1}/v1/facts", json=body, headers=headers, timeout=30)
        assert r.status_code == 201, r.text
        fact_id = r.json()["facts"][0]["fact_id"]
        r = httpx.get(f"http://127.0.0.1:{port1}/v1/facts/{fact_id}", timeout=10)
        assert r.status_code == 401
        assert r.json()["code"] == "unauthorized"

        procs.append(start_serve(data_dir, port2, log2))
        wait_healthy(procs[1], port2, log2)
        r = httpx.get(f"http://127.0.0.1:{port2}/v1/facts/{fact_id}", headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["content"] == "served over HTTP"

        # The first process leaving does not take the shared server down with it.
        assert stop_process(procs[0], timeout=30) == 0, log1.read_text()
        wait_healthy(procs[1], port2, log2)
        body["facts"] = [{"content": "written after the first process left"}]
        r = httpx.post(f"http://127.0.0.1:{port2}/v1/facts", json=body, headers=headers, timeout=30)
        assert r.status_code == 201, r.text
        assert stop_process(procs[1], timeout=30) == 0, log2.read_text()
        # The last process out stops the embedded server it shared.
        assert wait_stopped(data_dir, 20), "the embedded PostgreSQL outlived every haki process"
    finally:
        for p in procs:
            stop_process(p, timeout=30)
        stop_embedded(data_dir)


def test_sigterm_stops_serve_within_its_shutdown_timeout_despite_a_stalled_client() -> None:
    """A client that never finishes its body kept `haki serve` draining for ever after SIGTERM,
    until the orchestrator's SIGKILL orphaned the embedded PostgreSQL. The drain is bounded
    (HAKI_SHUTDOWN_TIMEOUT_SECONDS), then the process stops cleanly, its database too. The request
    cut short is told so in the contract's retryable 503 (it was uvicorn's plain-text 500)."""
    with scratch_data_dir("haki-term-", stop_embedded) as data_dir:
        port = free_port()
        env = server_env(data_dir, HAKI_SHUTDOWN_TIMEOUT_SECONDS="1")
        proc = spawn_serve(env, port, data_dir / "serve.log")
        try:
            with socket.create_connection(("127.0.0.1", port)) as stalled:
                stalled.sendall(
                    b"POST /v1/facts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b'Content-Length: 1000\r\n\r\n{"facts": ['
                )
                time.sleep(0.5)
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=30) == 0
                stalled.settimeout(10)
                answer = b""
                while chunk := stalled.recv(65536):
                    answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            assert lines[0] == "HTTP/1.1 503 Service Unavailable", answer
            assert "retry-after: 1" in [line.lower() for line in lines[1:]], answer
            assert json.loads(body)["code"] == "unavailable", answer
            assert wait_stopped(data_dir, 15), "the embedded PostgreSQL outlived the server"
        finally:
            stop_process(proc)


@pytest.mark.parametrize("keyed", [True, False], ids=["idempotency-key", "no-key"])
def test_a_write_still_running_when_the_drain_ends_is_a_503(keyed: bool) -> None:
    """A write waiting on its embeddings when HAKI_SHUTDOWN_TIMEOUT_SECONDS ends: uvicorn
    cancelled it and answered a plain-text 500. It is the contract's 503 `unavailable`: with
    `Retry-After` under an Idempotency-Key (a resend is applied once), else without it and with
    `details.outcome_unknown` (a write cut there may have committed; this one had not)."""
    held = threading.Event()

    def embeddings(path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        texts = json.loads(body)["input"]
        if "held up" in texts:
            held.set()
            time.sleep(30)  # past the drain: the write is still running when it ends
        data = [{"index": i, "embedding": [0.1] * 384} for i in range(len(texts))]
        return 200, json.dumps({"data": data}).encode()

    with serve_posts(embeddings) as stub, scratch_data_dir("haki-cut-", stop_embedded) as data_dir:
        embedder = {
            "HAKI_EMBED_PROVIDER": "openai",
            "HAKI_EMBED_BASE_URL": f"http://127.0.0.1:{stub}/v1",
            "HAKI_EMBED_API_KEY": "sk-test",
            "HAKI_EMBED_MODEL": "stub",
            "HAKI_EMBED_TIMEOUT_SECONDS": "60",
        }
        key, _ = create_key(data_dir, "proj-cut")
        port = free_port()
        env = server_env(data_dir, HAKI_SHUTDOWN_TIMEOUT_SECONDS="1", **embedder)
        proc = spawn_serve(env, port, data_dir / "serve.log")
        try:
            body = {"project_id": "proj-cut", "subject_id": "s", "facts": [{"content": "held up"}]}
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                answer = pool.submit(
                    httpx.post,
                    f"http://127.0.0.1:{port}/v1/facts",
                    json=body,
                    headers={
                        "Authorization": f"Bearer {key}",
                        **({"Idempotency-Key": "k1"} if keyed else {}),
                    },
                    timeout=60,
                )
                assert held.wait(30), "the write never reached the embedder"
                proc.send_signal(signal.SIGTERM)
                r = answer.result(timeout=60)
            assert proc.wait(timeout=30) == 0
        finally:
            stop_process(proc)
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "unavailable"
        assert r.headers.get("retry-after") == ("1" if keyed else None)
        assert (r.json().get("details") or {}).get("outcome_unknown") is (None if keyed else True)
        listed = run_cli(data_dir, "keys", "list", **embedder)  # the database is usable after it
        assert listed.returncode == 0, listed.stderr
        assert asyncio.run(facts_written(data_dir)) == 0


async def facts_written(data_dir: Path) -> int:
    conn = await connect(Settings(data_dir=data_dir, embed_provider="hash"))
    try:
        count: int = await load_test_queries().test_count_facts(conn)
        return count
    finally:
        await conn.close()
