"""What `Haki` and `AsyncHaki` share: request building, the retry policy, response decoding.

Both clients only differ in how they send a request and how they sleep; everything that decides
what is sent and what an answer means lives here, once.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import re
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

import httpx
import msgspec

from haki_client.errors import HakiConnectionError, HakiError, InvalidArgument, error_for
from haki_client.models import (
    ConflictList,
    ConflictSet,
    ContextPacket,
    ContextProfile,
    ErrorBody,
    Event,
    EventErasure,
    EventIn,
    EventPage,
    ExtractMessage,
    ExtractResult,
    Fact,
    FactErasure,
    FactIn,
    FactPage,
    FactStats,
    Health,
    Inspection,
    ReplayResult,
    StatsOverview,
    SubjectErasure,
    SubjectPage,
    WebhookCreated,
    WebhookDeleted,
    WebhookDeliveryList,
    WebhookList,
    WriteEventsResponse,
    WriteFactsResponse,
)

__version__ = "0.1.0"

T = TypeVar("T")

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
_ERROR_DECODER = msgspec.json.Decoder(ErrorBody)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of the failures that did nothing, and of lost answers of replayable calls.

    Every call is retried when its request provably never reached the server (connection
    refused, connect or pool timeout), on a 429, and on a 503 the server asks to retry: one with
    a `Retry-After` header and without `details.permanent` in its body (a 503 that says
    extraction is not configured fails the same way every time).

    A failure after the request may have reached the server (read or write timeout, dropped
    connection, a broken answer) is retried only for a *replayable* call: a GET; a
    `POST /v1/context` or a replay, reads whose only side effect is their trace (a second trace
    of the same question); and the writes the server deduplicates by Idempotency-Key, `POST /v1/facts`,
    `/v1/events` and `/v1/extract`, which carry one key for all the attempts of a call
    (docs/spec/api.md, "Idempotency"). Any other call (a PATCH, a DELETE, resolving a conflict,
    a webhook) whose answer was lost raises `HakiConnectionError` saying its outcome is
    unknown: the server may have applied it, so check (GET the item) before sending it again.

    A 409 `conflict` whose `details.reason` is `idempotency_key_in_progress` (the key's first
    request has not committed yet) is retried too, with backoff and the same key: the server
    then answers the first request's response (docs/spec/api.md, "Idempotency").

    The wait before retry n (0-based) is the server's `Retry-After` when it sends one, else
    `backoff * 2**n` with jitter. A `Retry-After` longer than `max_wait` seconds is not cut
    short (a resend before it would be refused again): the error is raised at once, carrying
    `retry_after`, so a misbehaving server cannot park a caller for an hour either.

    When the retries run out without an answer, the error says "nothing was done" only if no
    attempt may have reached the server (each failed before sending); else the outcome of a
    write is unknown (`details.outcome_unknown`), whichever failure came last. The same holds
    when they end on an error answer (a 429, a 503, a 409 `idempotency_key_in_progress`): that
    answer speaks for its own attempt only, and a write whose earlier attempt may have applied
    it raises its typed error with `details.outcome_unknown` too. Every error of a deduplicated
    write carries its Idempotency-Key (`details.idempotency_key`): sent again under that key,
    the call cannot write twice.
    """

    max_retries: int = 3
    backoff: float = 0.25
    max_wait: float = 10.0

    def waits_for(self, retry_after: float | None) -> bool:
        """Whether the client may wait out the server's `Retry-After` (none, or within max_wait)."""
        return retry_after is None or retry_after <= self.max_wait

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_wait))
        base: float = min(self.max_wait, self.backoff * 2.0**attempt)
        # Full jitter in [base/2, base]: clients that failed together do not retry together.
        return base / 2 + random.random() * base / 2


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    out: type[T]
    params: dict[str, str] | None = None
    body: bytes | None = None
    # Seconds this call may take, when it is not the client's timeout (POST /v1/extract waits
    # for a chat model, an erasure for its long transaction).
    timeout: float | None = None
    # The caller's Idempotency-Key of a deduplicated write; None: the client makes one per call.
    idempotency_key: str | None = None

    @property
    def reads_only(self) -> bool:
        """A call that changes no memory: a GET, POST /v1/context or a replay (each only writes
        its trace)."""
        if self.method == "GET" or (self.method, self.path) == ("POST", "/v1/context"):
            return True
        return (
            self.method == "POST" and self.path.startswith("/v1/inspect/") and self.path.endswith("/replay")
        )

    @property
    def deduplicated(self) -> bool:
        """A write the server deduplicates by Idempotency-Key: the one kind of call that carries one."""
        return (self.method, self.path) in DEDUPLICATED_WRITES

    @property
    def replayable(self) -> bool:
        """Whether sending the call again after a lost answer is harmless (RetryPolicy)."""
        return self.reads_only or self.deduplicated


