"""The shared test helpers: writes, reads, context calls and their traces through HTTP, the
contract's error body, and the checks that every packet must pass whatever its profile.

Submodules: `server` (a real `haki serve` subprocess), `serving` (the app under uvicorn in a
thread), `seeding` (big scopes seeded server-side). Test modules import helpers from here only,
never from each other."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import numpy as np
import pytest

from service.constants import BEARER_CHALLENGE, WEIGHT_RECENCY, WEIGHT_SIMILARITY, WEIGHT_TEXT_RANK
from service.embedding.embedder import Embedder, HashEmbedder, Vector

PROJECT = "proj-a"


class CountingEmbedder(HashEmbedder):
    """A hash model that counts the texts it is asked to embed for writes (a provider bills them)."""

    written = 0

    async def embed(self, texts: Sequence[str], **kw: Any) -> list[Vector]:
        if kw.get("purpose") == "write":
            self.written += len(texts)
        return await super().embed(texts, **kw)


def bearer(k: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {k}"}


OTHER_PROJECT = "proj-b"
# The test apps' HAKI_METRICS_TOKEN (tests/conftest.py `settings`): /metrics is closed without one.
METRICS_TOKEN = "test-metrics-token"
METRICS_AUTH = {"Authorization": f"Bearer {METRICS_TOKEN}"}
DAY = 24 * 3600.0

# ts_rank_cd of a one-word query against a text holding it once: the D-weight 0.1 of one cover,
# normalised (flag 32) to rank / (rank + 1).
ONE_HIT_TEXT_RANK = 0.1 / 1.1


def iso(dt: datetime) -> str:
    return dt.isoformat()


def days_from_now(days: float) -> str:
    return iso(datetime.now(UTC) + timedelta(days=days))


def tokens_of(text: str) -> int:
    return max(1, len(text) // 4)


def json_of(r: httpx.Response, status: int = 200) -> Any:
    """The JSON body of a response that must have `status` (its text shown when it has not)."""
    assert r.status_code == status, r.text
    return r.json()


async def post_scoped(
    client: httpx.AsyncClient, key: str, path: str, subject_id: str, project_id: str, **fields: Any
) -> httpx.Response:
    """POST `path` with the key, a body on one project and subject."""
    body = {"project_id": project_id, "subject_id": subject_id, **fields}
    return await client.post(path, json=body, headers=bearer(key))


async def post_facts(
    client: httpx.AsyncClient,
    key: str,
    facts: Sequence[dict[str, Any] | str],
    subject_id: str = "u1",
    project_id: str = PROJECT,
) -> httpx.Response:
    """POST /v1/facts; a bare string is a fact's content."""
    body = [{"content": f} if isinstance(f, str) else f for f in facts]
    return await post_scoped(client, key, "/v1/facts", subject_id, project_id, facts=body)


async def write_facts(
    client: httpx.AsyncClient,
    key: str,
    facts: Sequence[dict[str, Any] | str],
    subject_id: str = "u1",
    project_id: str = PROJECT,
) -> list[dict[str, Any]]:
    r = await post_facts(client, key, facts, subject_id, project_id)
    results: list[dict[str, Any]] = json_of(r, 201)["facts"]
    assert len(results) == len(facts)
    return results


async def get_fact(client: httpx.AsyncClient, key: str, fact_id: str) -> dict[str, Any]:
    fact: dict[str, Any] = json_of(await client.get(f"/v1/facts/{fact_id}", headers=bearer(key)))
    return fact


async def list_all_facts(
    client: httpx.AsyncClient, key: str, project_id: str = PROJECT, **params: Any
) -> list[dict[str, Any]]:
    """Every fact of the project matching `params`, following the cursor to the end."""
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(1000):
        query = {"project_id": project_id, "limit": 500, **params}
        if cursor:
            query["cursor"] = cursor
        page = json_of(await client.get("/v1/facts", params=query, headers=bearer(key)))
        out.extend(page["facts"])
        cursor = page["next_cursor"]
        if cursor is None:
            return out
    raise AssertionError("pagination did not end")


