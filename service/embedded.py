"""The embedded PostgreSQL 18 + pgvector used when HAKI_DATABASE_URL is unset.

`pgserver.get_server` starts the server, or joins the one already running on the same data
directory (it keeps a cross-process handle list), so two `haki` processes share one server.
"""

from __future__ import annotations

import logging
import urllib.parse
from pathlib import Path
from typing import Any

log = logging.getLogger("haki.embedded")

# Handles stay referenced for the life of the process: dropping the last one stops the server.
_SERVERS: dict[Path, Any] = {}


def embedded_server(data_dir: Path) -> Any:
    from pgserver.postgres_server import get_server

    pgdata = (data_dir / "pgdata").expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = _SERVERS.get(pgdata)
    if server is None:
        log.info("starting or joining the embedded PostgreSQL in %s", pgdata)
        server = get_server(pgdata, cleanup_mode="stop")
        _SERVERS[pgdata] = server
    return server


def embedded_url(data_dir: Path, database: str = "postgres") -> str:
    uri: str = embedded_server(data_dir).get_uri()
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database))
