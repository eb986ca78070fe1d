"""The first hour: what a new user trips over, each fixed and held here."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import httpx
import msgspec
import pytest
from haki_client import ContextPacket, PacketFact, render

from tests.helpers import bearer

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
    this test was written) answers validation_error for a malformed id, not a bare 404 (under
    /ui, on the error page)."""
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
            if path.startswith("/ui/"):  # the browser's error page says it
                assert r.headers["content-type"].startswith("text/html") and "a UUID is expected" in r.text
            else:
                assert r.json()["code"] == "validation_error", r.text
                assert "a UUID is expected" in r.json()["message"]
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize(
    ("method", "url", "field"),
    [
        ("DELETE", "/v1/subjects?subject_id=%FF", "subject_id"),
        ("GET", "/v1/facts?subject_id=a%C0%AF", "subject_id"),
        ("GET", "/v1/facts?sub%FFject=a", "sub\ufffdject"),
        ("GET", "/v1/subjects/%ED%A0%80/export", "subject_id"),
        ("DELETE", "/v1/subjects/x%FF", "subject_id"),
    ],
)
async def test_percent_escapes_that_are_not_utf8_are_refused_naming_the_parameter(
    client: httpx.AsyncClient, key: str, method: str, url: str, field: str
) -> None:
    """Read with U+FFFD in their place, they named another subject (`%FF`: the subject "\ufffd")."""
    await client.post(
        "/v1/facts", json={"subject_id": "\ufffd", "facts": [{"content": "kept"}]}, headers=bearer(key)
    )
    r = await client.request(method, url, headers=bearer(key))
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "validation_error" and r.json()["details"]["field"] == field, r.text
    held = await client.get("/v1/facts", params={"subject_id": "\ufffd"}, headers=bearer(key))
    assert [f["content"] for f in held.json()["facts"]] == ["kept"]
    # The subject's own id, percent-encoded as UTF-8, reaches it.
    assert (await client.get("/v1/subjects/%EF%BF%BD/export", headers=bearer(key))).status_code == 200


async def test_unknown_route_is_still_a_plain_not_found(client: httpx.AsyncClient, key: str) -> None:
    r = await client.get("/v1/nothing-here/garbage", headers=bearer(key))
    assert r.status_code == 404
    assert r.json()["code"] == "not_found"


async def test_well_formed_unknown_id_is_still_not_found(client: httpx.AsyncClient, key: str) -> None:
    r = await client.get("/v1/inspect/0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f", headers=bearer(key))
    assert r.status_code == 404, r.text


# --- item 4: project_id defaults to the key's project on every route ---------------------------


@pytest.mark.parametrize("path", ["/v1/facts", "/v1/conflicts", "/v1/stats/overview"])
async def test_list_routes_default_project_id_to_the_keys_project(
    client: httpx.AsyncClient, key: str, path: str
) -> None:
    r = await client.get(path, headers=bearer(key))
    assert r.status_code == 200, r.text
    r = await client.get(path, params={"project_id": "proj-b"}, headers=bearer(key))
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "forbidden"
    assert r.json()["details"]["field"] == "project_id"
    r = await client.get(path, params={"project_id": ""}, headers=bearer(key))
    assert r.status_code == 400, r.text
    assert r.json()["details"]["field"] == "project_id"


async def test_write_and_context_bodies_default_project_id_to_the_keys_project(
    client: httpx.AsyncClient, key: str
) -> None:
    r = await client.post(
        "/v1/facts",
        json={"subject_id": "first-hour", "facts": [{"content": "Ada lives in Lyon"}]},
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text
    (written,) = r.json()["facts"]
    fact = (await client.get(f"/v1/facts/{written['fact_id']}", headers=bearer(key))).json()
    assert fact["project_id"] == "proj-a"
    r = await client.post(
        "/v1/events",
        json={
            "subject_id": "first-hour",
            "events": [{"content": "moved", "occurred_at": "2026-01-02T03:04:05Z"}],
        },
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text
    r = await client.post(
        "/v1/context", json={"subject_id": "first-hour", "query": "Where does Ada live?"}, headers=bearer(key)
    )
    assert r.status_code == 200, r.text
    assert [f["fact_id"] for f in r.json()["facts"]] == [written["fact_id"]]
    listed = (await client.get("/v1/facts", params={"subject_id": "first-hour"}, headers=bearer(key))).json()
    assert [f["fact_id"] for f in listed["facts"]] == [written["fact_id"]]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/facts", {"subject_id": "s", "facts": [{"content": "x"}]}),
        (
            "/v1/events",
            {"subject_id": "s", "events": [{"content": "x", "occurred_at": "2026-01-02T03:04:05Z"}]},
        ),
        ("/v1/context", {"subject_id": "s", "query": "x"}),
    ],
)
async def test_bodies_naming_another_project_stay_forbidden_and_empty_is_refused(
    client: httpx.AsyncClient, key: str, path: str, body: dict[str, object]
) -> None:
    r = await client.post(path, json={**body, "project_id": "proj-b"}, headers=bearer(key))
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "forbidden"
    r = await client.post(path, json={**body, "project_id": ""}, headers=bearer(key))
    assert r.status_code == 400, r.text
    assert r.json()["details"]["field"] == "project_id"


