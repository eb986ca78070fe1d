"""Strict decoding of JSON request bodies.

Litestar converts a body to its Struct in msgspec's lax mode, which turns `"900"` into 900, `0`
into false and `0` into 1970-01-01T00:00:00Z. The contract says otherwise (`budget_tokens` must
be a positive integer, times are RFC 3339 strings), so every Struct body is decoded once more,
strictly, and refused with the field named when lax mode was all that made it pass.
"""

from __future__ import annotations

from types import UnionType
from typing import Any, Union, get_args, get_origin

import msgspec
from litestar import Request
from litestar.exceptions import ValidationException


async def check_body(request: Request[Any, Any, Any]) -> None:
    field = request.route_handler.parsed_data_field
    target = field.annotation if field is not None else None
    # An optional body (`Struct | None`, POST /v1/inspect/{trace_id}/replay): no body is None.
    optional = get_origin(target) in (Union, UnionType) and type(None) in get_args(target)
    if optional:
        target = next((a for a in get_args(target) if a is not type(None)), None)
    if not (isinstance(target, type) and issubclass(target, msgspec.Struct)):
        return
    body = await request.body()
    if optional and not body.strip():
        return
    try:
        msgspec.json.decode(body, type=target)
    except msgspec.ValidationError as exc:
        raise ValidationException(
            detail=str(exc), extra=[{"key": None, "message": str(exc), "source": "body"}]
        ) from exc
    except msgspec.DecodeError:
        # Malformed JSON never gets this far: Litestar's own decoding refused it with a 400.
        return
