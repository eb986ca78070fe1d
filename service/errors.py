"""Domain errors and the one table that maps them (and asyncpg's) to the contract's error body.

Every error leaves the service as `{"code", "message", "details"}` (docs/spec/api.md). The
repository and service layers raise the domain errors below and never HTTP exceptions.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import Annotated, Any
from uuid import UUID

import asyncpg
import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.openapi.datastructures import ResponseSpec

from service.constants import BEARER_CHALLENGE, MAX_JSON_DEPTH

log = logging.getLogger("haki.errors")


class ErrorCode(msgspec.Struct, frozen=True):
    status: int
    code: str
    meaning: str


# The one error table: every (status, code) the service answers with, and what it means. The
# domain errors below, the codes of Litestar's own HTTP errors and the OpenAPI responses of every
# route are all read from it.
ERROR_TABLE: tuple[ErrorCode, ...] = (
    ErrorCode(
        400,
        "validation_error",
        f"malformed JSON, nested deeper than {MAX_JSON_DEPTH} levels, wrong type, out of range, or a "
        "malformed id in the path; `details.field` names the field",
    ),
    ErrorCode(400, "budget_exceeded", "budget_tokens is not a positive integer"),
    ErrorCode(401, "unauthorized", "missing, unknown or revoked API key"),
    ErrorCode(403, "forbidden", "the key belongs to another project"),
    ErrorCode(404, "not_found", "no such resource in the key's project"),
    ErrorCode(405, "method_not_allowed", "the route does not take this method"),
    ErrorCode(409, "conflict", "e.g. an Idempotency-Key reused with another body"),
    ErrorCode(
        409,
        "embedding_model_mismatch",
        "the project's vectors were made by another embedding model than the server's "
        "(`details.project_model`, `details.server_model`); nothing was served or written: run "
        "`haki reembed --project P` with the server's model, or serve with the project's",
    ),
    ErrorCode(413, "payload_too_large", "the body exceeds HAKI_MAX_BODY_BYTES"),
    ErrorCode(415, "unsupported_media_type", "a body sent under a Content-Type that is not JSON"),
    ErrorCode(422, "validation_error", "a rule only the service can check; `details.field` names the field"),
    ErrorCode(
        422,
        "url_refused",
        "POST /v1/webhooks: the URL is not http(s), does not resolve, or resolves to a private, "
        "loopback or link-local address whose host HAKI_WEBHOOK_ALLOWED_HOSTS does not list; nothing "
        "was sent to it",
    ),
    ErrorCode(
        429,
        "rate_limited",
        "too many requests for this API key, or too many characters to embed for this project "
        "(HAKI_EMBED_CHARS_PER_MINUTE); wait `Retry-After` seconds",
    ),
    ErrorCode(500, "internal", "a bug: the server logged it"),
    ErrorCode(
        502,
        "extractor_error",
        "POST /v1/extract: the chat model could not be reached, answered an HTTP error, or answered "
        "something that is not the JSON schema it was given; nothing was written",
    ),
    ErrorCode(
        504,
        "extractor_timeout",
        "POST /v1/extract: no answer from the chat model within HAKI_EXTRACT_TIMEOUT_SECONDS; nothing "
        "was written",
    ),
    ErrorCode(
        503,
        "unavailable",
        "database or embedder down, or a statement timeout: retry after `Retry-After` seconds; "
        "without `Retry-After` and with `details.permanent` (extraction not configured), a retry "
        "cannot succeed",
    ),
)


def error_code(status: int, code: str) -> ErrorCode:
    """The table's row; a domain error class that names a row not in the table fails at import."""
    for row in ERROR_TABLE:
        if (row.status, row.code) == (status, code):
            return row
    raise LookupError(f"({status}, {code!r}) is not in ERROR_TABLE")


def response_spec(rows: Iterable[ErrorCode], prefix: str = "") -> ResponseSpec:
    """One documented error response: the meaning of each of the table's rows it may carry."""
    description = prefix + "; ".join(f"{row.code}: {row.meaning}" for row in rows)
    return ResponseSpec(data_container=ErrorBody, description=description, generate_examples=False)


