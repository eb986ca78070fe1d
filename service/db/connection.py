"""The connection class of every connection Haki opens (service/db/pools.py): asyncpg's, whose
client-side wait follows a longer statement timeout (service/repository/base.py long_transaction)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import asyncpg

# How much longer than a statement's own timeout the client waits for its answer: the server
# cancels a slow statement first (a 503 that names it); the client's wait catches a server that
# stopped answering at all.
CLIENT_GRACE_SECONDS: Final = 5.0
# The same for the read replica's pool (service/db/replica.py): a read whose wait runs out there
# runs again on the primary, so the client need not wait long for the server's own cancel.
STANDBY_CLIENT_GRACE_SECONDS: Final = 1.0


def _bounded(name: str) -> Callable[..., Awaitable[Any]]:
    """asyncpg's `name` (fetch, execute, ...), waiting the connection's client timeout when the
    caller gives none (aiosql never does)."""
    plain = getattr(asyncpg.Connection, name)

    # asyncpg's own keyword, kept: callers that pass a timeout get exactly theirs.
    async def bounded(self: HakiConnection, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:  # noqa: ASYNC109
        return await plain(self, *args, timeout=self.client_timeout if timeout is None else timeout, **kwargs)

    bounded.__name__ = bounded.__qualname__ = name
    return bounded


class HakiConnection(asyncpg.Connection):  # type: ignore[misc]
    """Every connection Haki opens. A transaction that raises its statement_timeout
    (repository.base.long_transaction) raises the client's wait with it: asyncpg's
    `command_timeout` would otherwise cancel the statement the server still allows."""

    client_timeout: float | None = None  # None: the pool's command_timeout

    def set_client_timeout(self, seconds: float | None) -> None:
        """Called on a pool's proxy too, which forwards methods but not attribute writes."""
        self.client_timeout = seconds

    fetch = _bounded("fetch")
    fetchrow = _bounded("fetchrow")
    fetchval = _bounded("fetchval")
    execute = _bounded("execute")
    executemany = _bounded("executemany")
