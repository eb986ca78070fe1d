"""Swagger's "Try it out" works as filled: every request body's fields carry a realistic example
(a pattern alone made Swagger invent strings such as `4#U^MT%iJ_Zt`), and the body built from
the examples, as Swagger builds it, is accepted by the route with a real key of the example's
project. In headless Chromium: executing the prefilled `POST /v1/context` answers 200."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from service.api import auth
from tests.helpers import bearer
from tests.helpers.chromium import BROWSER_TEST, STEP_TIMEOUT_SECONDS, chromium
from tests.helpers.server import Server

# The project the examples name: the README quick start's (`haki keys create demo`).
EXAMPLE_PROJECT = "demo"


def resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        resolved: dict[str, Any] = spec["components"]["schemas"][ref.rsplit("/", 1)[-1]]
        return resolved
    return schema


def sample(schema: dict[str, Any], spec: dict[str, Any]) -> Any:
    """The value Swagger UI prefills: the example, else the default, else built from the parts."""
    schema = resolve(schema, spec)
    if schema.get("examples"):
        return schema["examples"][0]
    if "default" in schema:
        return schema["default"]
    if "oneOf" in schema:
        return sample(schema["oneOf"][0], spec)
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object" or "properties" in schema:
        return {name: sample(sub, spec) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [sample(schema.get("items", {}), spec)]
    return {"integer": 0, "number": 0.0, "boolean": True}.get(str(kind), "string")


def request_bodies(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                out[(method.upper(), path)] = resolve(body["schema"], spec)
    return out


def strings_without_example(schema: dict[str, Any], spec: dict[str, Any], where: str) -> list[str]:
    """Every string field (at any depth) that Swagger would fill with an invented string."""
    schema = resolve(schema, spec)
    missing = []
    for name, sub in schema.get("properties", {}).items():
        sub = resolve(sub, spec)
        here = f"{where}.{name}"
        if sub.get("type") == "array":
            missing += strings_without_example(sub.get("items", {}), spec, here + "[]")
        elif "properties" in sub:
            missing += strings_without_example(sub, spec, here)
        elif not sub.get("examples") and "default" not in sub and not sub.get("enum"):
            variants = [resolve(v, spec) for v in sub.get("oneOf", [sub])]
            if any(v.get("type") == "string" or v.get("format") for v in variants):
                missing.append(here)
    return missing


async def test_every_request_field_has_an_example(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/docs/openapi.json")).json()
    bodies = request_bodies(spec)
    assert len(bodies) >= 8
    missing = [
        m
        for (method, path), s in bodies.items()
        for m in strings_without_example(s, spec, f"{method} {path}")
    ]
    assert missing == []


async def test_the_prefilled_bodies_are_accepted(client: httpx.AsyncClient, conn: asyncpg.Connection) -> None:
    _, key = await auth.create_key(conn, EXAMPLE_PROJECT)
    spec = (await client.get("/docs/openapi.json")).json()
    bodies = request_bodies(spec)
    context = sample(bodies[("POST", "/v1/context")], spec)
    assert context["project_id"] == EXAMPLE_PROJECT and context["subject_id"] == "alice"
    r = await client.post("/v1/context", json=context, headers=bearer(key))
    assert r.status_code == 200, r.text
    facts = sample(bodies[("POST", "/v1/facts")], spec)
    r = await client.post("/v1/facts", json=facts, headers=bearer(key))
    assert r.status_code == 201, r.text
    events = sample(bodies[("POST", "/v1/events")], spec)
    r = await client.post("/v1/events", json=events, headers=bearer(key))
    assert r.status_code == 201, r.text


async def _wait(page: Any, expression: str, what: str) -> Any:
    deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        value = await page.eval(expression)
        if value:
            return value
        await asyncio.sleep(0.1)
    raise TimeoutError(what)


@BROWSER_TEST[0]
@BROWSER_TEST[1]
async def test_swagger_executes_the_prefilled_context_call(server: Server, tmp_path: Path) -> None:
    key = server.create_key(EXAMPLE_PROJECT)
    async with chromium(tmp_path / "profile") as page:
        await page.goto(f"{server.url}/docs", "/docs")
        await _wait(page, "document.querySelectorAll('.opblock').length > 10", "the operations")
        await page.eval(f"window.ui.preauthorizeApiKey('bearer', {key!r}); true")
        block = (
            "[...document.querySelectorAll('.opblock-post')].find(b => "
            "b.querySelector('.opblock-summary-path')?.getAttribute('data-path') === '/v1/context')"
        )
        summary = "(b.querySelector('.opblock-summary-control') || b.querySelector('.opblock-summary'))"
        click = f"{summary}.click(); return true;"
        opened = await page.eval(f"(() => {{ const b = {block}; if (!b) return false; {click} }})()")
        assert opened, "no POST /v1/context operation block"
        await _wait(page, f"!!{block}.querySelector('.try-out__btn')", "the Try it out button")
        await page.eval(f"{block}.querySelector('.try-out__btn').click(); true")
        body = await _wait(
            page, f"{block}.querySelector('textarea.body-param__text')?.value", "the prefilled body"
        )
        assert '"subject_id": "alice"' in body and "4#U" not in body, body
        await page.eval(f"{block}.querySelector('.execute').click(); true")
        status = await _wait(
            page,
            f"{block}.querySelector('.live-responses-table tr.response .response-col_status')"
            "?.textContent.trim()",
            "the response",
        )
        shown = await page.eval(f"{block}.querySelector('.live-responses-table .microlight')?.textContent")
    assert status == "200", shown
    assert '"trace_id"' in (shown or "")
