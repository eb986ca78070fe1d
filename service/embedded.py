"""The embedded PostgreSQL 18 + pgvector used when HAKI_DATABASE_URL is unset.

`pgserver.get_server` starts the server, or joins the one already running on the same data
directory (it keeps a cross-process handle list), so two `haki` processes share one server.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from pathlib import Path
from typing import Any

log = logging.getLogger("haki.embedded")

# Handles stay referenced for the life of the process: dropping the last one stops the server.
_SERVERS: dict[Path, Any] = {}


def shared_buffers_mb() -> int:
    """An eighth of the RAM, within [128 MB, 2 GB]. initdb's 128 MB does not even hold the HNSW
    index of 100k facts (200 MB), and every context call walks it: on a 106k-fact table, 2 GB cut
    the backend CPU of a call by 31 % (docs/performance.md)."""
    try:
        ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError, AttributeError):
        return 128
    return int(min(2048, max(128, ram_mb // 8)))


def _tuned_server_class() -> Any:
    from pgserver.postgres_server import PostgresServer

    class TunedServer(PostgresServer):
        """pgserver's server, plus Haki's settings written into a data directory it creates
        (before the first start, so no restart); an existing directory keeps its own."""

        def ensure_pgdata_inited(self) -> None:
            fresh = not (self.pgdata / "PG_VERSION").exists()
            super().ensure_pgdata_inited()
            if fresh:
                tuning = f"\n# Haki (service/embedded.py)\nshared_buffers = '{shared_buffers_mb()}MB'\n"
                with (self.pgdata / "postgresql.conf").open("a", encoding="utf-8") as conf:
                    conf.write(tuning)

    return TunedServer


def embedded_server(data_dir: Path) -> Any:
    from pgserver.postgres_server import PostgresServer, get_server

    pgdata = (data_dir / "pgdata").expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = _SERVERS.get(pgdata)
    if server is None:
        log.info("starting or joining the embedded PostgreSQL in %s", pgdata)
        if pgdata in PostgresServer._instances or (pgdata / "PG_VERSION").exists():
            server = get_server(pgdata, cleanup_mode="stop")
        else:  # get_server, with the tuning written between initdb and the first start
            pgdata.mkdir(exist_ok=True)
            server = _tuned_server_class()(pgdata, cleanup_mode="stop")
        _SERVERS[pgdata] = server
    return server


def embedded_url(data_dir: Path, database: str = "postgres") -> str:
    uri: str = embedded_server(data_dir).get_uri()
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database))
