"""GET /metrics: Prometheus text format, bounded labels, and values that move with traffic."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from service.constants import BEARER_CHALLENGE
from service.db.replica import ReplicaMetrics
from service.observability.metrics import Metrics
from tests.helpers import METRICS_AUTH, METRICS_TOKEN, assert_error, bearer, post_facts, write_events

PROJECT = "proj-a"
# The stages of the default `unified` profile (facts_first also times "episodes").
STAGES = ("embed", "candidates", "multi_hop", "pack", "trace")


async def scrape(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = await client.get("/metrics", headers=METRICS_AUTH)  # its own token: docs/scaling.md, "Metrics"
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def requests_counted(before: dict[Any, float], after: dict[Any, float], **labels: str) -> float:
    name = "haki_http_request_duration_seconds_count"
    return value(after, name, **labels) - value(before, name, **labels)


def routes_of(samples: dict[Any, float]) -> set[str]:
    return {dict(labels)["route"] for name, labels in samples if name.startswith("haki_http_request")}


async def test_metric_names_and_moving_values(client: Any, key: str) -> None:
    before = await scrape(client)
    for name in (
        "haki_open_conflicts",
        "haki_database_up",
        "haki_context_injections_total",
    ):
        assert any(n == name for n, _ in before), name
    assert value(before, "haki_database_up") == 1.0

    r = await post_facts(
        client,
        key,
        [
            {"content": "Mia works at Initech.", "key": "employer"},
            {"content": "Mia works at Umbrella.", "key": "employer"},
            {"content": "Mia plays the cello in an orchestra."},
        ],
        "m1",
    )
    assert r.status_code == 201, r.text
    fact_id = r.json()["facts"][2]["fact_id"]
    served = await client.post(
        "/v1/context",
        json={"project_id": PROJECT, "subject_id": "m1", "query": "What does Mia play?"},
        headers=bearer(key),
    )
    assert served.status_code == 200 and served.json()["facts"], served.text
    empty = await client.post(
        "/v1/context",
        json={"project_id": PROJECT, "subject_id": "nobody", "query": "anything?"},
        headers=bearer(key),
    )
    assert empty.status_code == 200 and not empty.json()["facts"]
    assert (await client.get(f"/v1/facts/{fact_id}", headers=bearer(key))).status_code == 200
    assert (await client.get("/v1/stats/overview?project_id=proj-a")).status_code == 401

    after = await scrape(client)
    # Only the call that served a fact is an injection; both are calls (one degraded: conflict).
    assert value(after, "haki_context_injections_total") - value(before, "haki_context_injections_total") == 1
    calls = sum(
        value(after, "haki_context_calls_total", status=s, profile="unified")
        - value(before, "haki_context_calls_total", status=s, profile="unified")
        for s in ("ok", "degraded")
    )
    assert calls == 2
    assert value(after, "haki_context_calls_total", status="degraded", profile="unified") >= 1
    for stage in STAGES:
        labels = {"stage": stage, "profile": "unified"}
        moved = value(after, "haki_context_stage_duration_seconds_count", **labels) - value(
            before, "haki_context_stage_duration_seconds_count", **labels
        )
        assert moved == 2, stage
        assert value(after, "haki_context_stage_duration_seconds_sum", **labels) > 0, stage

    # Latency per route template, never per raw path (ids would explode the cardinality).
    ctx = {"method": "POST", "route": "/v1/context", "status": "200"}
    assert (
        value(after, "haki_http_request_duration_seconds_count", **ctx)
        - value(before, "haki_http_request_duration_seconds_count", **ctx)
        == 2
    )
    routes = {dict(labels).get("route") for name, labels in after if name.startswith("haki_http_request")}
    assert "/v1/facts/{fact_id}" in routes
    assert not any(fact_id in (r or "") for r in routes)
    refused = {"method": "GET", "route": "/v1/stats/overview", "status": "401"}
    assert (
        value(after, "haki_http_request_duration_seconds_count", **refused)
        - value(before, "haki_http_request_duration_seconds_count", **refused)
        == 1
    )

    # The open-conflicts gauge is refreshed at scrape time.
    assert value(after, "haki_open_conflicts") == value(before, "haki_open_conflicts") + 1


async def test_the_event_context_backlog_is_a_gauge(
    settings: Any, conn: Any, hash_embedder: Any, key: str
) -> None:
    from tests.helpers.app import make_client

    # Written events wait for their vector in context: the write leaves it to the background task
    # (HAKI_EVENT_CONTEXT_INLINE off), which no test's connection runs.
    async with make_client(settings, conn, hash_embedder, event_context_inline=False) as client:
        before = value(await scrape(client), "haki_event_context_pending")
        await write_events(client, key, [("Mia tuned the cello", "2024-03-01T09:30:00Z")] * 3, "m2")
        assert value(await scrape(client), "haki_event_context_pending") == before + 3


async def test_metrics_is_not_in_the_api_schema(client: Any) -> None:
    spec = (await client.get("/docs/openapi.json")).json()
    assert "/metrics" not in spec["paths"]
    assert not any(p.startswith("/ui") for p in spec["paths"])


async def test_metrics_is_closed_without_a_token(
    settings: Any, conn: Any, hash_embedder: Any, key: str
) -> None:
    """Every route but /healthz and the API docs needs a bearer (docs/spec/api.md): without
    HAKI_METRICS_TOKEN /metrics answers no one (it was open), and a project key never opens it."""
    from tests.helpers.app import make_client

    async with make_client(settings, conn, hash_embedder, metrics_token=None) as c:
        for headers in ({}, bearer(key), METRICS_AUTH):
            r = await c.get("/metrics", headers=headers)
            assert r.status_code == 401 and r.json()["code"] == "unauthorized", r.text
            assert "set HAKI_METRICS_TOKEN" in r.json()["message"]
            assert "haki_" not in r.text


async def test_metrics_token_when_configured(settings: Any, conn: Any, hash_embedder: Any) -> None:
    """With HAKI_METRICS_TOKEN set, /metrics needs that token and refuses project keys."""
    from tests.helpers.app import make_client

    async with make_client(settings, conn, hash_embedder, metrics_token="s3cret-scrape") as c:
        assert (await c.get("/metrics")).status_code == 401
        wrong = await c.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.json()["code"] == "unauthorized"
        ok = await c.get("/metrics", headers={"Authorization": "Bearer s3cret-scrape"})
        assert ok.status_code == 200
        assert b"haki_open_conflicts" in ok.content


async def test_requests_refused_while_routing_are_counted(client: Any, key: str) -> None:
    """A malformed path id (400), an unknown path (404) and a wrong method (405) are refused by
    Litestar's router, before any route's middleware: they went uncounted, and an error-rate
    alert never saw them. Counted under one bounded route label, never the raw path."""
    before = await scrape(client)
    assert_error(await client.get("/v1/facts/not-a-uuid", headers=bearer(key)), 400, "validation_error")
    assert (await client.get("/v1/no-such-route-42", headers=bearer(key))).status_code == 404
    assert (await client.delete("/v1/context", headers=bearer(key))).status_code == 405
    # A method outside HTTP's (an ASGI server other than httptools passes any token on).
    assert (await client.request("FROBNICATE", "/v1/facts", headers=bearer(key))).status_code == 405
    after = await scrape(client)
    for method, status in (("GET", "400"), ("GET", "404"), ("DELETE", "405"), ("<other>", "405")):
        assert requests_counted(before, after, method=method, route="<unmatched>", status=status) == 1
    assert not any("not-a-uuid" in r or "no-such-route" in r for r in routes_of(after))
    assert not any(dict(labels).get("method") == "FROBNICATE" for _, labels in after)


async def test_mcp_requests_are_counted_under_the_mount_s_path(
    settings: Any, conn: Any, hash_embedder: Any, key: str
) -> None:
    """/mcp is a mount, whose route template Litestar leaves empty: every MCP request was counted
    as `<unmatched>`, the agent surface mixed with requests that matched nothing."""
    from tests.helpers.app import asgi_transport
    from tests.helpers.mcp_sessions import mcp_in_process

    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with (
        mcp_in_process(settings, conn, hash_embedder, key) as (app, _, _),
        httpx.AsyncClient(transport=asgi_transport(app), base_url="http://haki.test") as client,
    ):
        before = await scrape(client)
        assert (await client.post("/mcp", json=ping, headers={**accept, **bearer(key)})).status_code == 200
        assert_error(await client.post("/mcp", json=ping, headers=accept), 401, "unauthorized")
        after = await scrape(client)
    for status in ("200", "401"):
        assert requests_counted(before, after, method="POST", route="/mcp", status=status) == 1
    assert requests_counted(before, after, method="POST", route="<unmatched>", status="200") == 0


async def test_metrics_takes_the_bearer_as_the_api_does(client: Any) -> None:
    """The scheme is case-insensitive (RFC 7235), as on /v1 and /mcp, and a 401 carries the
    API's `WWW-Authenticate` challenge (assert_error checks it)."""
    for given in (f"bearer {METRICS_TOKEN}", f"BEARER  {METRICS_TOKEN}", f"Bearer {METRICS_TOKEN} "):
        r = await client.get("/metrics", headers={"Authorization": given})
        assert r.status_code == 200, (given, r.text)
    for refused in ("", "Bearer nope", f"Basic {METRICS_TOKEN}", METRICS_TOKEN, f"Bearer {METRICS_TOKEN}x"):
        r = await client.get("/metrics", headers={"Authorization": refused} if refused else {})
        assert_error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == BEARER_CHALLENGE


def test_every_metric_is_named_in_the_docs() -> None:
    """docs/scaling.md lists the metrics an operator can scrape: each one the app can register
    (the replica's and the local model's included) is named there."""
    metrics = Metrics()
    ReplicaMetrics(metrics.registry)
    metrics.embedder_stats.embedder = SimpleNamespace(scheduler=SimpleNamespace(stats={}))
    names = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in metrics.registry.collect()
    }
    assert "haki_http_request_duration_seconds" in names and "haki_embed_texts_total" in names
    docs = (Path(__file__).resolve().parents[1] / "docs" / "scaling.md").read_text()
    assert sorted(name for name in names if f"`{name}" not in docs) == []
    assert "_created" in docs.split("## Metrics", 1)[1]
