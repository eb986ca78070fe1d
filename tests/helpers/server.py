"""A real `haki serve` in a subprocess, for tests that need a listening server (SDK, browser).

Each server gets its own data directory, so its embedded PostgreSQL is its own too, and the hash
embedder, so it starts in seconds without the model.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.helpers import METRICS_TOKEN

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Server:
    url: str
    data_dir: Path
    env: dict[str, str]
    log: Path

    def cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """`python -m service.cli ARGS` against this server's data directory."""
        return run_python(["-m", "service.cli", *args], env=self.env, timeout=timeout)

    def create_key(self, project_id: str) -> str:
        return new_key(self.env, project_id)


def run_python(
    args: Sequence[str], cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` with this interpreter, its output captured as text; the caller checks how it ended."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def succeeded(done: subprocess.CompletedProcess[str]) -> str:
    """The standard output of a process that must have exited 0 (its standard error shown when not)."""
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_key(env: dict[str, str], project_id: str) -> str:
    """A new API key of `project_id`, made by `haki keys create` with the environment `env`."""
    return succeeded(run_python(["-m", "service.cli", "keys", "create", project_id], env=env)).strip()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def short_tmp_dir(prefix: str) -> Path:
    """A new data dir under HAKI_TEST_TMP or the temp dir: PostgreSQL's socket path is limited to
    ~100 bytes, so keep it short."""
    base = Path(os.environ.get("HAKI_TEST_TMP", tempfile.gettempdir()))
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def stop_embedded_server(data_dir: Path) -> None:
    """Stops the embedded PostgreSQL of `data_dir` through pgserver, the way Haki started it."""
    from service.db.embedded import embedded_server  # pgserver: only where a test stops a server

    embedded_server(data_dir).cleanup()


@contextmanager
def scratch_data_dir(prefix: str, stop: Callable[[Path], object] = stop_embedded_server) -> Iterator[Path]:
    """A new short data dir (short_tmp_dir) for an embedded server; on the way out `stop` ends
    the server it holds, and the dir is removed."""
    path = short_tmp_dir(prefix)
    try:
        yield path
    finally:
        stop(path)
        shutil.rmtree(path, ignore_errors=True)


def postmaster_pid(data_dir: Path) -> int | None:
    """The pid that the data dir's postmaster.pid names (None: no server has it)."""
    try:
        return int((data_dir / "pgdata" / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a test's server: none of the caller's HAKI_ settings, the hash embedder
    unless `extra` says otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    return {
        **env,
        "HAKI_DATA_DIR": str(data_dir),
        "HAKI_EMBED_PROVIDER": "hash",
        "HAKI_METRICS_TOKEN": METRICS_TOKEN,
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
    """Sends `sig` (SIGTERM: uvicorn shuts down, the embedded PostgreSQL stops with the last
    handle), waits, kills what is left; the exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode


def _log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def spawn_serve(
    env: dict[str, str],
    port: int,
    log: Path,
    *serve_args: str,
    timeout: float = START_TIMEOUT_SECONDS,
    python: str = sys.executable,
    checkout: Path = REPO,
) -> subprocess.Popen[bytes]:
    """`haki serve` on 127.0.0.1:PORT with its output in LOG, returned once /healthz answers 200.
    Shared by the tests and the benchmarks that need a real server (benchmarks/http_latency.py,
    benchmarks/load.py; benchmarks/http_ab.py serves another checkout with its own `python`); a
    server that exits or stays unhealthy raises with its log's tail."""
    with log.open("wb") as out:
        command = [python, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
        proc = subprocess.Popen(
            [*command, *serve_args],
            cwd=checkout,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"haki serve exited with {proc.returncode}:\n{_log_tail(log)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            stop_process(proc)
            raise RuntimeError(f"haki serve not ready after {timeout}s:\n{_log_tail(log)}")
        time.sleep(0.2)


@contextmanager
def running_server(data_dir: Path, **extra_env: str) -> Iterator[Server]:
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = server_env(data_dir, **extra_env)
    log = data_dir / "serve.log"
    proc = spawn_serve(env, port, log)
    server = Server(url=f"http://127.0.0.1:{port}", data_dir=data_dir, env=env, log=log)
    try:
        yield server
    finally:
        stop_process(proc)
