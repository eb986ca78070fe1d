"""`Idempotency-Key` on POST /v1/facts and POST /v1/events.

A retry with the same key and the same body gets the first response back (same ids, same status)
and writes nothing; the same key with another body is a 409 `conflict`. Keys are scoped per
project and live `HAKI_IDEMPOTENCY_TTL_SECONDS` (default 24 h) from the first write.

The record is claimed, filled and committed in the transaction of the write itself, so a
committed write always has its record and two concurrent retries cannot both write: the second
blocks on the first's claim, then replays what the first committed. Only successful responses are
recorded: a failed request wrote nothing, so its retry runs again.

The embedder runs before that transaction begins (`prepare`), never inside it: a batch whose
embedding outlasted idle_in_transaction_session_timeout (60 s) was killed with its claim, and every
retry failed the same way. Two concurrent retries may both embed; only one writes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import msgspec

from service.api.auth import Principal
from service.db import Lent
from service.errors import IDEMPOTENCY_KEY_IN_PROGRESS, Conflict, IdempotencyKeyReused
from service.repository import Conn
from service.repository import idempotency as idempotency_repo
from service.repository import lifecycle as lifecycle_repo
from service.settings import Settings

T = TypeVar("T", bound=msgspec.Struct)
P = TypeVar("P")

MAX_KEY_CHARS = 255
# Expired records of the project deleted per claim: enough to keep up with any write rate that
# claims keys, small enough to cost nothing on the write path.
PURGE_BATCH = 100


class Outcome(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    body: T
    status_code: int
    replayed: bool


def request_digest(route: str, request: msgspec.Struct) -> bytes:
    """Canonical form, so a retry that re-serialises the same request (key order) still matches."""
    canonical = msgspec.json.encode(request, order="deterministic")
    return hashlib.sha256(route.encode() + b"\n" + canonical).digest()


async def _replay(
    conn: Conn, project_id: str, key: str, digest: bytes, response_type: type[T]
) -> Outcome[T] | None:
    stored = await idempotency_repo.find_idempotent_response(conn, project_id, key)
    if stored is None:
        return None
    stored_digest, status_code, response = stored
    if stored_digest != digest:
        raise IdempotencyKeyReused(
            "This Idempotency-Key was already used with another request body.",
            idempotency_key=key,
        )
    return Outcome(body=msgspec.convert(response, response_type), status_code=status_code, replayed=True)


async def run_once(
    lent: Lent,
    settings: Settings,
    principal: Principal,
    *,
    project_id: str,
    subject_id: str,
    key: str | None,
    route: str,
    request: msgspec.Struct,
    status_code: int,
    response_type: type[T],
    prepare: Callable[[], Awaitable[P]],
    write: Callable[[P], Awaitable[T]],
) -> Outcome[T]:
    """`prepare` (checks, embedding) runs outside any transaction; `write(prepared)` inside the
    one that claims the key, on the connection `lent` holds then. The record keeps the write's
    scope (`subject_id`), where an erasure of it looks."""
    # Before any lookup: another project's key must not replay this project's responses.
    principal.require(project_id)
    if key is None:
        return Outcome(body=await write(await prepare()), status_code=status_code, replayed=False)
    digest = request_digest(route, request)
    # The common retry is answered from the record, before any embedding or lock.
    replay = await _replay(lent.conn, project_id, key, digest, response_type)
    if replay is not None:
        return replay
    prepared = await prepare()
    conn = lent.conn
    async with conn.transaction():
        # The scope's lock before the records' rows, as the write takes it first (its store takes
        # it again, at no cost): an erasure deletes records too.
        await lifecycle_repo.share_erasure_scope(conn, project_id, subject_id)
        await idempotency_repo.purge_idempotency_keys(conn, project_id, PURGE_BATCH)
        claimed = await idempotency_repo.claim_idempotency_key(
            conn, project_id, subject_id, key, digest, float(settings.idempotency_ttl_seconds)
        )
        if not claimed:
            # A concurrent request with this key committed first; its record is now visible.
            replay = await _replay(conn, project_id, key, digest, response_type)
            if replay is None:
                raise Conflict(
                    "A request with this Idempotency-Key is in progress; retry.",
                    idempotency_key=key,
                    reason=IDEMPOTENCY_KEY_IN_PROGRESS,
                )
            return replay
        body = await write(prepared)
        await idempotency_repo.store_idempotent_response(conn, project_id, key, status_code, body)
    return Outcome(body=body, status_code=status_code, replayed=False)
