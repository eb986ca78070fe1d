"""Every route needs a live key of the right project (docs/spec/api.md, "Conventions").

The route walk is derived from the app itself: a route that exists but is missing from ROUTES
fails `test_route_table_covers_every_route`, so each new route must say here how it is called,
how it authenticates and how it is scoped:

- `bearer`: the JSON API. No, malformed, unknown or revoked key -> 401 `unauthorized`; a key of
  another project -> 403 `forbidden` when the request names a project, 404 when it addresses an
  object by id (the lookup is scoped to the key's project, so nothing leaks).
- `cookie`: the HTML pages under /ui (a browser cannot send a Bearer header on navigation): no
  live session in its cookie (none, a raw key, junk, a logged-out or revoked key's) -> 303 to
  /ui/login; another project's object -> 404. Their POSTs carry the session's CSRF token.
- `token`: `/metrics`, Prometheus's scrape of every project's aggregates: its own bearer
  (HAKI_METRICS_TOKEN), never a project key; closed when the server has none.
- `public`: the documented exceptions, each with its reason (they serve no tenant data).
/healthz and the OpenAPI pages under /docs are public by the spec and not listed.
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

from service.api import auth
from service.app import create_app
from service.embedding.embedder import HashEmbedder
from service.errors import Unauthorized
from service.repository import keys as keys_repo
from service.settings import Settings
from tests.helpers import METRICS_AUTH, PROJECT, assert_error, bearer, get_fact, post_facts
from tests.helpers.chromium import UI_COOKIE, ui_login

OTHER_PROJECT = "proj-b"
SKIPPED_METHODS = {"OPTIONS", "HEAD"}  # Litestar's automatic preflight answers carry no data


def is_spec_public(path: str) -> bool:
    return path == "/healthz" or path == "/docs" or path.startswith("/docs/")


@dataclass(frozen=True)
class Objects:
    """Objects of project proj-a that id-addressed routes point at."""

    fact_id: str
    other_fact_id: str
    conflict_set_id: str
    trace_id: str
    event_id: str = ""


Request = tuple[str, dict[str, Any] | None, dict[str, Any] | None]  # url, query params, json body


@dataclass(frozen=True)
class Route:
    auth: Literal["bearer", "cookie", "token", "public"]
    scope: Literal["project", "id", "none"]  # names a project / addresses an object by id / neither
    build: Callable[[Objects, str], Request]
    ok_status: int = 200
    why_public: str = ""
    form: dict[str, str] | None = None  # a /ui POST's form fields, `{o.fact_id}`... formatted
    shows: str = ""  # a /ui page that names none of the objects: what it shows a live session


def _facts_body(o: Objects, p: str) -> Request:
    return "/v1/facts", None, {"project_id": p, "subject_id": "auth", "facts": [{"content": "x"}]}


def _events_body(o: Objects, p: str) -> Request:
    event = {"content": "e", "occurred_at": "2024-01-01T00:00:00Z"}
    return "/v1/events", None, {"project_id": p, "subject_id": "auth", "events": [event]}


def _context_body(o: Objects, p: str) -> Request:
    return "/v1/context", None, {"project_id": p, "subject_id": "auth", "query": "where does Alice work"}


def _extract_body(o: Objects, p: str) -> Request:
    message = {"role": "user", "content": "I work at Acme."}
    return "/v1/extract", None, {"project_id": p, "subject_id": "auth", "messages": [message]}


def _project_query(url: str) -> Callable[[Objects, str], Request]:
    return lambda o, p: (url, {"project_id": p}, None)


def _url(template: str, body: dict[str, Any] | None = None) -> Callable[[Objects, str], Request]:
    """A request on `template` formatted with the objects (`{o.fact_id}`...)."""

    def build(o: Objects, p: str) -> Request:
        filled = (
            None
            if body is None
            else {k: [x.format(o=o) for x in v] if isinstance(v, list) else v for k, v in body.items()}
        )
        return template.format(o=o), None, filled

    return build


ROUTES: dict[tuple[str, str], Route] = {
    # --- the JSON API ---
    ("POST", "/v1/facts"): Route("bearer", "project", _facts_body, 201),
    ("GET", "/v1/facts"): Route("bearer", "project", _project_query("/v1/facts")),
    ("GET", "/v1/facts/{fact_id}"): Route("bearer", "id", _url("/v1/facts/{o.fact_id}")),
    ("PATCH", "/v1/facts/{fact_id}"): Route(
        "bearer", "id", _url("/v1/facts/{o.fact_id}", {"status": "retracted"})
    ),
    ("POST", "/v1/events"): Route("bearer", "project", _events_body, 201),
    ("GET", "/v1/conflicts"): Route("bearer", "project", _project_query("/v1/conflicts")),
    ("POST", "/v1/conflicts/{conflict_set_id}/resolve"): Route(
        "bearer", "id", _url("/v1/conflicts/{o.conflict_set_id}/resolve", {"keep": ["{o.fact_id}"]})
    ),
    ("POST", "/v1/context"): Route("bearer", "project", _context_body),
    ("GET", "/v1/inspect/{trace_id}"): Route("bearer", "id", _url("/v1/inspect/{o.trace_id}")),
    ("GET", "/v1/stats/overview"): Route("bearer", "project", _project_query("/v1/stats/overview")),
    ("POST", "/v1/inspect/{trace_id}/replay"): Route("bearer", "id", _url("/v1/inspect/{o.trace_id}/replay")),
    ("GET", "/v1/stats/facts"): Route("bearer", "project", _project_query("/v1/stats/facts")),
    # No chat model is configured here: past the key, the route answers its 503 `unavailable`
    # (tests/test_extract.py drives it against a scripted model).
    ("POST", "/v1/extract"): Route("bearer", "project", _extract_body, 503),
    # --- memory lifecycle ---
    ("DELETE", "/v1/subjects/{subject_id}"): Route("bearer", "project", _project_query("/v1/subjects/auth")),
    ("DELETE", "/v1/subjects"): Route(
        "bearer", "project", lambda o, p: ("/v1/subjects", {"project_id": p, "subject_id": "auth"}, None)
    ),
    ("GET", "/v1/subjects"): Route("bearer", "project", _project_query("/v1/subjects")),
    ("GET", "/v1/subjects/{subject_id}/export"): Route(
        "bearer", "project", _project_query("/v1/subjects/auth/export")
    ),
    ("GET", "/v1/subjects/export"): Route(
        "bearer",
        "project",
        lambda o, p: ("/v1/subjects/export", {"project_id": p, "subject_id": "auth"}, None),
    ),
    ("GET", "/v1/events"): Route("bearer", "project", _project_query("/v1/events")),
    ("GET", "/v1/events/{event_id}"): Route("bearer", "id", _url("/v1/events/{o.event_id}")),
    ("DELETE", "/v1/events/{event_id}"): Route("bearer", "id", _url("/v1/events/{o.event_id}")),
    ("DELETE", "/v1/facts/{fact_id}"): Route("bearer", "id", _url("/v1/facts/{o.other_fact_id}")),
    # A public address is accepted without a request to it (nothing is sent at subscription).
    ("POST", "/v1/webhooks"): Route(
        "bearer",
        "project",
        lambda o, p: (
            "/v1/webhooks",
            None,
            {"project_id": p, "url": "http://93.184.215.14/hook", "events": ["fact.retracted"]},
        ),
        201,
    ),
    ("GET", "/v1/webhooks"): Route("bearer", "project", _project_query("/v1/webhooks")),
    ("DELETE", "/v1/webhooks/{webhook_id}"): Route(
        "bearer", "id", _url(f"/v1/webhooks/{uuid.UUID(int=7)}"), 404
    ),
    ("GET", "/v1/webhooks/{webhook_id}/deliveries"): Route(
        "bearer", "id", _url(f"/v1/webhooks/{uuid.UUID(int=7)}/deliveries"), 404
    ),
    # --- the trace inspector (HTML, cookie) ---
    ("GET", "/ui/traces"): Route("cookie", "none", _url("/ui/traces")),
    ("GET", "/ui/traces/{trace_id}"): Route("cookie", "id", _url("/ui/traces/{o.trace_id}")),
    ("POST", "/ui/traces/{trace_id}/replay"): Route(
        "cookie", "id", _url("/ui/traces/{o.trace_id}/replay"), form={}
    ),
    # --- the memory browser (HTML, cookie); an action without `confirm` answers its confirm page ---
    ("GET", "/ui/subjects"): Route("cookie", "none", _url("/ui/subjects")),
    ("GET", "/ui/webhooks"): Route("cookie", "none", _url("/ui/webhooks"), shows="<h1>Webhooks</h1>"),
    ("GET", "/ui/subject"): Route("cookie", "id", lambda o, p: ("/ui/subject", {"subject_id": "auth"}, None)),
    ("GET", "/ui/facts/{fact_id}"): Route("cookie", "id", _url("/ui/facts/{o.fact_id}")),
    ("GET", "/ui/conflicts/{conflict_set_id}"): Route(
        "cookie", "id", _url("/ui/conflicts/{o.conflict_set_id}")
    ),
    ("POST", "/ui/facts/{fact_id}/retract"): Route(
        "cookie", "id", _url("/ui/facts/{o.fact_id}/retract"), form={}
    ),
    ("POST", "/ui/facts/{fact_id}/supersede"): Route(
        "cookie", "id", _url("/ui/facts/{o.fact_id}/supersede"), form={"content": "Alice works at Initech"}
    ),
    ("POST", "/ui/conflicts/{conflict_set_id}/resolve"): Route(
        "cookie", "id", _url("/ui/conflicts/{o.conflict_set_id}/resolve"), form={"keep": "{o.fact_id}"}
    ),
    ("POST", "/ui/subject/erase"): Route(
        "cookie", "id", _url("/ui/subject/erase"), form={"subject_id": "auth"}
    ),
    ("GET", "/metrics"): Route("token", "none", _url("/metrics")),
    # --- documented public routes ---
    ("GET", "/ui"): Route("public", "none", _url("/ui"), 303, why_public="redirect to /ui/subjects"),
    ("GET", "/ui/assets/haki.css"): Route(
        "public", "none", _url("/ui/assets/haki.css"), why_public="stylesheet"
    ),
    ("GET", "/ui/login"): Route("public", "none", _url("/ui/login"), why_public="the login form"),
    ("POST", "/ui/login"): Route(
        "public",
        "none",
        _url("/ui/login"),
        400,
        why_public="checks the key sent in its form body (see test_ui_login_checks_the_key)",
    ),
    ("POST", "/ui/logout"): Route(
        "public", "none", _url("/ui/logout"), 303, why_public="ends the session its cookie names, if any"
    ),
}


def _app() -> Any:
    return create_app(Settings(embed_provider="hash"), pool=object(), embedder=HashEmbedder())


@cache
def app_routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the app but /healthz and /docs."""
    out: set[tuple[str, str]] = set()
    for route in _app().routes:
        path = getattr(route, "path_format", route.path)
        if is_spec_public(path):
            continue
        for method in getattr(route, "methods", ()):
            if method not in SKIPPED_METHODS:
                out.add((method, path))
    return sorted(out, key=lambda mp: (mp[1], mp[0]))


