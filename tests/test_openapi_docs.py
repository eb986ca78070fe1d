"""The served OpenAPI document: every field described, the error body on every route, docs UIs up.

Agents and SDK authors read /docs/openapi.json as the contract, so a field without a
description or a route without its error responses is a documentation bug this test catches.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from service import structs

ERROR_REF = "#/components/schemas/ErrorBody"
# Every keyed route can answer each of these with the contract's error body.
REQUIRED_ERRORS = ("400", "401", "403", "404", "422", "503")
# /healthz takes no key, no body and no parameter: "unavailable", and a URL not UTF-8 (400).
NO_KEY_ROUTES = {("/healthz", "get"): ("400", "503")}


@pytest.fixture
async def spec(client: Any) -> dict[str, Any]:
    r = await client.get("/docs/openapi.json")
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    methods = {"get", "post", "put", "patch", "delete"}
    return [(p, m, op) for p, item in spec["paths"].items() for m, op in item.items() if m in methods]


def test_every_route_of_the_contract_is_documented(spec: dict[str, Any]) -> None:
    documented = {(p, m) for p, m, _ in operations(spec)}
    assert {
        ("/healthz", "get"),
        ("/v1/facts", "post"),
        ("/v1/facts", "get"),
        ("/v1/facts/{fact_id}", "get"),
        ("/v1/facts/{fact_id}", "patch"),
        ("/v1/events", "post"),
        ("/v1/conflicts", "get"),
        ("/v1/conflicts/{conflict_set_id}/resolve", "post"),
        ("/v1/context", "post"),
        ("/v1/inspect/{trace_id}", "get"),
        ("/v1/stats/overview", "get"),
    } <= documented


def test_every_operation_documents_the_error_body(spec: dict[str, Any]) -> None:
    missing = []
    for path, method, op in operations(spec):
        for status in NO_KEY_ROUTES.get((path, method), REQUIRED_ERRORS):
            response = op.get("responses", {}).get(status)
            ref = (
                (response or {}).get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
            )
            if ref != ERROR_REF:
                missing.append(f"{method.upper()} {path} {status}")
        for status, response in op.get("responses", {}).items():
            if status.startswith(("4", "5")):
                assert response["content"]["application/json"]["schema"]["$ref"] == ERROR_REF, (path, status)
    assert not missing, "responses without the ErrorBody schema: " + ", ".join(missing)
    error = spec["components"]["schemas"]["ErrorBody"]
    assert set(error["required"]) == {"code", "message"} and "details" in error["properties"]


def test_every_schema_property_and_parameter_is_described(spec: dict[str, Any]) -> None:
    undescribed = [
        f"{name}.{prop}"
        for name, schema in spec["components"]["schemas"].items()
        for prop, body in schema.get("properties", {}).items()
        if not body.get("description", "").strip()
    ]
    assert not undescribed, "schema properties without a description: " + ", ".join(undescribed)
    params = [
        f"{method.upper()} {path} {p['name']}"
        for path, method, op in operations(spec)
        for p in op.get("parameters", [])
        if not p.get("description", "").strip()
    ]
    assert not params, "parameters without a description: " + ", ".join(params)


def test_keyed_routes_declare_the_bearer_scheme(spec: dict[str, Any]) -> None:
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert spec["security"] == [{"bearer": []}]
    health = spec["paths"]["/healthz"]["get"]
    assert health.get("security") == [{}], "the readiness probe must say it needs no key"


async def test_docs_uis_are_served(client: Any) -> None:
    # Both are Swagger UI on the service's own copy of its assets (tests/test_docs_offline.py).
    pages = (("/docs", "/docs/openapi.json"), ("/docs/swagger", "/docs/assets/swagger-ui-bundle.js"))
    for path, marker in pages:
        r = await client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), path
        assert marker in r.text, path


# msgspec's bound names and the JSON Schema keywords that publish them.
BOUND_KEYWORDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}


def numeric_bounds(field_type: msgspec.inspect.Type) -> dict[str, float]:
    """The numeric bounds of a field's type (through an optional's union), by JSON Schema keyword."""
    types = field_type.types if isinstance(field_type, msgspec.inspect.UnionType) else (field_type,)
    return {
        keyword: bound
        for t in (t.type if isinstance(t, msgspec.inspect.Metadata) else t for t in types)
        if isinstance(t, (msgspec.inspect.IntType, msgspec.inspect.FloatType))
        for name, keyword in BOUND_KEYWORDS.items()
        if (bound := getattr(t, name)) is not None
    }


def test_every_numeric_bound_of_a_struct_is_published(spec: dict[str, Any]) -> None:
    # Litestar drops a falsy bound (`ge=0`): an SDK generated from the document would not know it.
    unpublished = []
    for name, schema in spec["components"]["schemas"].items():
        struct = getattr(structs, name, None)
        if not (isinstance(struct, type) and issubclass(struct, msgspec.Struct)):
            continue
        info = msgspec.inspect.type_info(struct)
        assert isinstance(info, msgspec.inspect.StructType)
        for field in info.fields:
            published = schema["properties"][field.encode_name]
            for keyword, bound in numeric_bounds(field.type).items():
                if published.get(keyword) != bound:
                    unpublished.append(
                        f"{name}.{field.encode_name} {keyword} {bound}: {published.get(keyword)}"
                    )
    assert not unpublished, "bounds missing from the OpenAPI document: " + ", ".join(unpublished)


def test_a_struct_that_refuses_unknown_fields_is_a_closed_object(spec: dict[str, Any]) -> None:
    """A request body with a field its Struct does not have is a 400 `unknown field`: the
    document says so (`additionalProperties: false`), and only there, so that a body it
    validates is never refused for an extra field."""
    wrong = []
    for name, schema in spec["components"]["schemas"].items():
        struct = getattr(structs, name, None)
        if not (isinstance(struct, type) and issubclass(struct, msgspec.Struct)):
            continue
        closed = schema.get("additionalProperties") is False
        if closed != struct.__struct_config__.forbid_unknown_fields:
            wrong.append(name)
    assert not wrong, "additionalProperties does not match forbid_unknown_fields: " + ", ".join(wrong)
    assert spec["components"]["schemas"]["FactIn"]["additionalProperties"] is False


def test_the_headers_of_a_success_are_documented(spec: dict[str, Any]) -> None:
    """The contract's headers of a success (docs/spec/api.md): an SDK generated from the document
    knows them."""
    documented = {
        (path, method, status): set(op["responses"][status].get("headers", {}))
        for path, method, op in operations(spec)
        for status in op["responses"]
        if status.startswith("2")
    }
    assert "Server-Timing" in documented[("/v1/context", "post", "200")]
    for path in ("/v1/facts", "/v1/events", "/v1/extract"):
        assert "Idempotent-Replayed" in documented[(path, "post", "201")], path