def openapi_responses() -> dict[int, ResponseSpec]:
    """The error responses every route documents, one per status, from the table."""
    rows: dict[int, list[ErrorCode]] = {}
    for row in ERROR_TABLE:
        if row.status < 500 or row.code == "unavailable":
            rows.setdefault(row.status, []).append(row)
    return {status: response_spec(status_rows) for status, status_rows in rows.items()}


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The error body of every non-2xx response."""

    code: Annotated[
        str,
        msgspec.Meta(
            description="snake_case error code, one of: "
            + ", ".join(dict.fromkeys(row.code for row in ERROR_TABLE))
        ),
    ]
    message: Annotated[str, msgspec.Meta(description="What went wrong, for humans.")]
    details: Annotated[
        dict[str, Any] | None,
        msgspec.Meta(description="Machine-readable specifics; `field` names the offending field."),
    ] = None


# The wait a retryable 503 asks for: the database or the embedder is back within seconds, or the
# client's next attempt gets another 503 with the same advice.
UNAVAILABLE_RETRY_AFTER_SECONDS = 1


class EmbedderConfigError(RuntimeError):
    """The embedder cannot work with this configuration (service/embedding); raised at start-up,
    and by a command as `haki: <reason>`, exit 2."""


class HakiError(Exception):
    """A domain error: raised by the repository and service layers, never an HTTP exception.
    A subclass names its row of ERROR_TABLE (`class X(HakiError, status=..., code=...)`); a row
    missing from the table fails at import."""

    status_code = 500
    code = "internal"

    def __init_subclass__(cls, status: int | None = None, code: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        row = error_code(status or cls.status_code, code or cls.code)
        cls.status_code, cls.code = row.status, row.code

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or None

    @property
    def headers(self) -> dict[str, str]:
        """What its answer says beside the body, JSON or page: a 429's or a retryable 503's wait."""
        retry_after = (self.details or {}).get("retry_after_seconds")
        return {} if retry_after is None else {"Retry-After": str(retry_after)}


class Unauthorized(HakiError, status=401, code="unauthorized"):
    @property
    def headers(self) -> dict[str, str]:
        """RFC 7235: a 401 names the scheme it asks for, on /v1 and /metrics as on /mcp."""
        return {**super().headers, "WWW-Authenticate": BEARER_CHALLENGE}


class Forbidden(HakiError, status=403, code="forbidden"):
    pass


class NotFound(HakiError, status=404, code="not_found"):
    pass


class InvalidInput(HakiError, status=422, code="validation_error"):
    """Well-formed input that breaks a rule only the service can check; names the field."""

    def __init__(self, field: str, message: str, **details: Any) -> None:
        super().__init__(f"{field}: {message}", field=field, **details)


class InvalidBody(HakiError, status=400, code="validation_error"):
    """A request that does not decode into its Struct, for a caller that converts it itself (the
    MCP tools); a route's body gets the same answer from Litestar's decoding (_validation_body)."""

    @classmethod
    def of(cls, exc: msgspec.ValidationError) -> InvalidBody:
        message = str(exc)
        field = _field_of(None, message)
        if field is None:
            return cls(message)
        return cls(message if message.startswith(field) else f"{field}: {message}", field=field)


class BudgetExceeded(HakiError, status=400, code="budget_exceeded"):
    pass


class Conflict(HakiError, status=409, code="conflict"):
    pass


# `details.reason` of a 409 `conflict` about an Idempotency-Key (docs/spec/api.md, "Idempotency").
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
IDEMPOTENCY_KEY_IN_PROGRESS = "idempotency_key_in_progress"


class IdempotencyKeyReused(Conflict):
    """An Idempotency-Key already used with another request body: the same 409 `conflict` over
    HTTP, told apart by `details.reason` from a key whose first request is still in progress
    (`haki import`, local or remote, says the file changed)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **details, reason=IDEMPOTENCY_KEY_REUSED)


class EmbeddingModelMismatch(HakiError, status=409, code="embedding_model_mismatch"):
    """The server's embedder is not the model the project's vectors were made with: its query
    vectors would find wrong neighbours, and its write vectors would mix two spaces."""

    def __init__(self, project_id: str, project_model: str, server_model: str) -> None:
        super().__init__(
            f"The vectors of project {project_id!r} were made by {project_model}, but this server "
            f"embeds with {server_model}: run `haki reembed --project {project_id}` with "
            f"HAKI_EMBED_MODEL set for {server_model}, or serve the project with {project_model}.",
            project_id=project_id,
            project_model=project_model,
            server_model=server_model,
            fix=f"haki reembed --project {project_id}",
        )


