"""The first hour: the `haki` command line as a new user meets it, run as
real processes (a real `haki serve` for the HTTP import, its embedded PostgreSQL for the rest)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service import __version__
from tests.helpers.server import REPO, Server, free_port, server_env

pytestmark = pytest.mark.integration


PROJECT = "first-hour"


def haki(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=REPO,
        env=env if env is not None else server_env(Path("/nonexistent")),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def api_key(server: Server) -> str:
    return server.create_key(PROJECT)


def test_version() -> None:
    done = haki("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"haki {__version__}"


def test_serve_help_describes_every_flag_with_its_default() -> None:
    done = haki("serve", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for flag, default in (("--host", "127.0.0.1"), ("--port", "8000"), ("--log-level", "info")):
        assert flag in text
        assert f"(default: {default})" in text, (flag, text)
    assert "listen on" in text and "every request" in text


def test_import_help_shows_a_default_once_and_none_it_lacks() -> None:
    done = haki("import", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "(default: 1000)" in text and "(default: 2)" in text  # --batch-size, --concurrency
    # --project and --subject have none, --restart is a flag, --kind and --url say theirs.
    assert "(default: None)" not in text and "(default: False)" not in text, text
    assert text.count("(default") == text.count("(default: ") == 5, text


def test_busy_port_is_reported_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data_dir = tmp_path / "d"
        done = haki("serve", "--port", str(port), env=server_env(data_dir), timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"127.0.0.1:{port}" in done.stderr and "already in use" in done.stderr
    # Refused before the embedded PostgreSQL was even created.
    assert not (data_dir / "pgdata").exists()


def test_commands_are_quiet_unless_log_level_debug(server: Server) -> None:
    quiet = server.cli("keys", "create", "quiet-proj")
    assert quiet.returncode == 0, quiet.stderr
    assert " INFO " not in quiet.stderr, quiet.stderr
    loud = server.cli("keys", "list", "quiet-proj", "--log-level", "debug")
    assert loud.returncode == 0, loud.stderr
    assert "pgserver" in loud.stderr or "haki.embedded" in loud.stderr, loud.stderr


def test_keys_revoke_of_garbage_says_what_is_expected(server: Server) -> None:
    done = server.cli("keys", "revoke", "garbage")
    assert done.returncode == 2
    assert "neither an API key" in done.stderr and "key id" in done.stderr
    assert "--project" not in done.stderr


def test_keys_list_prints_a_header_and_says_when_a_project_has_none(server: Server, api_key: str) -> None:
    none = server.cli("keys", "list", "no-such-project")
    assert none.returncode == 0, none.stderr
    assert none.stdout == ""
    assert "no keys for project 'no-such-project'" in none.stderr
    some = server.cli("keys", "list", PROJECT)
    lines = some.stdout.splitlines()
    assert lines[0].split("\t") == ["key_id", "created_at", "state", "label"]
    assert len(lines) >= 2


def _events_file(path: Path) -> Path:
    lines = [
        {"content": "Maya moved to Lyon.", "occurred_at": "2026-01-02T03:04:05Z"},
        {"content": "Maya started at the hospital.", "occurred_at": "2026-02-03T04:05:06Z"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_import_detects_an_events_file(server: Server, api_key: str, tmp_path: Path) -> None:
    path = _events_file(tmp_path / "events.jsonl")
    done = server.cli("import", str(path), "--project", PROJECT, "--subject", "detect")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "importing events (detected" in done.stderr
    assert "2 events written" in done.stdout


def test_import_of_events_as_facts_hints_at_kind(server: Server, api_key: str, tmp_path: Path) -> None:
    path = _events_file(tmp_path / "events.jsonl")
    done = server.cli("import", str(path), "--project", PROJECT, "--subject", "hint", "--kind", "facts")
    assert done.returncode == 1
    assert "--kind events" in done.stdout, done.stdout


def test_an_import_over_http_to_a_server_on_another_model_writes_nothing(
    server: Server, tmp_path: Path
) -> None:
    """The project's vectors were made by another model than the server's: its first batch is a
    409 `embedding_model_mismatch`, and the import stops as a local one does (exit 2, nothing
    written, no progress file). It exited 1, "run the same command to resume", a file left."""
    project = "remote-model"
    key = server.create_key(project)
    seed = tmp_path / "seed.jsonl"
    seed.write_text(json.dumps({"content": "Made on model x."}) + "\n")
    # Straight into the server's database, on another model: the project records `hash:x`.
    seeded = haki("import", str(seed), "--project", project, "--subject", "s",
                  env={**server.env, "HAKI_EMBED_MODEL": "x"})  # fmt: skip
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    path = tmp_path / "facts.jsonl"
    path.write_text(json.dumps({"content": "Sent over HTTP."}) + "\n")
    env = server_env(Path("/nonexistent"), HAKI_URL=server.url, HAKI_API_KEY=key)
    refused = haki("import", str(path), "--project", project, "--subject", "t", env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "haki import: nothing written:" in refused.stderr and "haki reembed" in refused.stderr
    assert not Path(f"{path}.haki-progress").exists()
    r = httpx.get(
        f"{server.url}/v1/subjects",
        params={"project_id": project},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert [s["subject_id"] for s in r.json()["subjects"]] == ["s"]


def test_import_over_http_with_haki_url_and_key(server: Server, api_key: str, tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    path.write_text(
        json.dumps({"content": "Maya works at Lyon Sud."})
        + "\n"
        + json.dumps(
            {
                "content": "Maya likes tea.",
                "valid_from": "2026-03-01T00:00:00Z",
                "valid_to": "2025-01-01T00:00:00Z",
            }
        )
        + "\n"
        + json.dumps({"content": "Maya has a cat."})
        + "\n"
    )
    # No database reachable from this process: only HTTP can do the import.
    env = server_env(
        Path("/nonexistent"),
        HAKI_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        HAKI_URL=server.url,
        HAKI_API_KEY=api_key,
    )
    # A line a batch, two batches at once (the default --concurrency): three requests, two in flight.
    done = haki(
        "import", str(path), "--project", PROJECT, "--subject", "remote", "--batch-size", "1", env=env
    )
    assert done.returncode == 1, done.stdout + done.stderr  # one line refused by the server
    assert "2 facts written" in done.stdout, done.stdout
    assert "line 2: refused" in done.stdout and "valid_to" in done.stdout, done.stdout
    r = httpx.get(
        f"{server.url}/v1/facts",
        params={"subject_id": "remote"},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert sorted(f["content"] for f in r.json()["facts"]) == ["Maya has a cat.", "Maya works at Lyon Sud."]
    # The same command again: the saved position says it is done; nothing is written twice.
    again = haki(
        "import", str(path), "--project", PROJECT, "--subject", "remote", "--batch-size", "1", env=env
    )
    assert "already imported" in again.stderr
    # A record lost after its batch committed (a hard kill between the two): the position put back
    # after line 2, the resumed import's request for line 3 is answered from its Idempotency-Key
    # record, not written again.
    progress_file = Path(f"{path}.haki-progress")
    saved = json.loads(progress_file.read_text())
    saved.update(offset=sum(map(len, path.read_bytes().splitlines(keepends=True)[:2])), line=2, written=1)
    progress_file.write_text(json.dumps({**saved, "done": False}))
    resumed = haki(
        "import", str(path), "--project", PROJECT, "--subject", "remote", "--batch-size", "1", env=env
    )
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr  # line 2 stays refused
    assert "2 facts written" in resumed.stdout, resumed.stdout
    assert "(1 of them found committed by an earlier run)" in resumed.stdout, resumed.stdout
    r = httpx.get(
        f"{server.url}/v1/facts",
        params={"subject_id": "remote"},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert len(r.json()["facts"]) == 2
    # The same lost record, but line 3 changed since: its batch's key is held with other content,
    # which stops the import as a local one does, naming the lines and --restart.
    path.write_text(path.read_text().replace("Maya has a cat.", "Maya has two cats."))
    progress_file.write_text(json.dumps({**saved, "done": False}))
    changed = haki(
        "import", str(path), "--project", PROJECT, "--subject", "remote", "--batch-size", "1", env=env
    )
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "lines 3-3" in changed.stderr and "other content" in changed.stderr, changed.stderr
    assert "--restart" in changed.stderr and "409" not in changed.stderr, changed.stderr
    # A wrong key is refused before any line is read.
    env["HAKI_API_KEY"] = "hk_wrong"
    bad = haki("import", str(path), "--project", PROJECT, "--subject", "other", "--restart", env=env)
    assert bad.returncode == 2 and "401" in bad.stderr, bad.stderr


def test_import_over_http_needs_a_key(tmp_path: Path) -> None:
    path = _events_file(tmp_path / "events.jsonl")
    env = server_env(Path("/nonexistent"), HAKI_URL=f"http://127.0.0.1:{free_port()}")
    env.pop("HAKI_API_KEY", None)
    done = haki("import", str(path), "--project", PROJECT, "--subject", "s", env=env)
    assert done.returncode == 2 and "HAKI_API_KEY" in done.stderr
