"""The keyset cursors of the list routes (docs/spec/api.md: a cursor this route did not issue is
a 422). A cursor is the url-safe base64 of a one-byte tag naming the kind of row it pages
(facts, events, subjects, conflict sets) and the last row's key, so one route's cursor never
pages another.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime, timedelta
from typing import Final, Literal
from uuid import UUID

from service.errors import InvalidInput
from service.scope_id import SCOPE_ID_MAX_BYTES, scope_id_problem

CursorKind = Literal["facts", "events", "subjects", "conflicts"]
_TAGS: Final[dict[CursorKind, bytes]] = {"facts": b"f", "events": b"e", "subjects": b"s", "conflicts": b"c"}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def _encode(kind: CursorKind, key: bytes) -> str:
    return base64.urlsafe_b64encode(_TAGS[kind] + key).rstrip(b"=").decode()


# The longest cursor GET /v1/subjects issues: a subject id of SCOPE_ID_MAX_BYTES (1,068
# characters); a route's bound on its cursor parameter must admit it.
SUBJECT_CURSOR_MAX_CHARS: Final = len(_encode("subjects", bytes(SCOPE_ID_MAX_BYTES)))


def _refused() -> InvalidInput:
    return InvalidInput("cursor", "is not a cursor returned by this endpoint")


def _decode(kind: CursorKind, cursor: str) -> bytes:
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _refused() from exc
    if raw[:1] != _TAGS[kind]:
        raise _refused()
    return raw[1:]


def encode_id_cursor(kind: Literal["facts", "events"], last_id: UUID) -> str:
    return _encode(kind, last_id.bytes)


def decode_id_cursor(kind: Literal["facts", "events"], cursor: str) -> UUID:
    key = _decode(kind, cursor)
    if len(key) != 16:
        raise _refused()
    return UUID(bytes=key)


def encode_subject_cursor(subject_id: str) -> str:
    return _encode("subjects", subject_id.encode())


def decode_subject_cursor(cursor: str) -> str:
    """The subject id after which the page starts; a scope id, or the cursor is refused (a NUL
    would otherwise reach PostgreSQL's text)."""
    try:
        subject_id = _decode("subjects", cursor).decode()
    except UnicodeDecodeError as exc:
        raise _refused() from exc
    if scope_id_problem(subject_id) is not None:
        raise _refused()
    return subject_id


def encode_conflict_cursor(created_at: datetime, conflict_set_id: UUID) -> str:
    """The last set of a page of conflict sets (newest first): its creation, to the microsecond
    PostgreSQL keeps, then its id, which orders the sets created at the same instant."""
    micros = (created_at - _EPOCH) // _MICROSECOND
    return _encode("conflicts", micros.to_bytes(8, "big", signed=True) + conflict_set_id.bytes)


def decode_conflict_cursor(cursor: str) -> tuple[datetime, UUID]:
    key = _decode("conflicts", cursor)
    if len(key) != 24:
        raise _refused()
    try:
        created_at = _EPOCH + int.from_bytes(key[:8], "big", signed=True) * _MICROSECOND
    except OverflowError as exc:
        raise _refused() from exc
    return created_at, UUID(bytes=key[8:])