class PayloadTooLarge(HakiError, status=413, code="payload_too_large"):
    """A body past HAKI_MAX_BODY_BYTES: the routes' (Litestar's 413, reworded in
    handle_exception) and the /mcp mount's."""

    @classmethod
    def past(cls, limit: int) -> PayloadTooLarge:
        return cls(f"The body exceeds HAKI_MAX_BODY_BYTES ({limit} bytes).", max_body_bytes=limit)


class TooManyRequests(HakiError, status=429, code="rate_limited"):
    pass


class Unavailable(HakiError, status=503, code="unavailable"):
    """Worth retrying (the embedder, the database): `Retry-After` says when. One that names a
    missing `setting` (extraction not configured), or says it is `permanent` (an embedder that
    refuses the key), is not: no retry succeeds until the deployment changes, so it carries
    `details.permanent` and no `Retry-After`."""

    def __init__(self, message: str, **details: Any) -> None:
        if "setting" in details or details.get("permanent"):
            details["permanent"] = True
        else:
            details.setdefault("retry_after_seconds", UNAVAILABLE_RETRY_AFTER_SECONDS)
        super().__init__(message, **details)


class ExtractorFailed(HakiError, status=502, code="extractor_error"):
    """The extraction model (HAKI_EXTRACT_BASE_URL) answered with an error, or with something
    that is not the JSON schema it was asked for: nothing was written. A busy model's (429, 503)
    carries `retry_after_seconds`, so `Retry-After`."""


class ExtractorTimeout(HakiError, status=504, code="extractor_timeout"):
    """The extraction model did not answer within HAKI_EXTRACT_TIMEOUT_SECONDS: nothing was written."""


class UrlRefused(HakiError, status=422, code="url_refused"):
    """A webhook URL the service will not call (docs/webhooks.md, "Safety"); names the field."""

    def __init__(self, field: str, message: str, **details: Any) -> None:
        super().__init__(f"{field}: {message}", field=field, **details)


# The failures that mean the connection itself is gone (server stopped or restarted), so the
# pool's other idle connections are probably dead as well.
CONNECTION_LOST: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    # A connection that got the server's shutdown notice while idle is left in a state where the
    # next query fails with "another operation is in progress" (found by tests/test_db_faults.py).
    asyncpg.InternalClientError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    OSError,
)

# asyncpg failures that mean "the database cannot answer now", not "your input is wrong": the
# connection lost, or the server busy.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    *CONNECTION_LOST,
    asyncpg.QueryCanceledError,  # statement_timeout
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionFailureError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
    # A lock taken NOWAIT (share_embedding_model during a re-embedding's switch) or past lock_timeout.
    asyncpg.LockNotAvailableError,
    # A row a statement references was deleted by a concurrent transaction (an erasure): every
    # reference a request names is checked first, so only a race gets here, and a retry sees it.
    asyncpg.ForeignKeyViolationError,
    ConnectionError,
    TimeoutError,
    asyncio.TimeoutError,
)


