"""A /v1 query string is decoded as strictly as a body (docs/spec/api.md, "Conventions"): a
parameter the route does not take, one given twice, or an integer not written as one is a 400
naming it, never a filter silently dropped (a misspelt `subject_id` once listed the project)."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from litestar.routes import HTTPRoute

from service.app import create_app
from service.embedding.embedder import HashEmbedder
from service.settings import Settings
from tests.helpers import PROJECT, assert_error, bearer, post_facts


def v1_routes() -> list[tuple[str, str]]:
    """(method, path with its parameters filled) of every /v1 route, from the app itself."""
    app = create_app(Settings(embed_provider="hash"), pool=object(), embedder=HashEmbedder())
    found = set()
    for route in app.routes:
        if isinstance(route, HTTPRoute) and route.path.startswith("/v1/"):
            path = re.sub(r"\{[^}]+\}", str(uuid.UUID(int=7)), route.path)
            found |= {(m, path) for m in route.methods if m not in {"OPTIONS", "HEAD"}}
    return sorted(found)


ROUTES = v1_routes()


def test_the_walk_finds_the_routes() -> None:
    assert ("GET", "/v1/facts") in ROUTES and ("POST", "/v1/context") in ROUTES and len(ROUTES) > 20


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
async def test_every_v1_route_refuses_a_parameter_it_does_not_take(
    client: httpx.AsyncClient, key: str, method: str, path: str
) -> None:
    r = await client.request(method, path, params={"subjet_id": "alice"}, headers=bearer(key))
    body = assert_error(r, 400, "validation_error", field="subjet_id")
    assert "not a query parameter of this route" in body["message"]


async def test_a_misspelt_filter_names_what_the_route_takes(client: httpx.AsyncClient, key: str) -> None:
    assert (await post_facts(client, key, [{"content": "Alice likes tea"}], "alice")).status_code == 201
    r = await client.get("/v1/facts", params={"project_id": PROJECT, "subjectid": "bob"}, headers=bearer(key))
    body = assert_error(r, 400, "validation_error", field="subjectid")
    assert "cursor, limit, project_id, status, subject_id" in body["message"]
    ok = await client.get(
        "/v1/facts", params={"project_id": PROJECT, "subject_id": "bob"}, headers=bearer(key)
    )
    assert ok.status_code == 200 and ok.json()["facts"] == []


@pytest.mark.parametrize("value", ["1.0", "1e1", "05", "", "0x10", "\u0663"])
async def test_an_integer_is_written_as_one(client: httpx.AsyncClient, key: str, value: str) -> None:
    r = await client.get("/v1/facts", params={"limit": value}, headers=bearer(key))
    body = assert_error(r, 400, "validation_error", field="limit")
    assert body["message"].startswith("limit: expected an integer")
    assert (await client.get("/v1/facts", params={"limit": "10"}, headers=bearer(key))).status_code == 200


async def test_a_parameter_given_twice_is_refused(client: httpx.AsyncClient, key: str) -> None:
    r = await client.get("/v1/stats/facts?subject_id=alice&subject_id=bob", headers=bearer(key))
    body = assert_error(r, 400, "validation_error", field="subject_id")
    assert "given 2 times" in body["message"]


async def test_pages_and_preflights_are_not_api_routes(client: httpx.AsyncClient) -> None:
    """Outside /v1 (a browser's page may carry its form's extra fields) and for a CORS preflight,
    which repeats the request's URL, the rule does not apply."""
    login = await client.get("/ui/login", params={"next": "/ui", "utm_source": "mail"})
    assert login.status_code == 200
    preflight = await client.options(
        "/v1/facts?bogus=1", headers={"Origin": "https://app.example", "Access-Control-Request-Method": "GET"}
    )
    assert preflight.status_code != 400
