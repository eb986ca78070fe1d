"""One error table: the domain errors, Litestar's HTTP errors and the OpenAPI responses read it."""

from __future__ import annotations

import pytest
from litestar.exceptions import HTTPException

from service.api.deps import ERRORS
from service.errors import ERROR_TABLE, HakiError, error_code, handle_exception, openapi_responses


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
