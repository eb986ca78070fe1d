"""The embedded PostgreSQL's data directory: made whole or not at all, refused in one line when
it cannot be used, and usable by another Unix user than the first to run the embedded server.

Real `haki` processes on throw-away data directories; the other-user cases run as `nobody`
and need root (skipped otherwise).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.db.embedded import PG_MAJOR
from tests.helpers.server import (
    REPO,
    free_port,
    postmaster_pid,
    scratch_data_dir,
    server_env,
    short_tmp_dir,
    stop_embedded_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.integration]

NOBODY = 65534
TUNING_MARK = "# Haki (service/db/embedded.py)"
# initdb has written PG_VERSION by then and is not done (about 1.5 s on 2 busy cores).
INITDB_UNDER_WAY_SECONDS = 0.4


@functools.cache
def nobody_runs_python() -> bool:
    """Whether `nobody` may run this interpreter and read the checkout (not under /root, 700)."""
    if os.geteuid() != 0:
        return False
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import service"],
            cwd=REPO,
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            check=False,
        )
    except OSError:
        return False
    return probe.returncode == 0


as_root = pytest.mark.skipif(
    not nobody_runs_python(), reason="runs haki as `nobody`: needs root, and an interpreter nobody may run"
)


def haki(data_dir: Path, *args: str, user: int | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """`haki ARGS` on `data_dir`, as `user` if given (its HOME a fresh directory of its own)."""
    environment = server_env(data_dir, **env)
    environment.pop("XDG_RUNTIME_DIR", None)  # root's, which another user may not even stat
    run_as: dict[str, Any] = {}
    if user is not None:
        home = Path(tempfile.mkdtemp(prefix="haki-home-"))
        os.chown(home, user, user)
        environment.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
        run_as = {"user": user, "group": user, "extra_groups": []}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env=environment,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        **run_as,
    )


def one_line_refusal(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith("haki: "), line
    return line


def stop_if_running(data_dir: Path) -> None:
    if postmaster_pid(data_dir) is not None:
        stop_embedded_server(data_dir)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with scratch_data_dir("haki-dd-", stop_if_running) as path:
        yield path


def test_a_first_start_stopped_during_initdb_leaves_a_data_dir_the_next_start_makes(data_dir: Path) -> None:
    """SIGTERM (docker stop, a rollout) while the first start's initdb runs: initdb was killed
    and its half-made pgdata looked made (PG_VERSION): `database "postgres" does not exist` for
    ever, or no shared_buffers tuning. The next command must make a whole, tuned cluster."""
    command = [sys.executable, "-m", "service.cli", "serve", "--port", str(free_port())]
    proc = subprocess.Popen(
        [*command, "--log-level", "debug"],
        env=server_env(data_dir),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        seen.append(line)
        if "bin/initdb" in line:  # pgserver logs the command line, then runs it
            break
    else:
        raise AssertionError("initdb never ran:\n" + "".join(seen))
    time.sleep(INITDB_UNDER_WAY_SECONDS)
    proc.send_signal(signal.SIGTERM)
    seen.append(proc.communicate(timeout=60)[0])
    finished = [line for line in "".join(seen).splitlines() if "Successful postgres command" in line]
    assert not any("initdb" in line for line in finished), "initdb finished before the signal"

    res = haki(data_dir, "migrate")
    assert res.returncode == 0, res.stderr
    assert TUNING_MARK in (data_dir / "pgdata" / "postgresql.conf").read_text()
    assert not list(data_dir.glob(".pgdata-new-*"))


def test_the_leftover_of_an_interrupted_creation_is_named_with_what_to_do(tmp_path: Path) -> None:
    """What an older Haki left after such a stop: PG_VERSION, no database. A traceback of
    pg_ctl, or `database "postgres" does not exist`, before."""
    pgdata = tmp_path / "pgdata"
    (pgdata / "base" / "1").mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text(f"{PG_MAJOR}\n")
    line = one_line_refusal(haki(tmp_path, "migrate"))
    assert f"{pgdata} holds an unfinished PostgreSQL cluster" in line, line
    assert f"rm -r {pgdata}" in line, line
    assert (pgdata / "PG_VERSION").exists()  # nothing is removed for the operator


def test_a_pgdata_with_files_but_no_cluster_is_named(tmp_path: Path) -> None:
    (tmp_path / "pgdata" / "global").mkdir(parents=True)  # killed before initdb wrote PG_VERSION
    line = one_line_refusal(haki(tmp_path, "migrate"))
    assert "is not empty but holds no PostgreSQL cluster" in line, line


@as_root
def test_a_data_dir_this_user_may_not_write_is_one_line_exit_2() -> None:
    """An existing directory of another user (root's, mode 755): a PermissionError traceback."""
    root_owned = short_tmp_dir("haki-ro-")
    try:
        root_owned.chmod(0o755)
        line = one_line_refusal(haki(root_owned, "migrate", user=NOBODY))
        assert line.startswith(f"haki: HAKI_DATA_DIR={root_owned} cannot hold the embedded PostgreSQL"), line
    finally:
        shutil.rmtree(root_owned, ignore_errors=True)


@as_root
def test_a_data_dir_made_by_another_user_is_one_line_exit_2(data_dir: Path) -> None:
    """A first `sudo haki ...` made it (pgdata is pgserver's, mode 700); another user's
    `haki keys list` died in a traceback reading PG_VERSION."""
    assert haki(data_dir, "migrate").returncode == 0
    data_dir.chmod(0o755)
    line = one_line_refusal(haki(data_dir, "keys", "list", user=NOBODY))
    assert line.startswith(f"haki: HAKI_DATA_DIR={data_dir} cannot hold the embedded PostgreSQL"), line


@as_root
def test_another_user_runs_the_embedded_server_though_root_ran_one_first() -> None:
    """pgserver's lock file is one for the machine (here /tmp/.lockfile, root's once root ran
    pgserver): another user's `haki` died on it with a traceback. Haki's lock is the data
    directory's own."""
    machine_lock = Path(tempfile.gettempdir()) / ".lockfile"  # pgserver's, without a runtime dir
    if not machine_lock.exists():
        machine_lock.touch(mode=0o644)
    assert machine_lock.stat().st_uid != NOBODY and not machine_lock.stat().st_mode & 0o002
    own = short_tmp_dir("haki-nb-")
    try:
        os.chown(own, NOBODY, NOBODY)
        res = haki(own, "migrate", user=NOBODY)
        assert res.returncode == 0, res.stderr
        assert (own / "pgdata").stat().st_uid == NOBODY
        assert not (own / "pgdata" / "postmaster.pid").exists()  # the last handle stopped it
    finally:
        shutil.rmtree(own, ignore_errors=True)


def test_a_data_dir_removed_after_its_server_stopped_is_not_made_again_at_exit() -> None:
    """The throw-away servers of tests and benchmarks: stopped, their directory removed, then
    the process exits, and pgserver's exit hook took the data directory's lock again, which
    made the directory again (holding only the lock file)."""
    data_dir = short_tmp_dir("haki-gone-")
    code = (
        "import shutil, sys\n"
        "from pathlib import Path\n"
        "from service.db.embedded import embedded_server\n"
        "data_dir = Path(sys.argv[1])\n"
        "embedded_server(data_dir).cleanup()\n"
        "shutil.rmtree(data_dir)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(data_dir)],
            env=server_env(data_dir),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert not data_dir.exists(), sorted(p.name for p in data_dir.iterdir())
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
