"""Every route needs a live key of the right project (spec/API.md, "Conventions").

The route walk is derived from the app itself: a route that exists but is missing from ROUTES
fails `test_route_table_covers_every_route`, so each new route must say here how it is called
and how it is scoped (by a project named in the request, or by an object id alone).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import asyncpg
import httpx
import pytest

from service import auth
from service import repository as repo
from service.app import create_app
from service.embedder import HashEmbedder
from service.errors import Unauthorized
from service.settings import Settings
from tests.conftest import bearer
from tests.test_facts import PROJECT, assert_error, get_fact

OTHER_PROJECT = "proj-b"
SKIPPED_METHODS = {"OPTIONS", "HEAD"}  # Litestar's automatic preflight answers carry no data


def is_public(path: str) -> bool:
    return path == "/healthz" or path == "/docs" or path.startswith("/docs/")


@dataclass(frozen=True)
class Objects:
    """Objects of project proj-a that id-addressed routes point at."""

    fact_id: str
    other_fact_id: str
    conflict_set_id: str
    trace_id: str


Request = tuple[str, dict[str, Any] | None, dict[str, Any] | None]  # url, query params, json body


@dataclass(frozen=True)
class Route:
    scope: Literal["project", "id"]
    build: Callable[[Objects, str], Request]
    ok_status: int = 200


ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/v1/facts"): Route(
        "project",
        lambda o, p: ("/v1/facts", None, {"project_id": p, "subject_id": "auth", "facts": [{"content": "x"}]}),
        201,
    ),
    ("GET", "/v1/facts"): Route("project", lambda o, p: ("/v1/facts", {"project_id": p}, None)),
    ("GET", "/v1/facts/{fact_id}"): Route("id", lambda o, p: (f"/v1/facts/{o.fact_id}", None, None)),
    ("PATCH", "/v1/facts/{fact_id}"): Route(
        "id", lambda o, p: (f"/v1/facts/{o.fact_id}", None, {"status": "retracted"})
    ),
    ("POST", "/v1/events"): Route(
        "project",
        lambda o, p: (
            "/v1/events",
            None,
            {
                "project_id": p,
                "subject_id": "auth",
                "events": [{"content": "e", "occurred_at": "2024-01-01T00:00:00Z"}],
            },
        ),
        201,
    ),
    ("GET", "/v1/conflicts"): Route("project", lambda o, p: ("/v1/conflicts", {"project_id": p}, None)),
    ("POST", "/v1/conflicts/{conflict_set_id}/resolve"): Route(
        "id", lambda o, p: (f"/v1/conflicts/{o.conflict_set_id}/resolve", None, {"keep": [o.fact_id]})
    ),
    ("POST", "/v1/context"): Route(
        "project",
        lambda o, p: ("/v1/context", None, {"project_id": p, "subject_id": "auth", "query": "where does Alice work"}),
    ),
    ("GET", "/v1/inspect/{trace_id}"): Route("id", lambda o, p: (f"/v1/inspect/{o.trace_id}", None, None)),
    ("GET", "/v1/stats/overview"): Route("project", lambda o, p: ("/v1/stats/overview", {"project_id": p}, None)),
}


def _app() -> Any:
    return create_app(Settings(embed_provider="hash"), pool=object(), embedder=HashEmbedder())


@cache
def app_routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the app that needs a key."""
    out: set[tuple[str, str]] = set()
    for route in _app().routes:
        path = getattr(route, "path_format", route.path)
        if is_public(path):
            continue
        for method in getattr(route, "methods", ()):
            if method not in SKIPPED_METHODS:
                out.add((method, path))
    return sorted(out, key=lambda mp: (mp[1], mp[0]))


def route_ids() -> list[str]:
    return [f"{m} {p}" for m, p in app_routes()]


async def send(client: httpx.AsyncClient, method: str, req: Request, headers: dict[str, str]) -> httpx.Response:
    url, params, body = req
    return await client.request(method, url, params=params, json=body, headers=headers)


