"""`pip install .` gives a working server with no checkout beside it.

The wheel is built from the checkout, must carry every file the service reads at run time, and is
installed with its dependencies (and nothing else from the checkout: not the SDK) into a fresh
virtualenv. Its `haki` then runs from an empty directory, with none of the caller's HAKI_ settings
and no PYTHONPATH, on its default (local) embedder: a key, `haki serve`, a fact written and served
back in a context packet, and a SIGTERM that stops the embedded PostgreSQL with the server.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.helpers.server import REPO, free_port, postmaster_pid, short_tmp_dir, stop_process

# queries/ and migrations/ stay top-level in the checkout; the wheel carries them inside the
# package (pyproject.toml, [tool.hatch.build.targets.wheel.force-include]).
FORCE_INCLUDED = ("queries", "migrations")
# The bundled model loads through torch on first start (no ONNX Runtime in a bare install).
START_TIMEOUT_SECONDS = 300.0
STOP_TIMEOUT_SECONDS = 60.0
# The interpreter's settings that would let the checkout or another environment leak in.
LEAKY_VARIABLES = frozenset({"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONUSERBASE"})


def run(
    command: list[str], timeout: float, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def shipped_files() -> set[str]:
    """What the wheel must hold, from the checkout as it is: every file under service/ (modules,
    templates, prompts, word lists) and queries/ and migrations/ under service/."""
    caches = {"__pycache__"}
    expected = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "service").rglob("*")
        if p.is_file() and not caches & set(p.parts) and p.suffix != ".pyc"
    }
    for top in FORCE_INCLUDED:
        expected |= {
            f"service/{p.relative_to(REPO).as_posix()}" for p in (REPO / top).rglob("*") if p.is_file()
        }
    return expected


def torch_requirement() -> str:
    """The project's own torch pin (scripts/setup.sh installs it from TORCH_INDEX_URL first)."""
    dependencies: list[str] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d for d in dependencies if re.match(r"torch\s*[<>=!~]", d))


def install_env() -> dict[str, str]:
    """pip's own settings (PIP_*, its config files, its cache) stay; the checkout's Python does not."""
    return {k: v for k, v in os.environ.items() if k not in LEAKY_VARIABLES}


