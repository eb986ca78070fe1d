"""A key of project B never reaches project A's memories, on any route (docs/spec/api.md, "Conventions").

The route list is the app's OpenAPI schema: a route the schema serves but PROBES lacks fails
`test_every_served_route_has_probes`, so each new route must say here how B tries to reach A's
objects through it. Project A's objects (facts, an event, a conflict set, a trace) are created
through the API; every probe by B must get one of its expected statuses, and no body may contain
anything of A that B did not send itself: its object ids, its contents, its query. 401s are
tests/test_auth.py's business. Routes the app serves outside its schema (the /ui pages, which
take the key from a cookie, /metrics, /docs) have a table of their own, OFF_SCHEMA, derived from
the app's routes the same way.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from service.app import create_app
from service.embedding.embedder import HashEmbedder
from service.settings import Settings
from tests.helpers import bearer, post_context, post_events, post_facts
from tests.helpers.chromium import ui_login

A = "proj-a"  # the `key` fixture's project
B = "proj-b"  # the `other_key` fixture's project
SUBJECT = "alice"  # both projects hold memories about a subject with the same id
HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


@dataclass(frozen=True)
class World:
    a_fact_ids: list[str]
    a_event_id: str
    a_conflict_set_id: str
    a_trace_id: str
    a_contents: list[str]
    a_query: str
    b_fact_id: str

    @property
    def markers(self) -> list[str]:
        """Anything of A that must never show up in an answer to B."""
        return [
            *self.a_fact_ids,
            self.a_event_id,
            self.a_conflict_set_id,
            self.a_trace_id,
            *self.a_contents,
            self.a_query,
        ]


@dataclass(frozen=True)
class Probe:
    url: str
    params: dict[str, Any] | None
    body: dict[str, Any] | None
    expected: frozenset[int]
    check: Callable[[Any, World], None] | None = None
    form: dict[str, str] | None = None  # an HTML form instead of a JSON body


def probe(
    url: str,
    params: dict[str, Any] | None = None,
    body: dict[str, Any] | None = None,
    expected: set[int] | int = 404,
    check: Callable[[Any, World], None] | None = None,
    form: dict[str, str] | None = None,
) -> Probe:
    statuses = {expected} if isinstance(expected, int) else expected
    return Probe(url, params, body, frozenset(statuses), check, form)


def only_b_facts(body: Any, w: World) -> None:
    assert [f["fact_id"] for f in body["facts"]] == [w.b_fact_id], body
    assert all(f["project_id"] == B for f in body["facts"]), body


def only_b_facts_stats(body: Any, w: World) -> None:
    assert body["project_id"] == B, body
    assert [f["fact_id"] for f in body["facts"]] in ([w.b_fact_id], []), body


def no_conflicts(body: Any, w: World) -> None:
    assert body["conflicts"] == [], body


def b_stats_only(body: Any, w: World) -> None:
    assert body["project_id"] == B
    assert body["facts_total"] == 1 and body["events_total"] == 0 and body["open_conflicts"] == 0, body
    assert body["context_calls"] <= 1, body  # at most B's own context probe


def b_packet_only(body: Any, w: World) -> None:
    served = [f["fact_id"] for f in body["facts"]] + [e["event_id"] for e in body["episodes"]]
    assert set(served) <= {w.b_fact_id}, body


def scoped(project_id: str, **fields: Any) -> dict[str, Any]:
    """A request body or query on SUBJECT of that project."""
    return {"project_id": project_id, "subject_id": SUBJECT, **fields}


def b_fact(content: str, **extra: Any) -> dict[str, Any]:
    return scoped(B, facts=[{"content": content, **extra}])


# (method, OpenAPI path) -> how B tries to reach A through that route.
PROBES: dict[tuple[str, str], Callable[[World], list[Probe]]] = {
    ("GET", "/healthz"): lambda w: [probe("/healthz", expected=200)],
    ("POST", "/v1/facts"): lambda w: [
        probe("/v1/facts", body={**b_fact("x"), "project_id": A}, expected=403),
        probe("/v1/facts", body=b_fact("x", supersedes=w.a_fact_ids[0]), expected=422),
        probe("/v1/facts", body=b_fact("x", source_event_id=w.a_event_id), expected=422),
    ],
    ("GET", "/v1/facts"): lambda w: [
        probe("/v1/facts", params={"project_id": A}, expected=403),
        probe("/v1/facts", params=scoped(A), expected=403),
        probe("/v1/facts", params={"project_id": B}, expected=200, check=only_b_facts),
        probe("/v1/facts", params=scoped(B), expected=200, check=only_b_facts),
    ],
    # A route of one item takes `?project_id=` too: naming A is a 403, even for B's own item.
    ("GET", "/v1/facts/{fact_id}"): lambda w: [
        *(probe(f"/v1/facts/{f}") for f in w.a_fact_ids),
        probe(f"/v1/facts/{w.b_fact_id}", params={"project_id": A}, expected=403),
    ],
    ("PATCH", "/v1/facts/{fact_id}"): lambda w: (
        [
            probe(f"/v1/facts/{f}", body=body)
            for f in w.a_fact_ids
            for body in ({"status": "retracted"}, {"valid_to": "2030-01-01T00:00:00Z"})
        ]
        + [
            probe(
                f"/v1/facts/{w.b_fact_id}",
                params={"project_id": A},
                body={"status": "retracted"},
                expected=403,
            )
        ]
    ),
    ("POST", "/v1/events"): lambda w: [
        probe(
            "/v1/events",
            body=scoped(A, events=[{"content": "x", "occurred_at": "2024-01-01T00:00:00Z"}]),
            expected=403,
        )
    ],
    ("GET", "/v1/conflicts"): lambda w: [
        probe("/v1/conflicts", params={"project_id": A}, expected=403),
        probe("/v1/conflicts", params={"project_id": A, "status": "open"}, expected=403),
        probe("/v1/conflicts", params={"project_id": B}, expected=200, check=no_conflicts),
    ],
    ("POST", "/v1/conflicts/{conflict_set_id}/resolve"): lambda w: [
        probe(f"/v1/conflicts/{w.a_conflict_set_id}/resolve", body={"keep": [w.a_fact_ids[0]]}),
        probe(
            f"/v1/conflicts/{w.a_conflict_set_id}/resolve",
            params={"project_id": A},
            body={"keep": [w.a_fact_ids[0]]},
            expected=403,
        ),
        probe(f"/v1/conflicts/{w.a_conflict_set_id}/resolve", body={"keep": [w.b_fact_id]}),
    ],
    ("POST", "/v1/context"): lambda w: [
        probe("/v1/context", body=scoped(A, query=w.a_query), expected=403),
        probe(
            "/v1/context",
            body=scoped(B, query=w.a_query, budget_tokens=100000),
            expected=200,
            check=b_packet_only,
        ),
    ],
    ("GET", "/v1/inspect/{trace_id}"): lambda w: [
        probe(f"/v1/inspect/{w.a_trace_id}"),
        probe(f"/v1/inspect/{w.a_trace_id}", params={"project_id": A}, expected=403),
    ],
    ("GET", "/v1/stats/overview"): lambda w: [
        probe("/v1/stats/overview", params={"project_id": A}, expected=403),
        probe("/v1/stats/overview", params={"project_id": B}, expected=200, check=b_stats_only),
    ],
    ("POST", "/v1/inspect/{trace_id}/replay"): lambda w: [
        probe(f"/v1/inspect/{w.a_trace_id}/replay"),
        probe(f"/v1/inspect/{w.a_trace_id}/replay", params={"project_id": A}, expected=403),
        probe(f"/v1/inspect/{w.a_trace_id}/replay", body={"budget_tokens": 100000, "profile": "facts_first"}),
    ],
    ("GET", "/v1/stats/facts"): lambda w: [
        probe("/v1/stats/facts", params={"project_id": A}, expected=403),
        probe("/v1/stats/facts", params=scoped(A), expected=403),
        probe(
            "/v1/stats/facts",
            params={"project_id": B, "order": "never_served"},
            expected=200,
            check=only_b_facts_stats,
        ),
    ],
    # No chat model here: B reaching A's scope is a 403 before the model is asked; B's own scope
    # gets the unconfigured 503 (tests/test_extract.py checks what the model is shown).
    ("POST", "/v1/extract"): lambda w: [
        probe("/v1/extract", body=scoped(A, messages=[{"role": "user", "content": w.a_query}]), expected=403),
        probe(
            "/v1/extract",
            body={"subject_id": SUBJECT, "messages": [{"role": "user", "content": "x"}], "write": False},
            expected=503,
        ),
    ],
    # Memory lifecycle. B erasing its own subject `alice` leaves A's alice as it was.
    ("DELETE", "/v1/subjects/{subject_id}"): lambda w: [
        probe(f"/v1/subjects/{SUBJECT}", params={"project_id": A}, expected=403),
        probe(f"/v1/subjects/{SUBJECT}", expected=200, check=b_erasure_only),
    ],
    ("DELETE", "/v1/subjects"): lambda w: [
        probe("/v1/subjects", params=scoped(A), expected=403),
        probe("/v1/subjects", params={"subject_id": SUBJECT}, expected=200, check=b_erasure_only),
    ],
    ("GET", "/v1/subjects/export"): lambda w: [
        probe("/v1/subjects/export", params=scoped(A), expected=403),
        probe("/v1/subjects/export", params={"subject_id": SUBJECT}, expected=200),
    ],
    ("DELETE", "/v1/facts/{fact_id}"): lambda w: [
        probe(f"/v1/facts/{w.b_fact_id}", params={"project_id": A}, expected=403),
        *(probe(f"/v1/facts/{f}") for f in w.a_fact_ids),
    ],
    ("DELETE", "/v1/events/{event_id}"): lambda w: [
        probe(f"/v1/events/{w.a_event_id}"),
        probe(f"/v1/events/{w.a_event_id}", params={"project_id": A}, expected=403),
    ],
    ("GET", "/v1/events"): lambda w: [
        probe("/v1/events", params={"project_id": A}, expected=403),
        probe("/v1/events", params=scoped(A), expected=403),
        probe("/v1/events", params=scoped(B), expected=200, check=no_events),
    ],
    ("GET", "/v1/events/{event_id}"): lambda w: [
        probe(f"/v1/events/{w.a_event_id}"),
        probe(f"/v1/events/{w.a_event_id}", params={"project_id": A}, expected=403),
    ],
    ("GET", "/v1/subjects"): lambda w: [
        probe("/v1/subjects", params={"project_id": A}, expected=403),
        probe("/v1/subjects", params={"project_id": B}, expected=200, check=only_b_subject),
    ],
    # B cannot subscribe for A, nor on a loopback address; it sees no webhook but its own.
    ("POST", "/v1/webhooks"): lambda w: [
        probe(
            "/v1/webhooks",
            body={"project_id": A, "url": "http://93.184.215.14/", "events": ["fact.retracted"]},
            expected=403,
        ),
        probe(
            "/v1/webhooks", body={"url": "http://127.0.0.1:9/", "events": ["fact.retracted"]}, expected=422
        ),
    ],
    ("GET", "/v1/webhooks"): lambda w: [
        probe("/v1/webhooks", params={"project_id": A}, expected=403),
        probe(
            "/v1/webhooks",
            expected=200,
            check=lambda body, w: None if body == {"webhooks": []} else pytest.fail(str(body)),
        ),
    ],
    ("DELETE", "/v1/webhooks/{webhook_id}"): lambda w: [
        probe(f"/v1/webhooks/{uuid.uuid4()}"),
        probe(f"/v1/webhooks/{uuid.uuid4()}", params={"project_id": A}, expected=403),
    ],
    ("GET", "/v1/webhooks/{webhook_id}/deliveries"): lambda w: [
        probe(f"/v1/webhooks/{uuid.uuid4()}/deliveries"),
        probe(f"/v1/webhooks/{uuid.uuid4()}/deliveries", params={"project_id": A}, expected=403),
    ],
    ("GET", "/v1/subjects/{subject_id}/export"): lambda w: [
        probe(f"/v1/subjects/{SUBJECT}/export", params={"project_id": A}, expected=403),
        # B's own alice: its one fact, nothing of A's (the markers check reads the whole body).
        probe(f"/v1/subjects/{SUBJECT}/export", params={"project_id": B}, expected=200),
    ],
}


def b_erasure_only(body: Any, w: World) -> None:
    assert body["project_id"] == B and body["subject_id"] == SUBJECT, body
    assert body["facts"] == 1 and body["events"] == 0 and body["conflict_sets"] == 0, body


def no_events(body: Any, w: World) -> None:
    assert body["events"] == [], body


def only_b_subject(body: Any, w: World) -> None:
    assert [(s["subject_id"], s["facts"], s["events"]) for s in body["subjects"]] == [(SUBJECT, 1, 0)], body


# Routes the app serves outside its OpenAPI schema (the /ui pages, /metrics, the /docs pages), by
# Litestar's path format. B authenticates to /ui with a session of its own (its cookie, and the
# CSRF token that run_probes adds to every form).
OFF_SCHEMA: dict[tuple[str, str], Callable[[World], list[Probe]]] = {
    ("GET", "/ui"): lambda w: [probe("/ui", expected=303)],
    ("GET", "/ui/assets/haki.css"): lambda w: [probe("/ui/assets/haki.css", expected=200)],
    ("GET", "/ui/login"): lambda w: [probe("/ui/login", expected=200)],
    ("POST", "/ui/login"): lambda w: [probe("/ui/login", form={"key": "hk_not_a_key"}, expected=401)],
    ("POST", "/ui/logout"): lambda w: [probe("/ui/logout", form={}, expected=303)],
    ("GET", "/ui/subjects"): lambda w: [
        probe("/ui/subjects", expected=200),
        probe("/ui/subjects", params={"q": SUBJECT, "limit": 500}, expected=200),
    ],
    ("GET", "/ui/subject"): lambda w: [probe("/ui/subject", params={"subject_id": SUBJECT}, expected=200)],
    # A's webhooks are not listed to B: the page answers B's own (none) with 200.
    ("GET", "/ui/webhooks"): lambda w: [probe("/ui/webhooks", expected=200)],
    ("GET", "/ui/facts/{fact_id}"): lambda w: [probe(f"/ui/facts/{w.a_fact_ids[0]}")],
    ("GET", "/ui/conflicts/{conflict_set_id}"): lambda w: [probe(f"/ui/conflicts/{w.a_conflict_set_id}")],
    ("POST", "/ui/facts/{fact_id}/retract"): lambda w: [
        probe(f"/ui/facts/{w.a_fact_ids[0]}/retract", form={"confirm": "yes"})
    ],
    ("POST", "/ui/facts/{fact_id}/supersede"): lambda w: [
        probe(f"/ui/facts/{w.a_fact_ids[0]}/supersede", form={"content": "B's", "confirm": "yes"})
    ],
    ("POST", "/ui/conflicts/{conflict_set_id}/resolve"): lambda w: [
        probe(
            f"/ui/conflicts/{w.a_conflict_set_id}/resolve", form={"keep": w.a_fact_ids[0], "confirm": "yes"}
        )
    ],
    # B's own subject of the same id: the confirm page names B's memory only (nothing erased).
    ("POST", "/ui/subject/erase"): lambda w: [
        probe("/ui/subject/erase", form={"subject_id": SUBJECT}, expected=200)
    ],
    ("GET", "/ui/traces"): lambda w: [
        probe("/ui/traces", expected=200),
        probe("/ui/traces", params={"subject_id": SUBJECT, "limit": 500}, expected=200),
    ],
    ("GET", "/ui/traces/{trace_id}"): lambda w: [probe(f"/ui/traces/{w.a_trace_id}")],
    ("POST", "/ui/traces/{trace_id}/replay"): lambda w: [
        probe(f"/ui/traces/{w.a_trace_id}/replay", form={"budget_tokens": "100000", "profile": ""})
    ],
    # Its own token (HAKI_METRICS_TOKEN): a project key never opens the cross-project aggregates.
    ("GET", "/metrics"): lambda w: [probe("/metrics", expected=401)],
    ("GET", "/docs"): lambda w: [probe("/docs", expected=200)],
    ("GET", "/docs/openapi.json"): lambda w: [probe("/docs/openapi.json", expected=200)],
    ("GET", "/docs/swagger"): lambda w: [probe("/docs/swagger", expected=200)],
    ("GET", "/docs/{path}"): lambda w: [probe("/docs/openapi.yaml", expected={200, 404})],
    # The docs UI's assets (service/api/docs_ui.py): public files, no tenant data.
    ("GET", "/docs/assets/{name}"): lambda w: [probe("/docs/assets/swagger-ui.css", expected=200)],
}
SKIPPED_METHODS = {"OPTIONS", "HEAD"}  # Litestar's automatic answers, no data


def app_routes_outside_schema() -> list[tuple[str, str]]:
    app = create_app(Settings(embed_provider="hash"), pool=object(), embedder=HashEmbedder())
    in_schema = schema_routes(app.openapi_schema.to_schema())
    out = set()
    for route in app.routes:
        path = re.sub(r"\{(\w+):[^}]*\}", r"{\1}", route.path)
        for method in getattr(route, "methods", ()):
            if method not in SKIPPED_METHODS and (method, path) not in in_schema:
                out.add((method, path))
    return sorted(out, key=lambda mp: (mp[1], mp[0]))


def schema_routes(schema: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def built_routes() -> list[tuple[str, str]]:
    """The schema of an app built without a database, to parametrize at collection time; the
    served schema is compared with the table below, so the two cannot drift apart."""
    app = create_app(Settings(embed_provider="hash"), pool=object(), embedder=HashEmbedder())
    return sorted(schema_routes(app.openapi_schema.to_schema()), key=lambda mp: (mp[1], mp[0]))


ROUTES = built_routes()
OFF_SCHEMA_ROUTES = app_routes_outside_schema()


def test_every_route_outside_the_schema_has_probes() -> None:
    missing = sorted(set(OFF_SCHEMA_ROUTES) - set(OFF_SCHEMA))
    assert not missing, f"routes without isolation probes in tests/test_isolation.py OFF_SCHEMA: {missing}"
    stale = sorted(set(OFF_SCHEMA) - set(OFF_SCHEMA_ROUTES))
    assert not stale, f"OFF_SCHEMA entries for routes the app no longer has: {stale}"


async def test_every_served_route_has_probes(client: httpx.AsyncClient) -> None:
    served = schema_routes((await client.get("/docs/openapi.json")).json())
    assert served, "the served schema lists no route"
    missing = sorted(served - set(PROBES))
    assert not missing, f"routes without isolation probes in tests/test_isolation.py PROBES: {missing}"
    stale = sorted(set(PROBES) - served)
    assert not stale, f"PROBES entries for routes the app no longer serves: {stale}"
    assert served == set(ROUTES)


@pytest.fixture
async def world(client: httpx.AsyncClient, key: str, other_key: str) -> World:
    tag = uuid.uuid4().hex[:10]
    contents = [
        f"Alice works at Acme {tag}",
        f"Alice works at Globex {tag}",
        f"Alice is allergic to peanuts {tag}",
    ]
    r = await post_facts(
        client,
        key,
        [
            {"content": contents[0], "key": "employer"},
            {"content": contents[1], "key": "employer"},
            {"content": contents[2]},
        ],
        SUBJECT,
        A,
    )
    assert r.status_code == 201, r.text
    facts = r.json()["facts"]
    assert facts[0]["conflict_set_id"] is not None
    event_content = f"Alice moved to Lyon {tag}"
    r = await post_events(
        client, key, [{"content": event_content, "occurred_at": "2024-05-01T10:00:00Z"}], SUBJECT, A
    )
    assert r.status_code == 201, r.text
    event_id = r.json()["events"][0]["event_id"]
    query = f"Where does Alice work and what is she allergic to {tag}"
    r = await post_context(client, key, query, SUBJECT, A)
    assert r.status_code == 200, r.text
    packet = r.json()
    assert packet["facts"] and packet["episodes"], packet  # A's own key does see A's memories
    r = await client.post("/v1/facts", json=b_fact("Bob likes tea"), headers=bearer(other_key))
    assert r.status_code == 201, r.text
    return World(
        a_fact_ids=[f["fact_id"] for f in facts],
        a_event_id=event_id,
        a_conflict_set_id=facts[0]["conflict_set_id"],
        a_trace_id=packet["trace_id"],
        a_contents=[*contents, event_content],
        a_query=query,
        b_fact_id=r.json()["facts"][0]["fact_id"],
    )


async def a_snapshot(client: httpx.AsyncClient, key: str, w: World) -> Any:
    facts = (await client.get("/v1/facts", params={"project_id": A}, headers=bearer(key))).json()
    conflicts = (await client.get("/v1/conflicts", params={"project_id": A}, headers=bearer(key))).json()
    trace = (await client.get(f"/v1/inspect/{w.a_trace_id}", headers=bearer(key))).json()
    stats = (await client.get("/v1/stats/overview", params={"project_id": A}, headers=bearer(key))).json()
    events = (await client.get("/v1/events", params={"project_id": A}, headers=bearer(key))).json()
    return facts, conflicts, trace, stats, events


async def run_probes(
    client: httpx.AsyncClient, key: str, other_key: str, w: World, method: str, probes: list[Probe]
) -> None:
    before = await a_snapshot(client, key, w)
    # B's key as the API wants it, and B's session as the /ui pages keep it (a cookie).
    session = await ui_login(client, other_key)
    headers = {**bearer(other_key), **session.headers}
    for p in probes:
        form = None if p.form is None else session.form(**p.form)
        r = await client.request(
            method, p.url, params=p.params, json=p.body, data=form, headers=headers, follow_redirects=False
        )
        assert r.status_code in p.expected, (method, p.url, p.body, r.status_code, r.text)
        # An id B sent may be echoed back (a 404 names the id it did not find); nothing else may.
        sent = f"{p.url} {p.params} {p.body}"
        for marker in w.markers:
            assert marker in sent or marker not in r.text, (method, p.url, marker, r.text)
        if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json"):
            body = r.json()
            assert set(body) <= {"code", "message", "details"}, body
        if p.check is not None:
            p.check(r.json(), w)
    # Nothing B did changed anything of A.
    assert await a_snapshot(client, key, w) == before


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
async def test_key_of_b_never_reaches_a(
    client: httpx.AsyncClient, key: str, other_key: str, world: World, method: str, path: str
) -> None:
    await run_probes(client, key, other_key, world, method, PROBES[(method, path)](world))


@pytest.mark.parametrize(
    ("method", "path"), OFF_SCHEMA_ROUTES, ids=[f"{m} {p}" for m, p in OFF_SCHEMA_ROUTES]
)
async def test_key_of_b_never_reaches_a_outside_the_schema(
    client: httpx.AsyncClient, key: str, other_key: str, world: World, method: str, path: str
) -> None:
    await run_probes(client, key, other_key, world, method, OFF_SCHEMA[(method, path)](world))
