"""The one rule of an instant Haki stores or compares with a stored one (docs/spec/api.md,
limits): years 1..9999 in UTC, strictly between PostgreSQL's -infinity and infinity.

asyncpg sends timestamps in UTC and encodes 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z
as -infinity and infinity, which read back as naive datetimes: neither would be the instant
written, so both are refused, by writes and by `as_of` alike.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from service.errors import InvalidInput

_INFINITE: Final = (datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC))
OUT_OF_RANGE: Final = (
    "is out of range: after 0001-01-01T00:00:00Z and before 9999-12-31T23:59:59.999999Z in UTC"
)


def storable_utc(field: str, value: datetime) -> datetime:
    """`value` in UTC, or a 422 naming `field` when it cannot be stored as written."""
    try:
        instant = value.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidInput(field, OUT_OF_RANGE) from exc
    if instant in _INFINITE:
        raise InvalidInput(field, OUT_OF_RANGE)
    return instant


def check_storable(field: str, value: datetime | None) -> None:
    if value is not None:
        storable_utc(field, value)