def ts(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


async def fact_ids(
    client: httpx.AsyncClient,
    key: str,
    facts: Sequence[dict[str, Any] | str],
    subject_id: str = "u1",
    project_id: str = PROJECT,
) -> list[str]:
    return [r["fact_id"] for r in await write_facts(client, key, facts, subject_id, project_id)]


async def post_events(
    client: httpx.AsyncClient,
    key: str,
    events: Sequence[tuple[str, str] | dict[str, Any]],
    subject_id: str = "u1",
    project_id: str = PROJECT,
) -> httpx.Response:
    """POST /v1/events; a (content, occurred_at) pair is an event with just those."""
    body = [{"content": e[0], "occurred_at": e[1]} if isinstance(e, tuple) else e for e in events]
    return await post_scoped(client, key, "/v1/events", subject_id, project_id, events=body)


async def write_events(
    client: httpx.AsyncClient,
    key: str,
    events: Sequence[tuple[str, str] | dict[str, Any]],
    subject_id: str = "u1",
    project_id: str = PROJECT,
) -> list[str]:
    body = json_of(await post_events(client, key, events, subject_id, project_id), 201)
    assert set(body) == {"events"} and len(body["events"]) == len(events), body
    return [e["event_id"] for e in body["events"]]


async def post_context(
    client: httpx.AsyncClient,
    key: str,
    query: str,
    subject_id: str = "u1",
    project_id: str = PROJECT,
    **extra: Any,
) -> httpx.Response:
    return await post_scoped(client, key, "/v1/context", subject_id, project_id, query=query, **extra)


async def context(
    client: httpx.AsyncClient,
    key: str,
    query: str,
    subject_id: str = "u1",
    project_id: str = PROJECT,
    **extra: Any,
) -> dict[str, Any]:
    packet: dict[str, Any] = json_of(await post_context(client, key, query, subject_id, project_id, **extra))
    assert packet["used_tokens"] <= packet["budget_tokens"], packet
    return packet


async def inspect(client: httpx.AsyncClient, key: str, trace_id: str) -> dict[str, Any]:
    found: dict[str, Any] = json_of(await client.get(f"/v1/inspect/{trace_id}", headers=bearer(key)))
    return found


async def context_and_trace(
    client: httpx.AsyncClient, key: str, query: str, subject_id: str = "u1", **extra: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    packet = await context(client, key, query, subject_id, **extra)
    return packet, await inspect(client, key, packet["trace_id"])


def by_item(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Decisions keyed by item id; an item is decided at most once per call."""
    out: dict[str, dict[str, Any]] = {}
    for d in trace["decisions"]:
        assert d["item_id"] not in out, f"item decided twice: {d}"
        out[d["item_id"]] = d
    return out


def candidate_decisions(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Fact decisions coming from the candidates (not blocked, not multi-hop), in trace order.

    Multi-hop rows rank after every candidate; one refused for budget is traced over_budget, so
    it is told apart by its rank only when some other multi-hop row was included: tests that
    count candidates use scopes where that cannot happen."""
    rows = [
        d
        for d in trace["decisions"]
        if d["item_type"] == "fact"
        and d["decision"] != "blocked"
        and d["reason_code"] != "multi_hop_expansion"
    ]
    multi_hop_ranks = {d["rank"] for d in trace["decisions"] if d["reason_code"] == "multi_hop_expansion"}
    # Multi-hop rows excluded for budget carry over_budget; they rank after every candidate.
    first_hop = min(multi_hop_ranks, default=None)
    return [d for d in rows if first_hop is None or d["rank"] < first_hop]


def expected_score(d: dict[str, Any]) -> float:
    similarity = d["similarity"] if d["similarity"] is not None else 0.0
    return float(
        WEIGHT_SIMILARITY * similarity + WEIGHT_TEXT_RANK * d["text_rank"] + WEIGHT_RECENCY * d["recency"]
    )


def assert_packet_matches_trace(packet: dict[str, Any], trace: dict[str, Any]) -> None:
    """Every served item is traced `included` with the same tokens and score; nothing else is."""
    decided = by_item(trace)
    served = [("fact", f["fact_id"], f) for f in packet["facts"]] + [
        ("episode", e["event_id"], e) for e in packet["episodes"]
    ]
    for item_type, item_id, item in served:
        d = decided[item_id]
        assert d["item_type"] == item_type
        assert d["decision"] == "included", d
        assert d["tokens"] == item["tokens"] == tokens_of(item["content"])
        assert d["score"] == pytest.approx(item["score"], abs=1e-12)
    for f in packet["facts"]:
        assert decided[f["fact_id"]]["reason_code"] == f["reason_code"]
    included = [d["item_id"] for d in trace["decisions"] if d["decision"] == "included"]
    assert sorted(included) == sorted(i for _, i, _ in served)
    assert packet["used_tokens"] == sum(item["tokens"] for _, _, item in served)
    for field in ("budget_tokens", "used_tokens", "status", "warnings", "empty_reason"):
        assert trace[field] == packet[field], field


async def cosine_distances(embedder: Embedder, query: str, texts: Sequence[str]) -> list[float]:
    """The model's own cosine distances, computed outside the database: the query embedded as a
    context call embeds it (HAKI_EMBED_QUERY_PRECISION), the texts as they were stored."""
    (query_vector,) = await embedder.embed([query], purpose="query")
    q = query_vector.astype(np.float64)
    return [1.0 - float(np.dot(q, v.astype(np.float64))) for v in await embedder.embed(list(texts))]


async def stats(client: httpx.AsyncClient, key: str, project_id: str = PROJECT) -> httpx.Response:
    return await client.get("/v1/stats/overview", params={"project_id": project_id}, headers=bearer(key))


def assert_error(r: httpx.Response, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    """The contract's error body: exactly {code, message, details?}, never a 500."""
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body, dict), body
    assert {"code", "message"} <= set(body) <= {"code", "message", "details"}, body
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"], body
    if "details" in body:
        assert isinstance(body["details"], dict), body
    if field is not None:
        assert body.get("details", {}).get("field") == field, body
    if status == 401:  # RFC 7235: a 401 names the scheme it asks for, on every route alike
        assert r.headers.get("www-authenticate") == BEARER_CHALLENGE, r.headers
    return body


def load_file_module(name: str, path: Path) -> ModuleType:
    """A script or benchmark (not a package module) imported by its path, for a test to call its
    functions; registered in sys.modules first, where dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def needs_program(
    path: str | None, name: str, install: str, what: str = "this test"
) -> list[pytest.MarkDecorator]:
    """The marks of a module whose tests run an installed program: skipped where `path` (its
    executable) was not found, saying how to install it, and `integration` (they start a process)."""
    return [
        pytest.mark.skipif(path is None, reason=f"{name} is not installed: {install} enables {what}"),
        pytest.mark.integration,
    ]


def metric_sample(text: str, name: str, **labels: str) -> float:
    """A sample of the Prometheus exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)"
    found = re.search(r"^" + pattern + "$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def metric(client: httpx.AsyncClient, name: str, **labels: str) -> float:
    """One sample of the client's app's GET /metrics (0 when absent)."""
    r = await client.get("/metrics", headers=METRICS_AUTH)
    assert r.status_code == 200, r.text
    return metric_sample(r.text, name, **labels)