def routes_where(**match: str) -> list[tuple[str, str]]:
    """The app's routes whose table entry matches; a route missing from the table is included
    (its test then fails on the missing entry instead of being silently skipped)."""
    out = []
    for mp in app_routes():
        entry = ROUTES.get(mp)
        if entry is None or all(getattr(entry, k) == v for k, v in match.items()):
            out.append(mp)
    return out


def ids(routes: list[tuple[str, str]]) -> list[str]:
    return [f"{m} {p}" for m, p in routes]


async def send(
    client: httpx.AsyncClient, method: str, req: Request, headers: dict[str, str]
) -> httpx.Response:
    url, params, body = req
    return await client.request(method, url, params=params, json=body, headers=headers)


def cookie(k: str) -> dict[str, str]:
    return {"Cookie": f"{UI_COOKIE}={k}"}


@pytest.fixture
async def objects(client: httpx.AsyncClient, key: str) -> Objects:
    r = await post_facts(
        client,
        key,
        [
            {"content": "Alice works at Acme", "key": "employer"},
            {"content": "Alice works at Globex", "key": "employer"},
        ],
        "auth",
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
    trace_id = r.json()["trace_id"]
    r = await client.post(
        "/v1/events",
        json={
            "project_id": PROJECT,
            "subject_id": "auth",
            "events": [{"content": "Alice joined Acme", "occurred_at": "2024-01-01T00:00:00Z"}],
        },
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text
    return Objects(
        fact_id=a["fact_id"],
        other_fact_id=b["fact_id"],
        conflict_set_id=a["conflict_set_id"],
        trace_id=trace_id,
        event_id=r.json()["events"][0]["event_id"],
    )


async def assert_objects_unchanged(client: httpx.AsyncClient, key: str, objects: Objects) -> None:
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
    if objects.event_id:
        assert (await client.get(f"/v1/events/{objects.event_id}", headers=bearer(key))).status_code == 200


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
    assert routes, "no routes found"
    missing = sorted(routes - set(ROUTES))
    assert not missing, f"routes without an entry in tests/test_auth.py ROUTES: {missing}"
    stale = sorted(set(ROUTES) - routes)
    assert not stale, f"ROUTES entries for routes the app no longer has: {stale}"
    for mp, entry in ROUTES.items():
        assert (entry.auth == "public") == bool(entry.why_public), mp
    # Every bearer route is in the OpenAPI schema, and the scope recorded in the table agrees
    # with it: every one takes project_id (in its query or body; another project is a 403), and
    # one that is not project-scoped addresses an object by id.
    schema = (await client.get("/docs/openapi.json")).json()
    for method, path in routes_where(auth="bearer"):
        assert path in schema["paths"], f"{method} {path} is missing from the OpenAPI schema"
        assert _openapi_names_project(schema, method, path), f"{method} {path} takes no project_id"
        if ROUTES[(method, path)].scope != "project":
            assert "{" in path, f"{method} {path} names neither a project nor an object id"


@pytest.mark.parametrize(
    ("method", "path"), routes_where(auth="bearer"), ids=ids(routes_where(auth="bearer"))
)
async def test_every_bearer_route_works_with_the_right_key(
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


@pytest.mark.parametrize(
    ("method", "path"), routes_where(auth="bearer"), ids=ids(routes_where(auth="bearer"))
)
async def test_every_bearer_route_refuses_missing_malformed_unknown_and_revoked_keys(
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

    hashed = hashlib.sha256(key.encode()).hexdigest()
    for unknown in (auth.new_key(), "hk_", "not-a-key", key + "x", key[:-1], hashed):
        r = await send(client, method, req, bearer(unknown))
        assert_error(r, 401, "unauthorized")

    # The UI cookie is not a credential of the JSON API.
    r = await send(client, method, req, cookie(key))
    assert_error(r, 401, "unauthorized")

    _, doomed = await auth.create_key(conn, PROJECT)
    assert await auth.revoke_key(conn, doomed)
    r = await send(client, method, req, bearer(doomed))
    assert_error(r, 401, "unauthorized")

    await assert_objects_unchanged(client, key, objects)


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
    headers = {"Authorization": f"bearer {key}"}
    r = await client.get("/v1/facts", params={"project_id": PROJECT}, headers=headers)
    assert r.status_code == 200, r.text


async def test_spec_public_routes_need_no_key(client: httpx.AsyncClient) -> None:
    r = await client.get("/healthz")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ok"
    r = await client.get("/docs/openapi.json")
    assert r.status_code == 200
    assert "/v1/facts" in r.json()["paths"]


# --- 403 and 404 across projects ---------------------------------------------------------------

PROJECT_ROUTES = routes_where(auth="bearer", scope="project")
ID_ROUTES = routes_where(auth="bearer", scope="id")


@pytest.mark.parametrize(("method", "path"), PROJECT_ROUTES, ids=ids(PROJECT_ROUTES))
async def test_project_mismatch_is_403(
    client: httpx.AsyncClient, key: str, other_key: str, objects: Objects, method: str, path: str
) -> None:
    route = ROUTES[(method, path)]
    listing = {"project_id": OTHER_PROJECT}
    before = (await client.get("/v1/facts", params=listing, headers=bearer(other_key))).json()
    r = await send(client, method, route.build(objects, OTHER_PROJECT), bearer(key))
    body = assert_error(r, 403, "forbidden")
    assert body["details"]["field"] == "project_id"
    # The other way round too: proj-b's key cannot name proj-a.
    r = await send(client, method, route.build(objects, PROJECT), bearer(other_key))
    assert_error(r, 403, "forbidden")
    after = (await client.get("/v1/facts", params=listing, headers=bearer(other_key))).json()
    assert after == before
    await assert_objects_unchanged(client, key, objects)


@pytest.mark.parametrize(("method", "path"), ID_ROUTES, ids=ids(ID_ROUTES))
async def test_object_of_another_project_is_404_and_unchanged(
    client: httpx.AsyncClient, key: str, other_key: str, objects: Objects, method: str, path: str
) -> None:
    route = ROUTES[(method, path)]
    r = await send(client, method, route.build(objects, PROJECT), bearer(other_key))
    assert_error(r, 404, "not_found")
    await assert_objects_unchanged(client, key, objects)


async def test_other_projects_lists_do_not_leak(
    client: httpx.AsyncClient, key: str, other_key: str, objects: Objects
) -> None:
    r = await client.get("/v1/facts", params={"project_id": OTHER_PROJECT}, headers=bearer(other_key))
    assert objects.fact_id not in {f["fact_id"] for f in r.json()["facts"]}
    r = await client.get("/v1/conflicts", params={"project_id": OTHER_PROJECT}, headers=bearer(other_key))
    assert objects.conflict_set_id not in {c["conflict_set_id"] for c in r.json()["conflicts"]}


# --- the trace inspector (cookie) --------------------------------------------------------------

COOKIE_ROUTES = routes_where(auth="cookie")


# What a page of proj-a's objects shows of them (one of these, whichever the page is about).
def _shows_objects(text: str, o: Objects) -> bool:
    return any(m in text for m in (o.trace_id, o.fact_id, o.conflict_set_id, ">auth<"))


async def _send_ui(
    client: httpx.AsyncClient, method: str, route: Route, o: Objects, headers: dict[str, str], csrf: str
) -> httpx.Response:
    url, params, _ = route.build(o, PROJECT)
    form = None if route.form is None else {k: v.format(o=o) for k, v in route.form.items()}
    data = None if form is None else {"csrf_token": csrf, **form}
    return await client.request(method, url, params=params, data=data, headers=headers)


@pytest.mark.parametrize(("method", "path"), COOKIE_ROUTES, ids=ids(COOKIE_ROUTES))
async def test_ui_pages_need_a_live_session_in_the_cookie(
    client: httpx.AsyncClient,
    conn: asyncpg.Connection,
    key: str,
    other_key: str,
    objects: Objects,
    method: str,
    path: str,
) -> None:
    route = ROUTES[(method, path)]
    _, doomed = await auth.create_key(conn, PROJECT)
    revoked = await ui_login(client, doomed)
    assert await auth.revoke_key(conn, doomed)
    logged_out = await ui_login(client, key)
    assert (
        await client.post("/ui/logout", data=logged_out.form(), headers=logged_out.headers)
    ).status_code == 303
    client.cookies.clear()
    for headers in (
        {},
        cookie(key),
        cookie(auth.new_key()),
        cookie("junk"),
        revoked.headers,
        logged_out.headers,
        bearer(key),
    ):
        r = await _send_ui(client, method, route, objects, headers, revoked.csrf)
        assert r.status_code == 303, (headers, r.text)
        assert r.headers["location"] == "/ui/login"
        assert not _shows_objects(r.text, objects) and not (route.shows and route.shows in r.text)
    session = await ui_login(client, key)
    r = await _send_ui(client, method, route, objects, session.headers, session.csrf)
    assert r.status_code == route.ok_status, r.text
    assert (route.shows in r.text) if route.shows else _shows_objects(r.text, objects)
    # Another project's session sees nothing of proj-a.
    other = await ui_login(client, other_key)
    r = await _send_ui(client, method, route, objects, other.headers, other.csrf)
    assert not _shows_objects(r.text, objects)
    if route.scope == "id":
        assert r.status_code == 404, r.text
    else:
        assert r.status_code == 200, r.text
    await assert_objects_unchanged(client, key, objects)


async def test_ui_login_checks_the_key(client: httpx.AsyncClient, conn: asyncpg.Connection, key: str) -> None:
    _, doomed = await auth.create_key(conn, PROJECT)
    assert await auth.revoke_key(conn, doomed)
    for bad in (auth.new_key(), doomed):
        r = await client.post("/ui/login", data={"key": bad})
        assert r.status_code == 401, r.text
        assert UI_COOKIE not in r.cookies
    r = await client.post("/ui/login", data={"key": ""})
    assert r.status_code == 400
    r = await client.post("/ui/login", data={"key": key})
    assert r.status_code == 303
    set_cookie = r.headers["set-cookie"].lower()
    assert f"{UI_COOKIE}=" in set_cookie and "httponly" in set_cookie and "path=/ui" in set_cookie
    client.cookies.clear()


async def test_public_routes_serve_no_tenant_data(
    client: httpx.AsyncClient, key: str, objects: Objects
) -> None:
    for method, path in routes_where(auth="public"):
        route = ROUTES[(method, path)]
        r = await send(client, method, route.build(objects, PROJECT), {})
        assert r.status_code == route.ok_status, (method, path, r.text)
        for secret in (PROJECT, "Alice works at", objects.fact_id, objects.trace_id, key):
            assert secret not in r.text, (method, path, secret)
    client.cookies.clear()


@pytest.mark.parametrize(("method", "path"), routes_where(auth="token"), ids=ids(routes_where(auth="token")))
async def test_token_routes_take_their_token_and_no_project_key(
    client: httpx.AsyncClient, key: str, objects: Objects, method: str, path: str
) -> None:
    request = ROUTES[(method, path)].build(objects, PROJECT)
    for headers in ({}, bearer(key), {"Authorization": "Bearer not-the-token"}):
        assert_error(await send(client, method, request, headers), 401, "unauthorized")
    assert (await send(client, method, request, METRICS_AUTH)).status_code == 200


# --- key storage -------------------------------------------------------------------------------


async def test_only_the_sha256_of_a_key_is_stored(conn: asyncpg.Connection) -> None:
    key_id, key = await auth.create_key(conn, "proj-hash", label="ci")
    assert key.startswith("hk_") and len(key) > 40
    digest = hashlib.sha256(key.encode()).digest()
    assert auth.hash_key(key) == digest
    found = await keys_repo.find_api_key(conn, digest)
    assert found is not None
    assert found[0] == "proj-hash" and found[1] == key_id and found[2] == digest
    principal = await auth.authenticate(conn, f"Bearer {key}")
    assert principal.project_id == "proj-hash" and principal.key_id == key_id
    # The hash is not a credential.
    with pytest.raises(Unauthorized):
        await auth.authenticate(conn, f"Bearer {digest.hex()}")
    rows = await keys_repo.list_api_keys(conn, "proj-hash")
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
    (row,) = await keys_repo.list_api_keys(conn, "proj-rev")
    assert row["key_id"] == key_id and row["revoked_at"] is not None
    with pytest.raises(Unauthorized):
        await auth.authenticate(conn, f"Bearer {key}")
    assert await keys_repo.find_api_key(conn, auth.hash_key(key)) is None


async def test_keys_are_unique_and_random(conn: asyncpg.Connection) -> None:
    keys = {(await auth.create_key(conn, "proj-many"))[1] for _ in range(20)}
    assert len(keys) == 20
    assert len(await keys_repo.list_api_keys(conn, "proj-many")) == 20
    assert str(uuid.uuid4()) not in keys
