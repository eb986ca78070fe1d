"""Strict decoding of a /v1 route's query string, as of its body (docs/spec/api.md, Conventions).

Litestar ignores a parameter its route does not take, keeps one value of a repeated one, and reads
`limit=1.0` as 1. A misspelt filter (`subjet_id=alice`) then answers the whole project, so under
/v1 each of these is a 400 naming the parameter.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import msgspec
from litestar import Litestar, Request
from litestar.handlers import BaseRouteHandler
from litestar.routes import HTTPRoute

from service.errors import InvalidBody

STRICT_PREFIX = "/v1/"
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")


class QueryRule(msgspec.Struct, frozen=True):
    """The query parameters one route handler takes (its dependencies' too)."""

    names: frozenset[str]
    repeatable: frozenset[str]
    integers: frozenset[str]


def _rules(app: Litestar) -> dict[BaseRouteHandler, QueryRule]:
    """Every HTTP handler's rule, read once from Litestar's own parameter models."""
    rules: dict[BaseRouteHandler, QueryRule] | None = app.state.get("query_rules")
    if rules is None:
        rules = {}
        for route in app.routes:
            if not isinstance(route, HTTPRoute):
                continue
            for handler, model in route.route_handler_map.values():
                params = model.expected_query_params
                signature = handler.parsed_fn_signature.parameters
                integers = {
                    p.field_alias
                    for p in params
                    if p.field_name in signature and signature[p.field_name].annotation is int
                }
                rules[handler] = QueryRule(
                    names=frozenset(p.field_alias for p in params),
                    repeatable=frozenset(p.field_alias for p in params if p.is_sequence),
                    integers=frozenset(integers),
                )
        app.state.query_rules = rules
    return rules


def check_query(request: Request[Any, Any, Any]) -> None:
    """Under /v1 (not a CORS preflight): every parameter is one the route takes, given once, and
    an integer is written as one."""
    if not request.url.path.startswith(STRICT_PREFIX) or request.method == "OPTIONS":
        return
    rule = _rules(request.app).get(request.route_handler)
    if rule is None:
        return
    items = list(request.query_params.multi_items())
    for name, count in Counter(name for name, _ in items).items():
        if name not in rule.names:
            takes = ", ".join(sorted(rule.names)) or "none"
            raise InvalidBody(
                f"{name or '(empty name)'}: not a query parameter of this route (it takes: {takes})",
                field=name,
            )
        if count > 1 and name not in rule.repeatable:
            raise InvalidBody(f"{name}: given {count} times; give it once", field=name)
    for name, value in items:
        if name in rule.integers and not _INTEGER.fullmatch(value):
            raise InvalidBody(f"{name}: expected an integer, got {value[:40]!r}", field=name)
