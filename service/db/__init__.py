"""The database layer: the pools (`pools.py`) and one context call's run against them
(`call_runner.py`). Everything `from service.db import ...` names lives in pools.py."""

from service.db.pools import (
    Acquire,
    Lent,
    connect,
    create_pool,
    create_read_pool,
    database_url,
    init_connection,
    keep_session,
    server_settings,
)

__all__ = [
    "Acquire",
    "Lent",
    "connect",
    "create_pool",
    "create_read_pool",
    "database_url",
    "init_connection",
    "keep_session",
    "server_settings",
]
