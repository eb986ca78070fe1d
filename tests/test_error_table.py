"""One error table: the domain errors, Litestar's HTTP errors and the OpenAPI responses read it."""

from __future__ import annotations

from types import SimpleNamespace

import asyncpg
import pytest
from litestar.exceptions import HTTPException

from service.api.deps import ERRORS
from service.errors import (
    ERROR_TABLE,
    HakiError,
    LogThrottle,
    error_code,
    handle_exception,
    openapi_responses,
)


def all_subclasses(cls: type[HakiError]) -> set[type[HakiError]]:
    out = set(cls.__subclasses__())
    for sub in list(out):
        out |= all_subclasses(sub)
    return out


def test_every_domain_error_is_a_row_of_the_table() -> None:
    rows = {(r.status, r.code) for r in ERROR_TABLE}
    assert {(e.status_code, e.code) for e in all_subclasses(HakiError)} <= rows


def test_a_domain_error_outside_the_table_fails_at_definition() -> None:
    with pytest.raises(LookupError, match="not in ERROR_TABLE"):

        class Teapot(HakiError, status=418, code="teapot"):
            pass


def test_every_route_documents_each_client_status_of_the_table() -> None:
    documented = openapi_responses()
    assert ERRORS.keys() == documented.keys()
    for row in ERROR_TABLE:
        if row.status < 500:
            assert row.code in (documented[row.status].description or ""), row


def test_litestar_http_errors_take_their_code_from_the_table() -> None:
    response = handle_exception(None, HTTPException(status_code=405, detail="no"))  # type: ignore[arg-type]
    assert response.status_code == 405
    assert response.content.code == error_code(405, "method_not_allowed").code


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (asyncpg.DeadlockDetectedError("deadlock detected"), "A concurrent change conflicted"),
        (asyncpg.SerializationError("could not serialize access"), "A concurrent change conflicted"),
        # A write racing an erasure (tests/test_erasure_scope_lock.py), should the lock miss one.
        (asyncpg.ForeignKeyViolationError("violates foreign key"), "A concurrent change conflicted"),
        (asyncpg.QueryCanceledError("canceling statement due to statement timeout"), "The database is"),
        (ConnectionRefusedError(), "The database is"),
    ],
)
def test_a_conflict_with_a_concurrent_change_is_a_retryable_503_that_says_so(
    exc: BaseException, message: str
) -> None:
    """A deadlock victim is retried like any 503 `unavailable` (Retry-After), but the database is
    up: the message names the conflict, not an outage."""
    request = SimpleNamespace(method="DELETE", url=SimpleNamespace(path="/v1/events/e"))
    response = handle_exception(request, exc)  # type: ignore[arg-type]
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert response.content.code == "unavailable"
    assert response.content.message.startswith(message), response.content


def test_an_outage_logs_a_line_a_second_counting_the_rest() -> None:
    """Every request of an outage logged its own warning (982 in 2.5 s under four clients)."""
    now = [100.0]
    throttle = LogThrottle(period=1.0, clock=lambda: now[0])
    assert throttle.admit() == 0
    for _ in range(5):
        now[0] += 0.1
        assert throttle.admit() is None
    now[0] += 0.6
    assert throttle.admit() == 5
    assert throttle.admit() is None
