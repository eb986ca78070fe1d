"""The keyset cursors of the list routes (docs/spec/api.md: a cursor this route did not issue is
a 422). A cursor is the url-safe base64 of a one-byte tag naming the kind of row it pages
(facts, events, subjects, conflict sets), a digest of its listing (the project and the filters of
the request that issued it) and the last row's key, so one route's cursor never pages another,
nor the same route with another project or filter.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Final, Literal
from uuid import UUID

import msgspec

from service.errors import InvalidInput
from service.scope_id import SCOPE_ID_MAX_BYTES, scope_id_problem

CursorKind = Literal["facts", "events", "subjects", "conflicts"]
_TAGS: Final[dict[CursorKind, bytes]] = {"facts": b"f", "events": b"e", "subjects": b"s", "conflicts": b"c"}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_DIGEST_BYTES: Final = 6

# What a page was listed from: the project, then the request's filters in the route's order
# (None for an absent one).
Listing = tuple[str | None, ...]


def _digest(listing: Listing) -> bytes:
    # JSON keeps ("a", None) and ("a", "") apart; a check that the cursor is reused as issued,
    # not a secret: every list statement scopes to the caller's project anyway.
    return hashlib.blake2b(msgspec.json.encode(listing), digest_size=_DIGEST_BYTES).digest()


def _encode(kind: CursorKind, listing: Listing, key: bytes) -> str:
    return base64.urlsafe_b64encode(_TAGS[kind] + _digest(listing) + key).rstrip(b"=").decode()


# The longest cursor GET /v1/subjects issues: a subject id of SCOPE_ID_MAX_BYTES (1,076
# characters); a route's bound on its cursor parameter must admit it.
SUBJECT_CURSOR_MAX_CHARS: Final = len(_encode("subjects", (), bytes(SCOPE_ID_MAX_BYTES)))


def _refused() -> InvalidInput:
    return InvalidInput("cursor", "is not a cursor returned by this endpoint")


def _decode(kind: CursorKind, listing: Listing, cursor: str) -> bytes:
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _refused() from exc
    head = _TAGS[kind] + _digest(listing)
    if raw[: len(head)] != head:
        raise _refused()
    return raw[len(head) :]


def encode_id_cursor(kind: Literal["facts", "events"], listing: Listing, last_id: UUID) -> str:
    return _encode(kind, listing, last_id.bytes)


def decode_id_cursor(kind: Literal["facts", "events"], listing: Listing, cursor: str) -> UUID:
    key = _decode(kind, listing, cursor)
    if len(key) != 16:
        raise _refused()
    return UUID(bytes=key)


def encode_subject_cursor(listing: Listing, subject_id: str) -> str:
    return _encode("subjects", listing, subject_id.encode())


def decode_subject_cursor(listing: Listing, cursor: str) -> str:
    """The subject id after which the page starts; a scope id, or the cursor is refused (a NUL
    would otherwise reach PostgreSQL's text)."""
    try:
        subject_id = _decode("subjects", listing, cursor).decode()
    except UnicodeDecodeError as exc:
        raise _refused() from exc
    if scope_id_problem(subject_id) is not None:
        raise _refused()
    return subject_id


def encode_conflict_cursor(listing: Listing, created_at: datetime, conflict_set_id: UUID) -> str:
    """The last set of a page of conflict sets (newest first): its creation, to the microsecond
    PostgreSQL keeps, then its id, which orders the sets created at the same instant."""
    micros = (created_at - _EPOCH) // _MICROSECOND
    return _encode("conflicts", listing, micros.to_bytes(8, "big", signed=True) + conflict_set_id.bytes)


def decode_conflict_cursor(listing: Listing, cursor: str) -> tuple[datetime, UUID]:
    key = _decode("conflicts", listing, cursor)
    if len(key) != 24:
        raise _refused()
    try:
        created_at = _EPOCH + int.from_bytes(key[:8], "big", signed=True) * _MICROSECOND
    except OverflowError as exc:
        raise _refused() from exc
    return created_at, UUID(bytes=key[8:])