async def test_openapi_says_project_id_is_optional(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/docs/openapi.json")).json()
    for path in ("/v1/facts", "/v1/conflicts", "/v1/stats/overview"):
        (param,) = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "project_id"]
        assert param["in"] == "query" and not param.get("required", False)
        assert "key's project" in param["description"]
    for name in ("WriteFactsRequest", "WriteEventsRequest", "ContextRequest"):
        component = schema["components"]["schemas"][name]
        assert "project_id" not in component.get("required", []), name
        assert "key's project" in component["properties"]["project_id"]["description"]


# --- item 6: small HTTP manners -----------------------------------------------------------------


async def test_head_healthz_answers_200_without_a_body(client: httpx.AsyncClient) -> None:
    r = await client.head("/healthz")
    assert r.status_code == 200, r.text
    assert r.content == b""
    assert (await client.get("/healthz")).json()["status"] == "ok"


async def test_openapi_budget_tokens_maximum_is_an_integer_the_server_accepts(
    client: httpx.AsyncClient, key: str
) -> None:
    raw = (await client.get("/docs/openapi.json")).text
    budget = json.loads(raw)["components"]["schemas"]["ContextRequest"]["properties"]["budget_tokens"]
    maximum, minimum = budget["maximum"], budget["minimum"]
    assert type(maximum) is int and type(minimum) is int, budget
    body = {"subject_id": "manners", "query": "anything", "project_id": "proj-a"}
    r = await client.post("/v1/context", json={**body, "budget_tokens": maximum}, headers=bearer(key))
    assert r.status_code == 200, r.text
    r = await client.post("/v1/context", json={**body, "budget_tokens": maximum + 1}, headers=bearer(key))
    assert r.status_code == 400 and r.json()["code"] == "budget_exceeded", r.text
    r = await client.post("/v1/context", json={**body, "budget_tokens": minimum - 1}, headers=bearer(key))
    assert r.status_code == 400 and r.json()["code"] == "budget_exceeded", r.text


# --- item 8: an empty or blocked packet can say so -------------------------------------------


def _sdk_packet(warnings: list[str], facts: int = 0) -> ContextPacket:
    return ContextPacket(
        trace_id=uuid.uuid4(),
        status="degraded" if warnings else "ok",
        budget_tokens=900,
        used_tokens=0,
        facts=[
            PacketFact(
                fact_id=uuid.uuid4(),
                content=f"fact {i}",
                score=0.5,
                tokens=2,
                reason_code="packed",
                recorded_from=datetime(2025, 1, 1, tzinfo=UTC),
            )
            for i in range(facts)
        ],
        episodes=[],
        warnings=warnings,
    )


CONFLICT_WARNING = "open_conflict: 2 fact(s) hidden pending conflict resolution"
STALE_WARNING = "volatility_expired: 1 fact(s) hidden because their stale_after_seconds passed"


def test_packet_hidden_counts_held_back_facts_by_reason() -> None:
    assert _sdk_packet([]).hidden == {}
    assert _sdk_packet(["embedding_unavailable: full text only"]).hidden == {}
    packet = _sdk_packet([CONFLICT_WARNING, STALE_WARNING])
    assert packet.is_empty
    assert packet.hidden == {"open_conflict": 2, "volatility_expired": 1}


def test_render_states_warnings_of_an_empty_packet_only_when_asked() -> None:
    blocked = _sdk_packet([CONFLICT_WARNING])
    nothing = _sdk_packet([])
    # The default is unchanged (spec: an empty packet renders as nothing).
    assert render(blocked) == "" and render(nothing) == ""
    assert render(nothing, state_warnings=True) == ""
    assert render(blocked, state_warnings=True) == (
        "<haki_memory>\n"
        "Nothing served: 2 fact(s) about this subject are known but held back (see the warnings).\n"
        "Warnings:\n"
        f"- {CONFLICT_WARNING}\n"
        "</haki_memory>"
    )
    degraded = render(_sdk_packet(["embedding_unavailable: full text only"]), state_warnings=True)
    assert degraded.splitlines()[1] == "Nothing served (see the warnings)."
    # A packet that serves something renders the same either way.
    served = _sdk_packet([CONFLICT_WARNING], facts=1)
    assert render(served, state_warnings=True) == render(served)


async def test_sdk_tells_nothing_known_from_held_back_on_a_real_packet(
    client: httpx.AsyncClient, key: str
) -> None:
    async def packet(subject: str) -> ContextPacket:
        r = await client.post(
            "/v1/context", json={"subject_id": subject, "query": "Where does Maya work?"}, headers=bearer(key)
        )
        assert r.status_code == 200, r.text
        return msgspec.json.decode(r.content, type=ContextPacket)

    for content in ("Maya works at Lyon Sud hospital.", "Maya works at Croix-Rousse hospital."):
        r = await client.post(
            "/v1/facts",
            json={"subject_id": "held", "facts": [{"content": content, "key": "employer"}]},
            headers=bearer(key),
        )
        assert r.status_code == 201, r.text
    held, unknown = await packet("held"), await packet("nobody")
    assert held.is_empty and unknown.is_empty
    assert held.hidden == {"open_conflict": 2} and unknown.hidden == {}
    assert render(held) == "" == render(unknown)
    assert "2 fact(s)" in render(held, state_warnings=True)
    assert render(unknown, state_warnings=True) == ""


async def test_an_unknown_key_says_where_keys_live(client: httpx.AsyncClient) -> None:
    """The usual cause beside a typo: `haki keys create` run against another database."""
    r = await client.get("/v1/subjects", headers=bearer("hk_" + "A" * 43))
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert "HAKI_DATA_DIR" in r.json()["message"] and "HAKI_DATABASE_URL" in r.json()["message"]