class LogThrottle:
    """At most one line a `period` seconds, the next one counting those left out: an outage of
    the database made a warning of each request (982 in 2.5 s under four clients)."""

    def __init__(self, period: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._period, self._clock = period, clock
        self._next = float("-inf")
        self._left_out = 0

    def admit(self) -> int | None:
        """None: leave this line out; else how many were left out since the last one."""
        now = self._clock()
        if now < self._next:
            self._left_out += 1
            return None
        self._next = now + self._period
        left_out, self._left_out = self._left_out, 0
        return left_out


# The "database unavailable" warnings of every request and tool call of the process.
UNAVAILABLE_LOG = LogThrottle(period=1.0)


def log_unavailable(where: str, exc: BaseException) -> None:
    left_out = UNAVAILABLE_LOG.admit()
    if left_out is not None:
        more = f" ({left_out} more since the last line)" if left_out else ""
        log.warning("database unavailable on %s: %r%s", where, exc, more)


def database_unavailable(exc: BaseException) -> bool:
    """The database cannot answer now (connection lost, server busy, statement timeout): a 503
    `unavailable`, not a bug."""
    return isinstance(exc, _UNAVAILABLE)


def unavailable_message(exc: BaseException) -> str:
    """The message of a `database_unavailable` failure. A deadlock, serialization failure or
    foreign key race is a 503 too (the SDKs retry it, where a 409 `conflict` means a retry cannot
    succeed), but the database is up: it says so."""
    if isinstance(
        exc,
        asyncpg.DeadlockDetectedError
        | asyncpg.SerializationError
        | asyncpg.ForeignKeyViolationError
        | asyncpg.LockNotAvailableError,
    ):
        return "A concurrent change conflicted with this request; retry shortly."
    return "The database is unavailable; retry shortly."


_FIELD_AT = re.compile(r"- at `\$(?P<path>[^`]*)`")
_NAMED_FIELD = re.compile(
    r"(?:missing required field|unknown field) `(?P<name>[^`]+)`"
    r"|Missing required (?:query |header |cookie |path )?parameter '(?P<param>[^']+)'"
)


def _field_of(key: object, message: str) -> str | None:
    """The dotted path of the offending field: Litestar's key, plus the field a message names."""
    path = str(key) if key not in (None, "", "data") else ""
    if not path:
        m = _FIELD_AT.search(message)
        path = m.group("path").lstrip(".") if m else ""
    named = _NAMED_FIELD.search(message)
    if named:
        name = named.group("name") or named.group("param")
        path = f"{path}.{name}" if path else name
    return path or None


def _validation_body(exc: ValidationException) -> tuple[int, ErrorBody]:
    problems: list[dict[str, Any]] = []
    extra = exc.extra
    if isinstance(extra, list):
        for item in extra:
            if isinstance(item, dict):
                problems.append({k: v for k, v in item.items() if k in ("key", "message", "source")})
    elif isinstance(extra, dict):
        problems.append({k: v for k, v in extra.items() if k in ("key", "message", "source")})
    field: str | None = None
    message = exc.detail or "Validation failed"
    for p in problems:
        text = str(p.get("message", ""))
        field = _field_of(p.get("key"), text)
        if text:
            message = text
        if field:
            break
    if field is None:
        field = _field_of(None, message)
    details: dict[str, Any] = {"errors": problems}
    if field:
        details["field"] = field
        if not message.startswith(field):
            message = f"{field}: {message}"
    return 400, ErrorBody(code="validation_error", message=message, details=details)


# Litestar's own HTTP errors (405, 413, ...): the table's first code of their status.
_HTTP_CODES: dict[int, str] = {}
for _row in ERROR_TABLE:
    _HTTP_CODES.setdefault(_row.status, _row.code)


def error_response(status: int, body: ErrorBody, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(content=body, status_code=status, headers=headers, media_type="application/json")


# A path parameter declared `{name:uuid}`: Litestar's router matches only a well-formed UUID
# there, so `GET /v1/inspect/garbage` used to fall through to a bare 404 "Not Found".
_EXAMPLE_UUID = "0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f"
_PATH_PARAM = re.compile(r"\{(?P<name>\w+)(?::(?P<type>\w+))?\}")


def _route_patterns(app: Any) -> list[tuple[re.Pattern[str], frozenset[str], tuple[str, ...]]]:
    """(path regex, methods, names of its UUID parameters) of every route with a UUID in its path,
    read from the app's own routes, so a route added anywhere is covered. Built only on a 404 (a
    dozen routes, microseconds): not worth a cache on the app."""
    patterns = []
    for route in app.routes:
        path: str = route.path
        uuids = tuple(m.group("name") for m in _PATH_PARAM.finditer(path) if m.group("type") == "uuid")
        if not uuids:
            continue
        regex, last = "", 0
        for m in _PATH_PARAM.finditer(path):
            regex += re.escape(path[last : m.start()]) + f"(?P<{m.group('name')}>[^/]+)"
            last = m.end()
        regex += re.escape(path[last:])
        methods = frozenset(getattr(route, "methods", ()) or ())
        patterns.append((re.compile(f"^{regex}/?$"), methods, uuids))
    return patterns


def malformed_path_id(request: Request[Any, Any, Any]) -> ErrorBody | None:
    """The contract's validation_error for a path whose shape is a route's but whose id is not a
    UUID; None when no route has that shape (a genuine 404)."""
    path = request.url.path
    for regex, methods, uuids in _route_patterns(request.app):
        m = regex.match(path)
        if m is None or (methods and request.method not in methods):
            continue
        for name in uuids:
            value = m.group(name)
            try:
                UUID(value)
            except ValueError:
                shown = value if len(value) <= 64 else value[:64] + "..."
                message = f"{name}: a UUID is expected (such as {_EXAMPLE_UUID}), got {shown!r}"
                return ErrorBody(
                    code="validation_error",
                    message=message,
                    details={
                        "field": name,
                        "source": "path",
                        "errors": [{"key": name, "message": message, "source": "path"}],
                    },
                )
    return None


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, HakiError):
        return error_response(
            exc.status_code,
            ErrorBody(code=exc.code, message=exc.message, details=exc.details),
            exc.headers or None,
        )
    if isinstance(exc, ValidationException):
        status, body = _validation_body(exc)
        return error_response(status, body)
    if isinstance(exc, NotFoundException):
        malformed = malformed_path_id(request)
        if malformed is not None:
            return error_response(400, malformed)
    if isinstance(exc, HTTPException) and exc.status_code == 413:
        # Litestar's own words ("Request Entity Too Large") named neither the limit nor its setting.
        return handle_exception(request, PayloadTooLarge.past(request.app.state.settings.max_body_bytes))
    if isinstance(exc, HTTPException):
        code = _HTTP_CODES.get(exc.status_code, "error" if exc.status_code < 500 else "internal")
        extra = exc.extra if isinstance(exc.extra, dict) else None
        return error_response(
            exc.status_code, ErrorBody(code=code, message=exc.detail, details=extra), exc.headers
        )
    if database_unavailable(exc):
        log_unavailable(f"{request.method} {request.url.path}", exc)
        return error_response(
            503,
            ErrorBody(code="unavailable", message=unavailable_message(exc)),
            {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_SECONDS)},
        )
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, ErrorBody(code="internal", message="Internal server error."))


