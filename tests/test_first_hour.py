"""Issue 18, "the first hour": what a new user trips over, each fixed and held here."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import bearer

# Every route with an id in its path: (method, path with "garbage" where the id goes, parameter).
MALFORMED_ID_ROUTES = [
    ("GET", "/v1/facts/garbage", "fact_id"),
    ("PATCH", "/v1/facts/garbage", "fact_id"),
    ("POST", "/v1/conflicts/garbage/resolve", "conflict_set_id"),
    ("GET", "/v1/inspect/garbage", "trace_id"),
]


# --- item 3: a malformed id in the path is a validation_error naming the parameter ------------


@pytest.mark.parametrize(("method", "path", "param"), MALFORMED_ID_ROUTES)
async def test_malformed_path_id_is_a_validation_error_naming_the_parameter(
    client: httpx.AsyncClient, key: str, method: str, path: str, param: str
) -> None:
    r = await client.request(method, path, headers=bearer(key), json={} if method != "GET" else None)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "validation_error"
    assert body["details"]["field"] == param
    assert body["message"].startswith(f"{param}: a UUID is expected")
    assert "'garbage'" in body["message"]


async def test_every_uuid_path_route_is_covered_by_the_central_rule(
    client: httpx.AsyncClient, key: str
) -> None:
    """The rule reads the app's routes: any route declared `{x:uuid}` (including ones added after
    this test was written) answers validation_error for a malformed id, not a bare 404."""
    from service.app import create_app
    from service.settings import Settings

    app = create_app(Settings())
    checked = 0
    for route in app.routes:
        if ":uuid}" not in route.path:
            continue
        for method in sorted(set(getattr(route, "methods", ())) - {"HEAD", "OPTIONS"}):
            path = route.path
            while ":uuid}" in path:
                start = path.index("{")
                path = path[:start] + "not-a-uuid" + path[path.index("}", start) + 1 :]
            r = await client.request(method, path, headers=bearer(key))
            assert r.status_code == 400, (method, route.path, r.text)
            assert r.json()["code"] == "validation_error", r.text
            assert "a UUID is expected" in r.json()["message"]
            checked += 1
    assert checked >= 4


async def test_unknown_route_is_still_a_plain_not_found(client: httpx.AsyncClient, key: str) -> None:
    r = await client.get("/v1/nothing-here/garbage", headers=bearer(key))
    assert r.status_code == 404
    assert r.json()["code"] == "not_found"


async def test_well_formed_unknown_id_is_still_not_found(client: httpx.AsyncClient, key: str) -> None:
    r = await client.get("/v1/inspect/0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f", headers=bearer(key))
    assert r.status_code == 404, r.text