@pytest.fixture
async def objects(client: httpx.AsyncClient, key: str) -> Objects:
    r = await client.post(
        "/v1/facts",
        json={
            "project_id": PROJECT,
            "subject_id": "auth",
            "facts": [
                {"content": "Alice works at Acme", "key": "employer"},
                {"content": "Alice works at Globex", "key": "employer"},
            ],
        },
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text
    a, b = r.json()["facts"]
    assert a["conflict_set_id"] is not None and a["conflict_set_id"] == b["conflict_set_id"]
    r = await client.post(
        "/v1/context",
        json={"project_id": PROJECT, "subject_id": "auth", "query": "Where does Alice work?"},
        headers=bearer(key),
    )
    assert r.status_code == 200, r.text
    return Objects(
        fact_id=a["fact_id"],
        other_fact_id=b["fact_id"],
        conflict_set_id=a["conflict_set_id"],
        trace_id=r.json()["trace_id"],
    )


# --- the table matches the app ----------------------------------------------------------------


def _openapi_names_project(schema: dict[str, Any], method: str, path: str) -> bool:
    op = schema["paths"][path][method.lower()]
    if any(p.get("name") == "project_id" for p in op.get("parameters", [])):
        return True
    content = op.get("requestBody", {}).get("content", {})
    for media in content.values():
        ref = media.get("schema", {}).get("$ref", "")
        body = schema["components"]["schemas"].get(ref.rsplit("/", 1)[-1], media.get("schema", {}))
        if "project_id" in body.get("properties", {}):
            return True
    return False


async def test_route_table_covers_every_route(client: httpx.AsyncClient) -> None:
    routes = set(app_routes())
    assert routes, "no authenticated routes found"
    missing = sorted(routes - set(ROUTES))
    assert not missing, f"routes without an entry in tests/test_auth.py ROUTES: {missing}"
    stale = sorted(set(ROUTES) - routes)
    assert not stale, f"ROUTES entries for routes the app no longer has: {stale}"
    # The scope recorded in the table agrees with the OpenAPI schema: a route whose query or
    # body names project_id is project-scoped; every other route addresses an object by id.
    schema = (await client.get("/docs/openapi.json")).json()
    for method, path in routes:
        names_project = _openapi_names_project(schema, method, path)
        assert (ROUTES[(method, path)].scope == "project") == names_project, (method, path)
        if not names_project:
            assert "{" in path, f"{method} {path} names neither a project nor an object id"


@pytest.mark.parametrize(("method", "path"), app_routes(), ids=route_ids())
async def test_every_route_works_with_the_right_key(
    client: httpx.AsyncClient, key: str, objects: Objects, method: str, path: str
) -> None:
    """The table's example requests are valid, so the 401/403/404 below are about the key alone."""
    route = ROUTES[(method, path)]
    r = await send(client, method, route.build(objects, PROJECT), bearer(key))
    assert r.status_code == route.ok_status, r.text


# --- 401 ---------------------------------------------------------------------------------------

MALFORMED = [
    "Bearer",
    "Bearer ",
    "Basic dXNlcjpwYXNz",
    "Token hk_abc",
    "hk_abc",
    "Bearer\thk_abc",
]


@pytest.mark.parametrize(("method", "path"), app_routes(), ids=route_ids())
async def test_every_route_refuses_missing_malformed_unknown_and_revoked_keys(
    client: httpx.AsyncClient,
    conn: asyncpg.Connection,
    key: str,
    objects: Objects,
    method: str,
    path: str,
) -> None:
    req = ROUTES[(method, path)].build(objects, PROJECT)

    r = await send(client, method, req, {})
    assert_error(r, 401, "unauthorized")

    for header in MALFORMED:
        r = await send(client, method, req, {"Authorization": header})
        assert_error(r, 401, "unauthorized")

    for unknown in (auth.new_key(), "hk_", "not-a-key", key + "x", key[:-1], hashlib.sha256(key.encode()).hexdigest()):
        r = await send(client, method, req, bearer(unknown))
        assert_error(r, 401, "unauthorized")

    _, doomed = await auth.create_key(conn, PROJECT)
    assert await auth.revoke_key(conn, doomed)
    r = await send(client, method, req, bearer(doomed))
    assert_error(r, 401, "unauthorized")

    # Nothing above changed the objects.
    fact = await get_fact(client, key, objects.fact_id)
    assert fact["status"] == "active" and fact["conflict_set_id"] == objects.conflict_set_id


async def test_revocation_is_immediate_and_only_hits_that_key(
    client: httpx.AsyncClient, conn: asyncpg.Connection, key: str
) -> None:
    _, second = await auth.create_key(conn, PROJECT)
    params = {"project_id": PROJECT}
    assert (await client.get("/v1/facts", params=params, headers=bearer(second))).status_code == 200
    assert await auth.revoke_key(conn, second)
    assert_error(await client.get("/v1/facts", params=params, headers=bearer(second)), 401, "unauthorized")
    assert (await client.get("/v1/facts", params=params, headers=bearer(key))).status_code == 200
    assert not await auth.revoke_key(conn, second)  # already revoked


async def test_bearer_scheme_is_case_insensitive(client: httpx.AsyncClient, key: str) -> None:
    r = await client.get("/v1/facts", params={"project_id": PROJECT}, headers={"Authorization": f"bearer {key}"})
    assert r.status_code == 200, r.text


async def test_public_routes_need_no_key(client: httpx.AsyncClient) -> None:
    r = await client.get("/healthz")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ok"
    r = await client.get("/docs/openapi.json")
    assert r.status_code == 200
    assert "/v1/facts" in r.json()["paths"]


# --- 403 and 404 across projects ---------------------------------------------------------------

PROJECT_ROUTES = [mp for mp in app_routes() if ROUTES.get(mp) is None or ROUTES[mp].scope == "project"]
ID_ROUTES = [mp for mp in app_routes() if ROUTES.get(mp) is not None and ROUTES[mp].scope == "id"]


@pytest.mark.parametrize(("method", "path"), PROJECT_ROUTES, ids=[f"{m} {p}" for m, p in PROJECT_ROUTES])
async def test_project_mismatch_is_403(
    client: httpx.AsyncClient, key: str, other_key: str, objects: Objects, method: str, path: str
) -> None:
    route = ROUTES[(method, path)]
    before = (await client.get("/v1/facts", params={"project_id": OTHER_PROJECT}, headers=bearer(other_key))).json()
    r = await send(client, method, route.build(objects, OTHER_PROJECT), bearer(key))
    body = assert_error(r, 403, "forbidden")
    assert body["details"]["field"] == "project_id"
    # The other way round too: proj-b's key cannot name proj-a.
    r = await send(client, method, route.build(objects, PROJECT), bearer(other_key))
    assert_error(r, 403, "forbidden")
    after = (await client.get("/v1/facts", params={"project_id": OTHER_PROJECT}, headers=bearer(other_key))).json()
    assert after == before


@pytest.mark.parametrize(("method", "path"), ID_ROUTES, ids=[f"{m} {p}" for m, p in ID_ROUTES])
async def test_object_of_another_project_is_404_and_unchanged(
    client: httpx.AsyncClient, key: str, other_key: str, objects: Objects, method: str, path: str
) -> None:
    route = ROUTES[(method, path)]
    r = await send(client, method, route.build(objects, PROJECT), bearer(other_key))
    assert_error(r, 404, "not_found")
    fact = await get_fact(client, key, objects.fact_id)
    assert fact["status"] == "active"
    assert fact["valid_to"] is None
    assert fact["conflict_set_id"] == objects.conflict_set_id
    r = await client.get(
        "/v1/conflicts", params={"project_id": PROJECT, "subject_id": "auth"}, headers=bearer(key)
    )
    (cs,) = r.json()["conflicts"]
    assert cs["status"] == "open"
    assert {m["status"] for m in cs["members"]} == {"active"}
    r = await client.get(f"/v1/inspect/{objects.trace_id}", headers=bearer(key))
    assert r.status_code == 200


async def test_other_projects_lists_do_not_leak(
    client: httpx.AsyncClient, key: str, other_key: str, objects: Objects
) -> None:
    r = await client.get("/v1/facts", params={"project_id": OTHER_PROJECT}, headers=bearer(other_key))
    assert objects.fact_id not in {f["fact_id"] for f in r.json()["facts"]}
    r = await client.get("/v1/conflicts", params={"project_id": OTHER_PROJECT}, headers=bearer(other_key))
    assert objects.conflict_set_id not in {c["conflict_set_id"] for c in r.json()["conflicts"]}


# --- key storage -------------------------------------------------------------------------------


async def test_only_the_sha256_of_a_key_is_stored(conn: asyncpg.Connection) -> None:
    key_id, key = await auth.create_key(conn, "proj-hash", label="ci")
    assert key.startswith("hk_") and len(key) > 40
    digest = hashlib.sha256(key.encode()).digest()
    assert auth.hash_key(key) == digest
    found = await repo.find_api_key(conn, digest)
    assert found is not None
    assert found[0] == "proj-hash" and found[1] == key_id and found[2] == digest
    principal = await auth.authenticate(conn, f"Bearer {key}")
    assert principal.project_id == "proj-hash" and principal.key_id == key_id
    # The hash is not a credential.
    with pytest.raises(Unauthorized):
        await auth.authenticate(conn, f"Bearer {digest.hex()}")
    rows = await repo.list_api_keys(conn, "proj-hash")
    assert [r["key_id"] for r in rows] == [key_id]
    assert rows[0]["label"] == "ci" and rows[0]["revoked_at"] is None
    for value in rows[0].values():
        assert key not in str(value)
        assert value != digest
        if isinstance(value, bytes | bytearray | memoryview):
            raise AssertionError("list_api_keys returns binary data")


async def test_revoked_key_is_listed_as_revoked(conn: asyncpg.Connection) -> None:
    key_id, key = await auth.create_key(conn, "proj-rev")
    assert await auth.revoke_key(conn, key)
    (row,) = await repo.list_api_keys(conn, "proj-rev")
    assert row["key_id"] == key_id and row["revoked_at"] is not None
    with pytest.raises(Unauthorized):
        await auth.authenticate(conn, f"Bearer {key}")
    assert await repo.find_api_key(conn, auth.hash_key(key)) is None


async def test_keys_are_unique_and_random(conn: asyncpg.Connection) -> None:
    keys = {(await auth.create_key(conn, "proj-many"))[1] for _ in range(20)}
    assert len(keys) == 20
    assert len(await repo.list_api_keys(conn, "proj-many")) == 20
    assert str(uuid.uuid4()) not in keys
