"""`haki import FILE.jsonl`: bad lines reported by number, resumable after an interruption.

Each test runs the real command in a subprocess against a throw-away embedded PostgreSQL (one
per module, reached through HAKI_DATABASE_URL) with the hash embedder.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from service.db import connect
from service.db.embedded import embedded_server, embedded_url
from service.repository import facts as facts_repo
from service.settings import Settings
from tests.helpers.server import REPO, server_env
from tests.helpers.sql import load_test_queries

pytestmark = pytest.mark.integration


PROJECT = "import-proj"


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = Path(tmp_path_factory.mktemp("import-db"))
    url = embedded_url(data_dir)
    yield url
    embedded_server(data_dir).cleanup()


def haki_import(database: str, *args: str | Path, wait: bool = True, **extra_env: str) -> Any:
    env = server_env(Path("/nonexistent"), HAKI_DATABASE_URL=database, **extra_env)
    cmd = [sys.executable, "-m", "service.cli", "import", *map(str, args)]
    if not wait:
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def counts(database: str, subject: str) -> dict[str, int]:
    return asyncio.run(_counts(database, subject))


async def _counts(database: str, subject: str) -> dict[str, int]:
    conn = await connect(Settings(database_url=database))
    try:
        row = await load_test_queries().test_import_counts(conn, project_id=PROJECT, subject_id=subject)
        return dict(row)
    finally:
        await conn.close()


def saved_progress(path: Path) -> dict[str, Any]:
    """FILE.haki-progress as saved (empty before the import starts: at line 0 until a batch commits)."""
    progress_file = Path(f"{path}.haki-progress")
    return json.loads(progress_file.read_text()) if progress_file.exists() else {}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_bad_lines_are_reported_by_number_and_the_rest_is_written(database: str, tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "facts.jsonl",
        [
            json.dumps({"content": "Alice works at Acme.", "key": "employer"}),  # 1
            "{not json",  # 2
            json.dumps({"content": ""}),  # 3: violates FactIn (min_length)
            "",  # 4: blank lines are skipped, not rejected
            json.dumps({"content": "Alice lives in Lyon.", "colour": "blue"}),  # 5: unknown field
            json.dumps(  # 6: a rule only the service checks
                {"content": "x", "valid_from": "2024-02-01T00:00:00Z", "valid_to": "2024-01-01T00:00:00Z"}
            ),
            json.dumps({"content": "Alice works at Globex.", "key": "employer"}),  # 7: a conflict, written
            json.dumps(
                {"content": "Alice has a cat.", "volatility": "volatile", "stale_after_seconds": 60}
            ),  # 8
            json.dumps(["a list"]),  # 9
        ],
    )
    done = haki_import(database, path, "--project", PROJECT, "--subject", "bad-lines", "--batch-size", "3")
    assert done.returncode == 1, done.stderr  # finished, with rejected lines
    out = done.stdout
    assert "3 facts written" in out and "5 line(s) rejected" in out, out
    rejected = [int(n) for n in re.findall(r"^  line (\d+):", out, flags=re.M)]
    assert rejected == [2, 3, 5, 6, 9], out
    assert "line 2: invalid JSON" in out and "line 5: invalid fact" in out and "unknown field `colour`" in out
    assert "line 6: refused: valid_to: must be later than valid_from" in out
    assert counts(database, "bad-lines") == {"facts": 3, "distinct_contents": 3, "events": 0}

    progress = json.loads(Path(f"{path}.haki-progress").read_text())
    assert progress["done"] is True and progress["line"] == 9 and progress["written"] == 3

    # Done is done: running it again writes nothing; --restart writes the good lines again.
    again = haki_import(database, path, "--project", PROJECT, "--subject", "bad-lines")
    assert "already imported" in again.stderr and again.returncode == 1
    assert (counts(database, "bad-lines"))["facts"] == 3
    restarted = haki_import(database, path, "--project", PROJECT, "--subject", "bad-lines", "--restart")
    assert restarted.returncode == 1 and "3 facts written" in restarted.stdout
    assert (counts(database, "bad-lines"))["facts"] == 6


def test_events_import(database: str, tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "events.jsonl",
        [
            json.dumps({"content": "Alice joined Acme.", "occurred_at": "2024-03-01T09:00:00Z"}),
            json.dumps({"content": "Alice moved to Lyon."}),  # no occurred_at
            json.dumps({"content": "Alice adopted a cat.", "occurred_at": "2024-05-01T00:00:00"}),  # naive
            json.dumps({"content": "Alice gave a talk.", "occurred_at": "2025-01-10T18:30:00+01:00"}),
        ],
    )
    done = haki_import(database, path, "--project", PROJECT, "--subject", "ev", "--kind", "events")
    assert done.returncode == 1, done.stderr
    assert "2 events written" in done.stdout and "line 2: invalid event" in done.stdout
    assert "line 3: invalid event" in done.stdout
    assert counts(database, "ev") == {"facts": 0, "distinct_contents": 0, "events": 2}


def test_resume_after_an_interruption_writes_each_line_once(database: str, tmp_path: Path) -> None:
    n = 1500
    path = write_lines(
        tmp_path / "big.jsonl", [json.dumps({"content": f"Fact number {i} about Zed."}) for i in range(n)]
    )
    progress_file = Path(f"{path}.haki-progress")
    args = (path, "--project", PROJECT, "--subject", "resume", "--batch-size", "50")

    proc = haki_import(database, *args, wait=False)
    deadline = time.monotonic() + 120
    while not saved_progress(path).get("line"):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no batch committed in time"
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: finish the batch in flight, keep the position
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "run the same command to resume" in stderr

    saved = msgspec.json.decode(progress_file.read_bytes())
    assert not saved["done"] and 0 < saved["line"] < n and saved["line"] % 50 == 0, saved
    first = counts(database, "resume")
    assert first["facts"] == saved["written"] == saved["line"]

    resumed = haki_import(database, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming after line {saved['line']}" in resumed.stderr
    assert f"{n} facts written" in resumed.stdout and "0 line(s) rejected" in resumed.stdout
    assert counts(database, "resume") == {"facts": n, "distinct_contents": n, "events": 0}


async def test_a_killed_import_never_writes_a_committed_batch_again(database: str, tmp_path: Path) -> None:
    # Four batches of four, two stored at once. The second batch waits for a key lock the test
    # holds, the third and fourth commit meanwhile; then the process is killed (SIGKILL) and the
    # import run again: it writes the second batch and skips the two that had committed.
    rows = [{"content": f"Fact {i} about Kay.", **({"key": "held"} if 4 <= i < 8 else {})} for i in range(16)]
    path = write_lines(tmp_path / "killed.jsonl", [json.dumps(row) for row in rows])
    args = (path, "--project", PROJECT, "--subject", "killed", "--batch-size", "4", "--concurrency", "2")
    holder = await connect(Settings(database_url=database))
    try:
        async with holder.transaction():
            await facts_repo.lock_fact_keys(holder, PROJECT, "killed", ["held"])
            proc = haki_import(database, *args, wait=False)
            try:
                deadline = time.monotonic() + 120
                while len(saved_progress(path).get("committed_ahead", [])) < 2:
                    assert proc.poll() is None, proc.communicate()
                    assert time.monotonic() < deadline, "the batches after the held one did not commit"
                    await asyncio.sleep(0.005)
            finally:
                proc.kill()
                proc.communicate(timeout=60)
    finally:
        await holder.close()
    saved = saved_progress(path)
    assert (saved["line"], saved["written"], saved["done"]) == (4, 12, False), saved
    assert [(s["start_line"], s["end_line"]) for s in saved["committed_ahead"]] == [(8, 12), (12, 16)]
    assert (await _counts(database, "killed"))["facts"] == 12

    resumed = haki_import(database, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming after line 4" in resumed.stderr
    assert "16 facts written" in resumed.stdout, resumed.stdout
    assert await _counts(database, "killed") == {"facts": 16, "distinct_contents": 16, "events": 0}
    assert saved_progress(path)["committed_ahead"] == []


def test_an_import_on_another_model_is_refused_before_any_line_is_embedded(
    database: str, tmp_path: Path
) -> None:
    path = write_lines(tmp_path / "facts.jsonl", [json.dumps({"content": f"fact {i}"}) for i in range(3)])
    first = haki_import(database, path, "--project", PROJECT, "--subject", "models")
    assert first.returncode == 0, first.stderr
    other = write_lines(tmp_path / "other.jsonl", [json.dumps({"content": "fact on model b"})])
    # The server's model, `hash:x`, then a colon: printed as it is, not as the emoji `:x:`.
    refused = haki_import(database, other, "--project", PROJECT, "--subject", "models", HAKI_EMBED_MODEL="x")
    assert refused.returncode == 2, refused.stderr
    assert "haki import: nothing written: The vectors of project" in refused.stderr, refused.stderr
    assert "embeds with hash:x:" in refused.stderr, refused.stderr
    assert "haki reembed --project" in refused.stderr and "Traceback" not in refused.stderr
    assert counts(database, "models") == {"facts": 3, "distinct_contents": 3, "events": 0}
    assert not Path(f"{other}.haki-progress").exists()  # the file may go to another scope as is
    # Nothing was written, so the same file on the project's model starts from its first line.
    resumed = haki_import(database, other, "--project", PROJECT, "--subject", "models")
    assert resumed.returncode == 0 and "1 facts written" in resumed.stdout, resumed.stdout


def test_a_byte_order_mark_before_line_1_is_read_past(database: str, tmp_path: Path) -> None:
    """Windows editors start a UTF-8 file with a byte order mark: line 1 was invalid JSON, and an
    events file was taken for facts (every line rejected)."""
    events = tmp_path / "events.jsonl"
    lines = [json.dumps({"content": f"event {i}", "occurred_at": "2024-01-01T00:00:00Z"}) for i in range(3)]
    events.write_bytes(codecs.BOM_UTF8 + "".join(line + "\n" for line in lines).encode())
    res = haki_import(database, events, "--project", PROJECT, "--subject", "bom")
    assert res.returncode == 0, res.stderr
    assert "importing events" in res.stderr and "0 line(s) rejected" in res.stdout, res.stdout
    facts = tmp_path / "facts.jsonl"
    facts.write_bytes(codecs.BOM_UTF8 + b'{"content": "a fact after a BOM"}\n')
    res = haki_import(database, facts, "--project", PROJECT, "--subject", "bom")
    assert res.returncode == 0 and "1 facts written" in res.stdout, res.stdout + res.stderr
    assert counts(database, "bom") == {"facts": 1, "distinct_contents": 1, "events": 3}


def test_an_import_stopped_before_it_began_leaves_no_progress_file(database: str, tmp_path: Path) -> None:
    """An embedder that cannot start (here a model directory that does not exist) stops the
    import before its first batch: one line, exit 2, and no progress file tying the file to the
    scope (the next run could not go to another subject without --restart)."""
    path = write_lines(tmp_path / "facts.jsonl", [json.dumps({"content": "never written"})])
    res = haki_import(
        database, path, "--project", PROJECT, "--subject", "no-model",
        HAKI_EMBED_PROVIDER="local", HAKI_EMBED_MODEL=str(tmp_path / "no-such-model"),
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    last = res.stderr.splitlines()[-1]
    assert last.startswith("haki: HAKI_EMBED_MODEL=") and "Traceback" not in res.stderr, res.stderr
    assert not Path(f"{path}.haki-progress").exists()
    assert counts(database, "no-model")["facts"] == 0


def test_usage_errors(database: str, tmp_path: Path) -> None:
    missing = haki_import(database, tmp_path / "nope.jsonl", "--project", PROJECT, "--subject", "s")
    assert (
        missing.returncode == 2
        and missing.stderr == f"haki import: {tmp_path / 'nope.jsonl'}: no such file\n"
    )
    stdin = haki_import(database, "-", "--project", PROJECT, "--subject", "s")
    assert stdin.returncode == 2 and "standard input is not supported" in stdin.stderr, stdin.stderr
    path = write_lines(tmp_path / "one.jsonl", [json.dumps({"content": "x"})])
    bad_scope = haki_import(database, path, "--project", "", "--subject", "s")
    assert bad_scope.returncode == 2
    Path(f"{path}.haki-progress").write_text(
        json.dumps({"kind": "facts", "project_id": "other", "subject_id": "s", "offset": 0, "line": 0})
    )
    other = haki_import(database, path, "--project", PROJECT, "--subject", "s")
    assert other.returncode == 2 and "--restart" in other.stderr
    Path(f"{path}.haki-progress").unlink()
    for concurrency in ("0", "9"):
        bad = haki_import(
            database, path, "--project", PROJECT, "--subject", "s", "--concurrency", concurrency
        )
        assert bad.returncode == 2 and "--concurrency must be within 1..8" in bad.stderr
    # The progress file is written before the first batch (it holds the run's id): where it cannot
    # be, the import stops before it opens the database.
    Path(f"{path}.haki-progress.tmp").mkdir()
    unwritable = haki_import(database, path, "--project", PROJECT, "--subject", "unwritable")
    assert unwritable.returncode == 2 and "haki-progress.tmp" in unwritable.stderr, unwritable.stderr
    assert not Path(f"{path}.haki-progress").exists()