# The only routes that honour Idempotency-Key (docs/spec/api.md, "Idempotency"): a key sent
# elsewhere is ignored, so a resent DELETE or resolve would run twice.
DEDUPLICATED_WRITES = frozenset({("POST", "/v1/facts"), ("POST", "/v1/events"), ("POST", "/v1/extract")})

# The request never reached the server: sending it again is safe for every call.
UNSENT_ERRORS: tuple[type[httpx.RequestError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
# Any other failure of httpx's: the request may have reached the server and its answer was lost
# or broken (a timeout, a dropped connection, a body that does not decode, `DecodingError`): safe
# to resend only for a replayable call. UNSENT_ERRORS subclass it: test them first.
UNANSWERED_ERRORS: tuple[type[httpx.RequestError], ...] = (httpx.RequestError,)
TRANSPORT_ERRORS = UNSENT_ERRORS + UNANSWERED_ERRORS


def may_resend(call: Call[Any], exc: httpx.RequestError) -> bool:
    """Whether `call` may be sent again after `exc` (RetryPolicy)."""
    return isinstance(exc, UNSENT_ERRORS) or call.replayable


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` is either delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


# What a header carries: an API key, and an Idempotency-Key of at most
# MAX_IDEMPOTENCY_KEY_CHARS (docs/spec/api.md, "Idempotency").
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
MAX_IDEMPOTENCY_KEY_CHARS = 255


def check_idempotency_key(value: object) -> str | None:
    """A caller's Idempotency-Key, checked before anything is sent: 1..255 visible ASCII
    characters, else `InvalidArgument` naming `idempotency_key`. None: the client makes one."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or len(value) > MAX_IDEMPOTENCY_KEY_CHARS
        or not _VISIBLE_ASCII.fullmatch(value)
    ):
        shown = repr(value) if len(repr(value)) <= 66 else repr(value)[:66] + "..."
        raise InvalidArgument(
            f"idempotency_key: 1..255 visible ASCII characters (no space) are expected, got {shown}",
            field="idempotency_key",
        )
    return value


def decode_response(call: Call[T], response: httpx.Response) -> T:
    if 200 <= response.status_code < 300:
        try:
            return msgspec.json.decode(response.content, type=call.out)
        except msgspec.DecodeError as exc:
            raise HakiError(
                f"unexpected response body for {call.method} {call.path}: {exc}",
                code="invalid_response",
                status_code=response.status_code,
            ) from exc
    raise error_from(response)


def error_from(response: httpx.Response) -> HakiError:
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    try:
        body = _ERROR_DECODER.decode(response.content)
    except msgspec.DecodeError:
        text = response.text.strip().replace("\n", " ")[:200] or response.reason_phrase
        return error_for(response.status_code, None, text, None, retry_after)
    return error_for(response.status_code, body.code, body.message, body.details, retry_after)


def _gateway_failure(response: httpx.Response) -> bool:
    """A 502 or 504 whose body is not the contract's: a proxy's, that may have forwarded the
    request before it lost Haki's answer."""
    if response.status_code not in (502, 504):
        return False
    try:
        _ERROR_DECODER.decode(response.content)
    except msgspec.DecodeError:
        return True
    return False


_UNKNOWN = (
    "the outcome is unknown, Haki may have applied it; check (GET the item) before sending it "
    "again, or send a deduplicated write again with details['idempotency_key']"
)


def write_error(call: Call[Any], response: httpx.Response, key: str | None, unsent: bool) -> HakiError:
    """The error of a write's last answer, `response`. Once an attempt may have reached the
    server (`unsent` false: its answer was lost), or when the answer says the key's write is in
    flight or is a gateway's, the outcome is unknown whatever the answer's code: a 429 or 503
    speaks for its own attempt only. A deduplicated write's error carries its key."""
    error = error_from(response)
    if key is not None:
        error.details = {**error.details, "idempotency_key": key}
    if not unsent or key_in_progress(response) or _gateway_failure(response):
        error.details = {**error.details, "outcome_unknown": True}
        error.message = f"{error.message} ({call.method} {call.path}: {_UNKNOWN})"
        error.args = (error.message,)
    return error


def connection_error(
    call: Call[Any], exc: httpx.RequestError, unsent: bool | None = None, key: str | None = None
) -> HakiConnectionError:
    """The SDK's error for a call left without an answer, by both clients and every route.
    `unsent`: no attempt of the call can have reached the server (by default, `exc`'s alone):
    an earlier attempt whose answer was lost may have applied a write that later attempts could
    not even send. `key`: a deduplicated write's Idempotency-Key, carried in `details`."""
    where = f"{call.method} {call.path}"
    if unsent is None:
        unsent = isinstance(exc, UNSENT_ERRORS)
    keyed = {} if key is None else {"idempotency_key": key}
    if unsent:
        return HakiConnectionError(f"{where}: Haki was not reached, nothing was done: {exc!r}", details=keyed)
    if call.reads_only:
        return HakiConnectionError(f"{where}: no answer from Haki: {exc!r}")
    return HakiConnectionError(
        f"{where}: the answer was lost ({exc!r}): {_UNKNOWN}",
        details={"outcome_unknown": True, **keyed},
    )


def _params(**values: object) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            continue
        out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def _fact_item(item: FactIn | str | Mapping[str, Any]) -> FactIn | Mapping[str, Any]:
    return FactIn(content=item) if isinstance(item, str) else item


def _items(items: Sequence[T], name: str) -> list[T]:
    """A list argument as a list. A bare str (or bytes, or one mapping) is refused: iterating it
    would make one item of each character (or key)."""
    if isinstance(items, str | bytes | bytearray | Mapping):
        raise TypeError(f"{name}: pass a list, not a single {type(items).__name__}")
    return list(items)


# An erasure's transaction may run HAKI_ERASURE_TIMEOUT_MS (120 s by default): the client waits
# that long and a little more, so it does not give up on an erasure the server completes.
ERASURE_TIMEOUT_SECONDS = 125.0


# A context call (and a replay, which runs one) waits for its query's vector up to the server's
# HAKI_EMBED_TIMEOUT_SECONDS (10 s by default), then answers a `degraded` packet from full text:
# after that wait it may wait for a connection again (HAKI_POOL_ACQUIRE_TIMEOUT_SECONDS, 5 s) and
# run its statements (HAKI_STATEMENT_TIMEOUT_MS, 5 s), 20 s in all. The client waits 30 s, so it
# does not give up (and ask again, and trace again) just before the degraded answer comes.
CONTEXT_TIMEOUT_SECONDS = 30.0


# What the server may take for a legal batch write, by its documented defaults (docs/spec/api.md,
# "Configuration"): a connection (HAKI_POOL_ACQUIRE_TIMEOUT_SECONDS, 5 s), the embedding, queue
# included (HAKI_EMBED_WRITE_TIMEOUT_SECONDS, 120 s), a connection again, then the store's
# statements (HAKI_STATEMENT_TIMEOUT_MS, 5 s, plus HAKI_WRITE_TIMEOUT_PER_ITEM_MS, 20 ms, for each
# of up to 1,000 items). An attempt given up sooner is resent while the first may still commit,
# and the resend is embedded and charged to the project's budget again.
BATCH_WRITE_TIMEOUT_SECONDS = 5.0 + 120.0 + 5.0 + 5.0 + 1000 * 0.020


def _shown(value: str) -> str:
    """`value` for an error message: at most 60 characters, nothing after an `@` (credentials)."""
    text = value.split("@", 1)[0] + "@..." if "@" in value else value
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _check_base_url(value: object, option: str) -> str:
    """`value` without its trailing `/`, when it is an http:// or https:// URL with a host, and no
    credentials, query or fragment; else a ValueError naming `option`. Without a scheme,
    "localhost:8000" reads as the scheme `localhost`: no request could be sent."""
    if not isinstance(value, str):
        raise TypeError(f"{option}: a str is expected, got {type(value).__name__}")
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{option}: not a URL ({exc}): {_shown(value)}") from None
    if url.scheme not in ("http", "https"):
        raise ValueError(
            f"{option}: an http:// or https:// URL is expected (e.g. {DEFAULT_BASE_URL}), got "
            f"{_shown(value)} (its scheme reads as {url.scheme!r})"
        )
    if not url.host or "%" in url.host:
        raise ValueError(f"{option}: the URL has no valid host: {_shown(value)}")
    if url.userinfo:
        raise ValueError(
            f"{option}: holds credentials (user@ or user:password@): pass the key as api_key instead"
        )
    if "?" in value or "#" in value:
        raise ValueError(
            f"{option}: a query (?) or fragment (#) cannot prefix the routes, got {_shown(value)}"
        )
    return value.rstrip("/")


def _check_api_key(value: object, option: str) -> None:
    """An API key a header can carry; the message never shows the key. None or "": none is sent."""
    if value is None or value == "":
        return
    if not isinstance(value, str):
        raise TypeError(f"{option}: a str is expected, got {type(value).__name__}")
    if not _VISIBLE_ASCII.fullmatch(value):
        raise ValueError(
            f"{option}: must be visible ASCII characters (no space, newline or other character): "
            "it is sent in the Authorization header"
        )


def _check_timeout(value: object) -> float | None:
    """The client's `timeout`: seconds, a finite number above 0, or None for no limit (as httpx
    takes it); anything else is refused when the client is made, not at its first call."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"timeout: seconds (a number) or None is expected, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"timeout: a finite number of seconds above 0 (or None) is expected, got {value!r}")
    return float(value)


class Core:
    """Configuration and request building shared by both clients."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        project_id: str | None,
        retry: RetryPolicy,
        timeout: float | None,
    ) -> None:
        url = base_url or os.environ.get("HAKI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = _check_base_url(url, "base_url" if base_url else "base_url (from $HAKI_BASE_URL)")
        self.api_key = api_key if api_key is not None else os.environ.get("HAKI_API_KEY")
        _check_api_key(self.api_key, "api_key" if api_key is not None else "api_key (from $HAKI_API_KEY)")
        self.project_id = project_id
        self.retry = retry
        self.timeout = _check_timeout(timeout)

    def at_least(self, seconds: float) -> float | None:
        """A call's wait: `seconds`, or the client's timeout when longer; None (no limit) when the
        client has none."""
        return None if self.timeout is None else max(seconds, self.timeout)

    def batch_timeout(self) -> float | None:
        """What an attempt of a batch write (or a conflict resolution, whose statements the server
        bounds as a batch's) may take: BATCH_WRITE_TIMEOUT_SECONDS, or the client's when longer."""
        return self.at_least(BATCH_WRITE_TIMEOUT_SECONDS)

    def context_timeout(self) -> float | None:
        """What an attempt of a context call or a replay may take: CONTEXT_TIMEOUT_SECONDS, or the
        client's timeout when longer."""
        return self.at_least(CONTEXT_TIMEOUT_SECONDS)

    def _erasure(self, call: Call[T]) -> Call[T]:
        """`call` with an erasure's wait: ERASURE_TIMEOUT_SECONDS, or the client's when longer."""
        return replace(call, timeout=self.at_least(ERASURE_TIMEOUT_SECONDS))

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"haki-client-python/{__version__}"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _project(self, project_id: str | None) -> str | None:
        """The project a call names; None leaves it out, and the server reads it from the key."""
        return project_id or self.project_id or None

    def _body(self, project_id: str | None, **fields: Any) -> bytes:
        """A scoped request body: `project_id` first when there is one, then `fields`."""
        project = self._project(project_id)
        return msgspec.json.encode({"project_id": project, **fields} if project else fields)

    def _scoped(
        self, method: str, path: str, out: type[T], project_id: str | None, **params: object
    ) -> Call[T]:
        """A call of one project, named in the query (`project_id` first, then `params` that are
        not None)."""
        return Call(method, path, out, params=_params(project_id=self._project(project_id), **params))

    def _subject(
        self, method: str, subject_id: str, suffix: str, out: type[T], project_id: str | None
    ) -> Call[T]:
        """A call of /v1/subjects/{subject_id}{suffix}; a subject id a path segment cannot carry
        goes in the query form of the route, /v1/subjects{suffix}: one with a `/`, and `.` and
        `..`, which URL normalisation drops (RFC 3986 §5.2.4), httpx included. So does the
        erasure of `export`: /v1/subjects/export is the query form's export."""
        if "/" in subject_id or subject_id in (".", "..") or (subject_id == "export" and not suffix):
            return self._scoped(method, f"/v1/subjects{suffix}", out, project_id, subject_id=subject_id)
        return self._scoped(method, f"/v1/subjects/{_segment(subject_id)}{suffix}", out, project_id)

    # --- calls: one per route of the contract ----------------------------------------------

    def write_facts(
        self,
        subject_id: str,
        facts: Sequence[FactIn | str | Mapping[str, Any]],
        project_id: str | None,
        idempotency_key: str | None = None,
    ) -> Call[WriteFactsResponse]:
        key = check_idempotency_key(idempotency_key)
        items = [_fact_item(f) for f in _items(facts, "facts")]
        body = self._body(project_id, subject_id=subject_id, facts=items)
        timeout = self.batch_timeout()
        return Call("POST", "/v1/facts", WriteFactsResponse, body=body, timeout=timeout, idempotency_key=key)

    def get_fact(self, fact_id: UUID | str) -> Call[Fact]:
        return Call("GET", f"/v1/facts/{_uuid(fact_id, 'fact_id')}", Fact)

    def list_facts(
        self,
        subject_id: str | None,
        status: str | None,
        limit: int | None,
        cursor: str | None,
        project_id: str | None,
    ) -> Call[FactPage]:
        return self._scoped(
            "GET",
            "/v1/facts",
            FactPage,
            project_id,
            subject_id=subject_id,
            status=status,
            limit=limit,
            cursor=cursor,
        )

    def patch_fact(self, fact_id: UUID | str, status: str | None, valid_to: datetime | None) -> Call[Fact]:
        body: dict[str, Any] = {}
        if status is not None:
            body["status"] = status
        if valid_to is not None:
            body["valid_to"] = valid_to
        return Call("PATCH", f"/v1/facts/{_uuid(fact_id, 'fact_id')}", Fact, body=msgspec.json.encode(body))

    def write_events(
        self,
        subject_id: str,
        events: Sequence[EventIn | Mapping[str, Any]],
        project_id: str | None,
        idempotency_key: str | None = None,
    ) -> Call[WriteEventsResponse]:
        key = check_idempotency_key(idempotency_key)
        items = _items(events, "events")
        body = self._body(project_id, subject_id=subject_id, events=items)
        timeout = self.batch_timeout()
        return Call(
            "POST", "/v1/events", WriteEventsResponse, body=body, timeout=timeout, idempotency_key=key
        )

    def list_conflicts(
        self, subject_id: str | None, status: str | None, cursor: str | None, project_id: str | None
    ) -> Call[ConflictList]:
        return self._scoped(
            "GET",
            "/v1/conflicts",
            ConflictList,
            project_id,
            subject_id=subject_id,
            status=status,
            cursor=cursor,
        )

    def resolve_conflict(self, conflict_set_id: UUID | str, keep: Sequence[UUID | str]) -> Call[ConflictSet]:
        """The server gives a resolution's statements HAKI_WRITE_TIMEOUT_PER_ITEM_MS a member, as a
        batch write: the client waits a batch write's time (it does not know the set's member
        count)."""
        ids = [str(_uuid(k, f"keep[{i}]")) for i, k in enumerate(_items(keep, "keep"))]
        path = f"/v1/conflicts/{_uuid(conflict_set_id, 'conflict_set_id')}/resolve"
        body = msgspec.json.encode({"keep": ids})
        return Call("POST", path, ConflictSet, body=body, timeout=self.batch_timeout())

    def context(
        self,
        subject_id: str,
        query: str,
        budget_tokens: int | None,
        include_episodes: bool | None,
        profile: ContextProfile | None,
        project_id: str | None,
        as_of: datetime | None = None,
    ) -> Call[ContextPacket]:
        body: dict[str, Any] = {"subject_id": subject_id, "query": query}
        if budget_tokens is not None:
            body["budget_tokens"] = budget_tokens
        if include_episodes is not None:
            body["include_episodes"] = include_episodes
        if profile is not None:
            body["profile"] = profile
        if as_of is not None:
            body["as_of"] = as_of
        encoded = self._body(project_id, **body)
        return Call("POST", "/v1/context", ContextPacket, body=encoded, timeout=self.context_timeout())

    def inspect(self, trace_id: UUID | str) -> Call[Inspection]:
        return Call("GET", f"/v1/inspect/{_uuid(trace_id, 'trace_id')}", Inspection)

    def stats(self, project_id: str | None) -> Call[StatsOverview]:
        return self._scoped("GET", "/v1/stats/overview", StatsOverview, project_id)

    def healthz(self) -> Call[Health]:
        return Call("GET", "/healthz", Health)

    def replay(
        self,
        trace_id: UUID | str,
        budget_tokens: int | None,
        profile: ContextProfile | None,
        recall_max_distance: float | None,
        as_of: datetime | None,
    ) -> Call[ReplayResult]:
        overrides = {
            "budget_tokens": budget_tokens,
            "profile": profile,
            "recall_max_distance": recall_max_distance,
            "as_of": as_of,
        }
        body = {name: value for name, value in overrides.items() if value is not None}
        path = f"/v1/inspect/{_uuid(trace_id, 'trace_id')}/replay"
        return Call(
            "POST", path, ReplayResult, body=msgspec.json.encode(body), timeout=self.context_timeout()
        )

    def fact_stats(
        self, subject_id: str | None, order: str | None, limit: int | None, project_id: str | None
    ) -> Call[FactStats]:
        return self._scoped(
            "GET", "/v1/stats/facts", FactStats, project_id, subject_id=subject_id, order=order, limit=limit
        )

    # --- memory lifecycle: erasure, listing, export ----------------------------------------

    def erase_subject(self, subject_id: str, project_id: str | None) -> Call[SubjectErasure]:
        return self._erasure(self._subject("DELETE", subject_id, "", SubjectErasure, project_id))

    def delete_fact(self, fact_id: UUID | str) -> Call[FactErasure]:
        return self._erasure(Call("DELETE", f"/v1/facts/{_uuid(fact_id, 'fact_id')}", FactErasure))

    def delete_event(self, event_id: UUID | str) -> Call[EventErasure]:
        return self._erasure(Call("DELETE", f"/v1/events/{_uuid(event_id, 'event_id')}", EventErasure))

    def list_events(
        self, subject_id: str | None, limit: int | None, cursor: str | None, project_id: str | None
    ) -> Call[EventPage]:
        return self._scoped(
            "GET", "/v1/events", EventPage, project_id, subject_id=subject_id, limit=limit, cursor=cursor
        )

    def get_event(self, event_id: UUID | str) -> Call[Event]:
        return Call("GET", f"/v1/events/{_uuid(event_id, 'event_id')}", Event)

    def list_subjects(
        self, limit: int | None, cursor: str | None, project_id: str | None
    ) -> Call[SubjectPage]:
        return self._scoped("GET", "/v1/subjects", SubjectPage, project_id, limit=limit, cursor=cursor)

    def export_subject(self, subject_id: str, project_id: str | None) -> Call[bytes]:
        """A streamed call: the client reads its JSON Lines itself (ExportLines)."""
        return self._subject("GET", subject_id, "/export", bytes, project_id)

    # --- webhooks (docs/webhooks.md) ---------------------------------------------------------

    def create_webhook(
        self, url: str, events: Sequence[str], include_content: bool, project_id: str | None
    ) -> Call[WebhookCreated]:
        body = self._body(
            project_id, url=url, events=_items(events, "events"), include_content=include_content
        )
        return Call("POST", "/v1/webhooks", WebhookCreated, body=body)

    def list_webhooks(self, project_id: str | None) -> Call[WebhookList]:
        return self._scoped("GET", "/v1/webhooks", WebhookList, project_id)

    def delete_webhook(self, webhook_id: UUID | str) -> Call[WebhookDeleted]:
        return Call("DELETE", f"/v1/webhooks/{_uuid(webhook_id, 'webhook_id')}", WebhookDeleted)

    def list_webhook_deliveries(
        self, webhook_id: UUID | str, status: str | None, limit: int | None
    ) -> Call[WebhookDeliveryList]:
        path = f"/v1/webhooks/{_uuid(webhook_id, 'webhook_id')}/deliveries"
        return Call("GET", path, WebhookDeliveryList, params=_params(status=status, limit=limit))


def _uuid(value: UUID | str, field: str) -> UUID:
    """An id argument, checked before anything is sent: a malformed one is the SDK's
    `InvalidArgument` (a `ValidationError` naming the argument), not a bare `ValueError`."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value).strip())
    except ValueError:
        shown = repr(value) if len(repr(value)) <= 66 else repr(value)[:66] + "..."
        raise InvalidArgument(f"{field}: a UUID is expected, got {shown}", field=field) from None


def _segment(value: str) -> str:
    """A subject id as one path segment (`%`, `?`, `#` and spaces escaped)."""
    return urllib.parse.quote(value, safe="")


class ExportLines:
    """An export stream's items, chunk by chunk: its lines end at b"\n" only (JSON Lines). httpx's
    iter_lines also splits at U+2028, U+2029 and U+0085 (str.splitlines), which a JSON string
    carries raw."""

    def __init__(self, call: Call[Any]) -> None:
        self.call = call
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> Iterator[dict[str, Any]]:
        """The items of the lines `chunk` completes, each decoded as it is taken."""
        parts = chunk.split(b"\n")
        self._pending += parts[0]
        if len(parts) == 1:
            return iter(())
        lines = [bytes(self._pending), *parts[1:-1]]
        self._pending = bytearray(parts[-1])
        return self._items(lines)

    def end(self) -> Iterator[dict[str, Any]]:
        """The item of a last line without its b"\n"."""
        return self._items([bytes(self._pending)])

    def _items(self, lines: list[bytes]) -> Iterator[dict[str, Any]]:
        for line in lines:
            item = decode_export_line(self.call, line)
            if item is not None:
                yield item


def decode_export_line(call: Call[Any], line: str | bytes) -> dict[str, Any] | None:
    """One line of an export document as a dict; None for a blank line. A line that is not a
    JSON object is a `HakiError` `invalid_response`, as a broken answer of any call."""
    if not line.strip():
        return None
    try:
        item = msgspec.json.decode(line)
        if not isinstance(item, dict):
            raise TypeError(f"not a JSON object: {type(item).__name__}")
    except (msgspec.DecodeError, TypeError) as exc:
        raise HakiError(
            f"unexpected export line for {call.method} {call.path}: {exc}",
            code="invalid_response",
            status_code=200,
        ) from exc
    return item


# POST /v1/extract waits for the server's chat model (HAKI_EXTRACT_TIMEOUT_SECONDS, 60 s by
# default) and then the embedder: the client's own 10 s would give up first. A client whose
# timeout is longer waits that.
EXTRACT_TIMEOUT_SECONDS = 120.0


def extract_call(
    core: Core,
    subject_id: str,
    messages: Sequence[ExtractMessage | Mapping[str, Any]],
    write: bool,
    project_id: str | None,
    timeout: float | None,
    idempotency_key: str | None = None,
) -> Call[ExtractResult]:
    key = check_idempotency_key(idempotency_key)
    body = core._body(project_id, subject_id=subject_id, messages=_items(messages, "messages"), write=write)
    return Call(
        "POST",
        "/v1/extract",
        ExtractResult,
        body=body,
        timeout=timeout or core.at_least(EXTRACT_TIMEOUT_SECONDS),
        idempotency_key=key,
    )


def request_options(call: Call[Any]) -> dict[str, Any]:
    """Per-call httpx options: a call's own timeout, else the client's."""
    return {} if call.timeout is None else {"timeout": call.timeout}


def request_headers(call: Call[Any]) -> dict[str, str]:
    """The call's own headers, built once for all its attempts: a deduplicated write's one
    Idempotency-Key (the caller's, else a new one) is the same in every attempt."""
    headers: dict[str, str] = {}
    if call.body is not None:
        headers["Content-Type"] = "application/json"
    if call.deduplicated:
        headers["Idempotency-Key"] = call.idempotency_key or new_idempotency_key()
    return headers


def key_in_progress(response: httpx.Response) -> bool:
    """A 409 saying the Idempotency-Key's first request has not committed yet: retry it."""
    if response.status_code != 409:
        return False
    try:
        details = _ERROR_DECODER.decode(response.content).details or {}
    except msgspec.DecodeError:
        return False
    return details.get("reason") == "idempotency_key_in_progress"


def should_retry(response: httpx.Response) -> bool:
    """429 always; a 503, or a 502 (an extraction model that was busy), only when the server
    sent `Retry-After` and did not mark it permanent; a 409 `idempotency_key_in_progress`."""
    if response.status_code == 429:
        return True
    if response.status_code == 409:
        return key_in_progress(response)
    waits = parse_retry_after(response.headers.get("retry-after")) is not None
    if response.status_code not in (502, 503) or not waits:
        return False
    try:
        details = _ERROR_DECODER.decode(response.content).details or {}
    except msgspec.DecodeError:
        return True
    return details.get("permanent") is not True