async def send_error(
    send: Any,
    status: int,
    code: str,
    message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """The contract's error body from a raw ASGI app (the /mcp mount, which Litestar's exception
    handling does not wrap)."""
    body = msgspec.json.encode(ErrorBody(code=code, message=message, details=details))
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


# What a request still running at the end of `haki serve`'s drain is told: retry it, when a resend
# cannot apply it twice; else that it may have been carried out.
CUT_BY_SHUTDOWN_MESSAGE = "The server stopped before this request finished; retry."
CUT_BY_SHUTDOWN_UNKNOWN = (
    "The server stopped before this request finished, after it may have been carried out: check "
    "before sending it again (with an Idempotency-Key, a resend is applied once)."
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def unavailable_when_cut(app: Any) -> Any:
    """ASGI middleware: uvicorn cancels a request still running when the drain after SIGTERM ends
    (HAKI_SHUTDOWN_TIMEOUT_SECONDS) and answered it a plain-text 500. It is a 503 `unavailable`
    instead, unless its response had started: retryable (`Retry-After`) when a resend cannot apply
    it twice (a read, a write under an Idempotency-Key, a body not all received); else without
    `Retry-After` and with `details.outcome_unknown`, since it may have committed."""

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = received = False

        async def tracking(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def receiving() -> Any:
            nonlocal received
            message = await receive()
            received = received or (message["type"] == "http.request" and not message.get("more_body"))
            return message

        try:
            await app(scope, receiving, tracking)
        except asyncio.CancelledError:
            if started:
                raise
            keyed = any(k.lower() == b"idempotency-key" for k, _ in scope.get("headers", []))
            safe = scope.get("method") in SAFE_METHODS or keyed or not received
            log.warning(
                "%s %s cut short by the shutdown: %s",
                scope.get("method"),
                scope.get("path"),
                "503, retryable" if safe else "503, outcome unknown",
            )
            if safe:
                retry = [(b"retry-after", str(UNAVAILABLE_RETRY_AFTER_SECONDS).encode())]
                await send_error(send, 503, "unavailable", CUT_BY_SHUTDOWN_MESSAGE, retry)
            else:
                unknown = {"outcome_unknown": True}
                await send_error(send, 503, "unavailable", CUT_BY_SHUTDOWN_UNKNOWN, None, unknown)

    return guarded