def clean_env(venv: Path, data_dir: Path) -> dict[str, str]:
    """What a user's shell gives `haki`: no HAKI_ setting but the data dir (so no
    HAKI_DATABASE_URL: the embedded PostgreSQL), no PYTHONPATH, no user site-packages, and no PATH
    entry into the checkout."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(REPO))]
    env = {k: v for k, v in install_env().items() if not k.startswith("HAKI_")}
    return {
        **env,
        "PATH": os.pathsep.join([str(venv / "bin"), *path]),
        "HAKI_DATA_DIR": str(data_dir),
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def log_tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        # The server's own output is the message: a missing module or file names itself there.
        assert proc.poll() is None, (
            f"the installed `haki serve` exited with {proc.returncode}:\n{log_tail(log)}"
        )
        try:
            if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, (
            f"`haki serve` not healthy after {START_TIMEOUT_SECONDS}s:\n{log_tail(log)}"
        )
        time.sleep(0.2)


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@contextmanager
def data_dir() -> Iterator[Path]:
    """A short data dir (the socket path limit); on the way out a postmaster the test failed to
    stop gets PostgreSQL's fast shutdown (SIGINT) by its pid, then the dir goes."""
    path = short_tmp_dir("haki-whl-")
    try:
        yield path
    finally:
        pid = postmaster_pid(path)
        if pid is not None and running(pid):
            os.kill(pid, signal.SIGINT)
            wait_until(lambda: not running(pid), STOP_TIMEOUT_SECONDS)
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(900)
def test_the_installed_wheel_serves_without_the_checkout(tmp_path: Path) -> None:
    timings: dict[str, float] = {}

    # Build: pip's isolated build fetches hatchling, as `pip install .` would.
    dist = tmp_path / "dist"
    started = time.monotonic()
    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(REPO)],
        300,
        env=install_env(),
    )
    timings["build"] = time.monotonic() - started
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("haki-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = sorted(shipped_files() - names)
    assert not missing, f"the wheel lacks files the service reads at run time: {missing}"
    # Nothing else from the checkout (tests, the SDK, scripts) rides along.
    stray = sorted(
        n for n in names if not (n.startswith("service/") or n.split("/")[0].endswith(".dist-info"))
    )
    assert not stray, f"the wheel ships files outside the package: {stray}"

    # Install: a bare venv, the wheel and what it declares; pip's cache is reused.
    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", str(venv)], 120, env=install_env())
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    started = time.monotonic()
    if index := os.environ.get("TORCH_INDEX_URL"):
        # As scripts/setup.sh: PyPI alone resolves Linux x86_64 torch to the CUDA build.
        torch = run(
            [python, "-m", "pip", "install", "--index-url", index, torch_requirement()],
            600,
            env=install_env(),
        )
        assert torch.returncode == 0, torch.stdout[-3000:] + torch.stderr[-3000:]
    installed = run([python, "-m", "pip", "install", str(wheel)], 800, env=install_env())
    timings["install"] = time.monotonic() - started
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    work = tmp_path / "elsewhere"  # the working directory: nothing importable, far from the checkout
    work.mkdir()
    haki = str(venv / "bin" / "haki")
    with data_dir() as data:
        env = clean_env(venv, data)
        where = run([python, "-c", "import service; print(service.__file__)"], 60, cwd=work, env=env)
        assert where.returncode == 0, where.stderr
        assert Path(where.stdout.strip()).is_relative_to(venv), f"`service` came from {where.stdout.strip()}"

        created = run([haki, "keys", "create", "proj"], 180, cwd=work, env=env)
        assert created.returncode == 0, created.stdout + created.stderr
        key = created.stdout.strip()
        assert key.startswith("hk_"), created.stdout

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = tmp_path / "serve.log"
        started = time.monotonic()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [haki, "serve", "--host", "127.0.0.1", "--port", str(port)],
                cwd=work,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_healthy(proc, url, log)
            timings["start"] = time.monotonic() - started
            postmaster = postmaster_pid(data)
            assert postmaster is not None and running(postmaster), "no embedded PostgreSQL under the data dir"

            auth = {"Authorization": f"Bearer {key}"}
            scope = {"project_id": "proj", "subject_id": "user-1"}
            content = "Alice is allergic to peanuts."
            wrote = httpx.post(
                f"{url}/v1/facts", headers=auth, json={**scope, "facts": [{"content": content}]}, timeout=60
            )
            assert wrote.status_code == 201, wrote.text
            asked = httpx.post(
                f"{url}/v1/context",
                headers=auth,
                json={**scope, "query": "What is Alice allergic to?", "budget_tokens": 500},
                timeout=60,
            )
            assert asked.status_code == 200, asked.text
            assert content in [f["content"] for f in asked.json()["facts"]], asked.text
            # A Jinja template and the docs' vendored assets, from the installed packages.
            for page in ("/ui/login", "/docs/assets/swagger-ui.css"):
                got = httpx.get(f"{url}{page}", timeout=30)
                assert got.status_code == 200, f"{page}: {got.status_code}\n{log_tail(log)}"
        finally:
            code = stop_process(proc, timeout=STOP_TIMEOUT_SECONDS)
        assert code == 0, f"`haki serve` exited with {code} on SIGTERM:\n{log_tail(log)}"
        # The last handle is gone: pgserver stops PostgreSQL, which removes its postmaster.pid.
        assert wait_until(lambda: postmaster_pid(data) is None, STOP_TIMEOUT_SECONDS), (
            f"the embedded PostgreSQL outlived `haki serve`:\n{log_tail(log)}"
        )

    print("wheel: " + ", ".join(f"{step} {seconds:.1f} s" for step, seconds in timings.items()))
    # 1.7 GB (torch); pytest keeps its last three temp dirs, so a failed run's venv stays to look at.
    shutil.rmtree(venv, ignore_errors=True)
