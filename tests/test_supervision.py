"""`haki serve` in embedded mode supervises its PostgreSQL.

Real `haki serve` processes (tests/helpers/server.py) on data directories of their own: the
postmaster is killed with SIGKILL under a running service, which must restart it and serve again,
counting the restart in /metrics; and a `haki serve` killed with SIGKILL must not leave its pid in
pgserver's handle list, where it kept PostgreSQL running after the next clean exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from service.db.embedded import restart_backoff_seconds
from tests.helpers import METRICS_AUTH
from tests.helpers.server import (
    free_port,
    postmaster_pid,
    scratch_data_dir,
    server_env,
    spawn_serve,
    stop_process,
)

pytestmark = [pytest.mark.slow, pytest.mark.integration]
PROJECT = "proj-supervised"
# The supervisor looks every second and a restart took 0.3 s here; generous for a busy machine.
RECOVERY_SECONDS = 30.0


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with scratch_data_dir("haki-sup-", quit_postmaster) as path:
        yield path


def quit_postmaster(data_dir: Path) -> None:
    """Never leaves a server behind, whatever state the test left it in (immediate shutdown)."""
    postmaster = postmaster_pid(data_dir)
    if postmaster is not None and psutil.pid_exists(postmaster):
        os.kill(postmaster, signal.SIGQUIT)
        wait_gone(postmaster, 30)


def wait_gone(pid: int, timeout: float) -> bool:
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def wait_dead(pid: int, timeout: float) -> bool:
    """Whether `pid` has exited within `timeout`, reaped or not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def serve(data_dir: Path, name: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log = data_dir / f"{name}.log"
    proc = spawn_serve(server_env(data_dir, HAKI_RATE_LIMIT_PER_MINUTE="0"), port, log)
    return proc, f"http://127.0.0.1:{port}", log


def create_key(data_dir: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "keys", "create", PROJECT],
        env=server_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def supervisor_lines(log: Path) -> str:
    return "\n".join(line for line in log.read_text(errors="replace").splitlines() if "haki.embedded" in line)


def restarts_counted(url: str) -> float:
    text = httpx.get(f"{url}/metrics", headers=METRICS_AUTH, timeout=10).text
    for line in text.splitlines():
        if line.startswith("haki_embedded_postgres_restarts_total "):
            return float(line.split()[1])
    raise AssertionError("haki_embedded_postgres_restarts_total is not in /metrics")


def wait_counted(url: str, expected: float, timeout: float) -> float:
    """The restart count once it reaches `expected` (or what it is at the deadline)."""
    deadline = time.monotonic() + timeout
    while (counted := restarts_counted(url)) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return counted


def kill_and_recover(data_dir: Path, url: str, log: Path) -> None:
    """Writes a fact, kills the postmaster with SIGKILL, and asserts that the service serves the
    fact again on a new postmaster, writes again, and counted one restart."""
    key = create_key(data_dir)
    auth = {"Authorization": f"Bearer {key}"}
    body = {"project_id": PROJECT, "subject_id": "s", "facts": [{"content": "written before the crash"}]}
    r = httpx.post(f"{url}/v1/facts", json=body, headers=auth, timeout=30)
    assert r.status_code == 201, r.text

    killed = postmaster_pid(data_dir)
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    assert wait_dead(killed, 10)  # a zombie until its parent reaps it

    deadline = time.monotonic() + RECOVERY_SECONDS
    statuses: list[int | str] = []
    while True:
        try:
            r = httpx.get(f"{url}/v1/facts", params={"project_id": PROJECT}, headers=auth, timeout=5)
            statuses.append(r.status_code)
            if r.status_code == 200:
                break
        except httpx.HTTPError as exc:
            statuses.append(repr(exc))
        assert time.monotonic() < deadline, (
            f"no recovery within {RECOVERY_SECONDS}s: {statuses[-5:]}\n{supervisor_lines(log)}"
        )
        time.sleep(0.2)
    assert wait_gone(killed, 10)
    assert [f["content"] for f in r.json()["facts"]] == ["written before the crash"]
    assert postmaster_pid(data_dir) not in (None, killed)
    r = httpx.post(f"{url}/v1/facts", json=body, headers=auth, timeout=30)
    assert r.status_code == 201, r.text
    # The server accepts connections a little before `pg_ctl -w start` returns to the
    # supervisor, which counts the restart then: requests can succeed first (CI on 3d43365
    # read 0 right after them), so the count is awaited, and must not pass 1.
    assert wait_counted(url, 1, RECOVERY_SECONDS) == 1, supervisor_lines(log)
    assert "embedded PostgreSQL: running again" in log.read_text(errors="replace")


def test_a_killed_postmaster_is_restarted_and_the_service_serves_again(data_dir: Path) -> None:
    proc, url, log = serve(data_dir, "serve")
    try:
        kill_and_recover(data_dir, url, log)
    finally:
        stop_process(proc)
    # A clean exit still stops the restarted server.
    restarted = postmaster_pid(data_dir)
    assert restarted is None or wait_gone(restarted, 30)


# Starts what follows it as a child subreaper (prctl PR_SET_CHILD_SUBREAPER, kept across execve):
# orphans below it are re-parented to it, as they are to PID 1 in a container.
SUBREAPER = """#!{python}
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d" % ctypes.get_errno())
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def test_a_serve_that_adopts_its_postmaster_reaps_it_and_restarts_it(data_dir: Path, tmp_path: Path) -> None:
    """`haki serve` as the Containerfile runs it, PID 1 of its container: pg_ctl leaves the
    postmaster to it, so the killed postmaster is its zombie, which nothing else reaps. Here it is
    a child subreaper, which adopts orphans as PID 1 does. Before, the supervisor waited for a reap
    that never came ("not reaped yet", attempt after attempt) and the service answered 503."""
    launcher = tmp_path / "subreaper"
    launcher.write_text(SUBREAPER.format(python=sys.executable))
    launcher.chmod(0o755)
    port = free_port()
    log = data_dir / "serve.log"
    env = server_env(data_dir, HAKI_RATE_LIMIT_PER_MINUTE="0")
    proc = spawn_serve(env, port, log, python=str(launcher))
    try:
        postmaster = postmaster_pid(data_dir)
        assert postmaster is not None
        assert psutil.Process(postmaster).ppid() == proc.pid, "the serve did not adopt its postmaster"
        kill_and_recover(data_dir, f"http://127.0.0.1:{port}", log)
        assert psutil.Process(postmaster_pid(data_dir) or 0).ppid() == proc.pid
    finally:
        stop_process(proc)
    restarted = postmaster_pid(data_dir)
    assert restarted is None or wait_gone(restarted, 30)


def test_a_crashed_serve_does_not_keep_postgres_running_after_the_next_clean_exit(data_dir: Path) -> None:
    crashed, _, _ = serve(data_dir, "first")
    crashed.kill()  # SIGKILL: no atexit, its pid stays in pgserver's handle list
    crashed.wait(timeout=10)
    handles = data_dir / "pgdata" / ".handle_pids.json"
    assert crashed.pid in json.loads(handles.read_text())
    postmaster = postmaster_pid(data_dir)
    assert postmaster is not None and psutil.pid_exists(postmaster)  # orphaned, still running

    second, url, log = serve(data_dir, "second")
    assert crashed.pid not in json.loads(handles.read_text())
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    stop_process(second)
    # The second process held the last handle: its clean exit stops PostgreSQL.
    assert wait_gone(postmaster, 30), "PostgreSQL outlived the last haki process"
    assert "forgot the handles of 1 exited process(es)" in log.read_text(errors="replace")


def test_the_last_serve_out_stops_postgres_though_the_other_was_killed(data_dir: Path) -> None:
    """Two serves share the server; one is killed (its pid stays in the handle list), the other
    stops cleanly: it is the last one, and PostgreSQL must stop with it. The dead pid was cleared
    only at a start, so PostgreSQL ran on with no `haki` process left."""
    killed, _, _ = serve(data_dir, "first")
    last, _, log = serve(data_dir, "second")
    postmaster = postmaster_pid(data_dir)
    assert postmaster is not None
    killed.kill()
    killed.wait(timeout=10)
    assert stop_process(last) == 0, log.read_text(errors="replace")
    assert wait_gone(postmaster, 30), "PostgreSQL outlived the last haki process"


def test_restart_backoff_doubles_up_to_its_bound() -> None:
    waits = [restart_backoff_seconds(n) for n in range(1, 10)]
    assert waits[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(waits) == 30.0 and waits == sorted(waits)
