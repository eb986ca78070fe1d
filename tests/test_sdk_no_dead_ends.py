"""The Python SDK retries only what can succeed, needs no project id, and refuses a malformed
argument with its own typed error naming it (a scripted transport, no server); its `render`
offers the ids `recall` shows, byte for byte the service's."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from haki_client import (
    AsyncHaki,
    ConflictError,
    ContextPacket,
    EventIn,
    Haki,
    HakiConnectionError,
    HakiError,
    InvalidArgument,
    RateLimited,
    Unavailable,
    ValidationError,
)
from haki_client import render as sdk_render

from service.constants import MAX_BATCH
from service.context.render import render as service_render
from service.settings import Settings
from service.structs import ContextPacket as ServicePacket
from tests.helpers.scripted_transport import Script

GOLDEN = Path(__file__).resolve().parents[1] / "sdk" / "typescript" / "test" / "render_golden.json"


def unavailable(retry_after: str | None, **details: Any) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"code": "unavailable", "message": "unavailable now", "details": details or None}
    return httpx.Response(503, json=body, headers=headers)


def packet_json() -> dict[str, Any]:
    return {
        "trace_id": str(uuid.uuid4()),
        "profile": "unified",
        "status": "ok",
        "warnings": [],
        "empty_reason": None,
        "budget_tokens": 900,
        "used_tokens": 0,
        "facts": [],
        "episodes": [],
    }


def client(script: Script, **kw: Any) -> Haki:
    return Haki("http://haki.test", "hk_test", transport=httpx.MockTransport(script), backoff=0.001, **kw)


def test_a_503_without_retry_after_is_not_retried() -> None:
    script = Script(unavailable(None), unavailable(None))
    with client(script) as haki, pytest.raises(Unavailable):
        haki.context("s", "q")
    assert len(script.requests) == 1


def test_a_503_marked_permanent_is_not_retried_even_with_retry_after() -> None:
    not_configured = unavailable("1", setting="HAKI_EXTRACT_BASE_URL", permanent=True)
    script = Script(not_configured)
    with client(script) as haki, pytest.raises(Unavailable) as info:
        haki.extract("s", [{"role": "user", "content": "hi"}])
    assert len(script.requests) == 1
    assert info.value.details["permanent"] is True


def test_a_503_with_retry_after_is_retried() -> None:
    script = Script(unavailable("0"), httpx.Response(200, json=packet_json()))
    with client(script) as haki:
        haki.context("s", "q")
    assert len(script.requests) == 2


def test_a_502_is_retried_only_with_retry_after() -> None:
    """The server sends Retry-After on a 502 only for an extraction model that was busy."""
    body = {"code": "extractor_error", "message": "busy", "details": {"upstream_status": 429}}
    script = Script(
        httpx.Response(502, json=body, headers={"Retry-After": "0"}),
        httpx.Response(502, json={**body, "details": {"upstream_status": 500}}),
    )
    with client(script) as haki, pytest.raises(HakiError) as info:
        haki.extract("s", [{"role": "user", "content": "hi"}])
    assert len(script.requests) == 2
    assert info.value.status_code == 502 and info.value.details["upstream_status"] == 500


async def test_the_async_client_follows_the_same_rule() -> None:
    script = Script(unavailable(None), unavailable("0"), httpx.Response(200, json=packet_json()))
    async with AsyncHaki("http://haki.test", "hk", transport=httpx.MockTransport(script)) as haki:
        with pytest.raises(Unavailable):
            await haki.context("s", "q")
        await haki.context("s", "q")
    assert len(script.requests) == 3


def test_no_project_id_leaves_it_to_the_key() -> None:
    script = Script(
        httpx.Response(200, json=packet_json()),
        httpx.Response(200, json={"facts": [], "next_cursor": None}),
        httpx.Response(201, json={"facts": []}),
    )
    with client(script) as haki:
        assert haki.project_id is None
        haki.context("s", "q")
        haki.list_facts("s")
        haki.write_facts("s", ["x"])
    sent = json.loads(script.requests[0].content)
    assert sent == {"subject_id": "s", "query": "q"}
    assert str(script.requests[1].url) == "http://haki.test/v1/facts?subject_id=s"
    assert "project_id" not in json.loads(script.requests[2].content)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda h: h.inspect("trace_id: garbage"), "trace_id"),
        (lambda h: h.get_fact("nope"), "fact_id"),
        (lambda h: h.resolve_conflict("not-an-id", [str(uuid.uuid4())]), "conflict_set_id"),
        (lambda h: h.resolve_conflict(uuid.uuid4(), [str(uuid.uuid4()), "x"]), "keep[1]"),
        (lambda h: h.delete_event(""), "event_id"),
    ],
)
def test_a_malformed_id_is_a_typed_error_naming_the_argument(call: Any, field: str) -> None:
    script = Script()
    with client(script) as haki, pytest.raises(InvalidArgument) as info:
        call(haki)
    error = info.value
    assert isinstance(error, ValidationError) and isinstance(error, HakiError)
    assert isinstance(error, ValueError)  # what it raised before, still caught by old code
    assert error.field == field and error.code == "validation_error" and error.status_code is None
    assert str(error).startswith(f"validation_error: {field}: a UUID is expected")
    assert script.requests == []  # nothing sent


def test_an_id_with_spaces_around_is_still_the_id() -> None:
    trace = uuid.uuid4()
    script = Script(httpx.Response(404, json={"code": "not_found", "message": "no"}))
    with client(script) as haki, pytest.raises(HakiError):
        haki.inspect(f"  {trace} ")
    assert str(script.requests[0].url) == f"http://haki.test/v1/inspect/{trace}"


def test_fact_ids_render_as_the_service_renders_them() -> None:
    cases = [c for c in json.loads(GOLDEN.read_text()) if "text" in c["expected"]]
    shown = 0
    for case in cases:
        raw = json.dumps({"warnings": [], **case["packet"]}).encode()
        ours = sdk_render(msgspec.json.decode(raw, type=ContextPacket), fact_ids=True)
        theirs = service_render(msgspec.json.decode(raw, type=ServicePacket), fact_ids=True)
        assert ours == theirs, case["name"]
        for fact in case["packet"]["facts"]:
            shown += f"[fact_id: {fact['fact_id']}]" in ours
        # Without the option, the golden bytes.
        plain = sdk_render(
            msgspec.json.decode(raw, type=ContextPacket), state_warnings=case["state_warnings"]
        )
        assert plain == case["expected"]["text"], case["name"]
    assert shown > 5


# --- a write whose answer was lost, then an error answer (hunt B, finding 1) ----------------


def error(status: int, code: str, retry_after: str | None = None, **details: Any) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"code": code, "message": f"{code} now", "details": details or None}
    return httpx.Response(status, json=body, headers=headers)


def written() -> httpx.Response:
    return httpx.Response(201, json={"facts": [{"fact_id": str(uuid.uuid4()), "status": "active"}]})


IN_PROGRESS = {"reason": "idempotency_key_in_progress", "idempotency_key": "k"}
# What a write's attempts got after its first answer was lost: each ends the retries on an answer
# that, alone, would say nothing was written.
LOST_THEN: list[tuple[type[HakiError], list[httpx.Response]]] = [
    (RateLimited, [error(429, "rate_limited", "60")]),  # a Retry-After past max_wait
    (Unavailable, [error(503, "unavailable", "0") for _ in range(3)]),
    (ConflictError, [error(409, "conflict", **IN_PROGRESS) for _ in range(3)]),
]


@pytest.mark.parametrize(("cls", "later"), LOST_THEN)
def test_a_write_whose_answer_was_lost_stays_unknown_whatever_error_the_retries_end_on(
    cls: type[HakiError], later: list[httpx.Response]
) -> None:
    """The first attempt may have committed: the 429, 503 or 409 of the last one must not read
    as "nothing was written"; the error carries the key, and a resend under it is deduplicated."""
    script = Script(httpx.ReadTimeout("lost"), *later, written())
    with client(script) as haki:
        with pytest.raises(cls) as info:
            haki.write_facts("s", ["Bob is allergic to shellfish."])
        key = script.requests[0].headers["idempotency-key"]
        assert {r.headers["idempotency-key"] for r in script.requests} == {key}
        assert info.value.details["outcome_unknown"] is True
        assert info.value.details["idempotency_key"] == key
        assert "the outcome is unknown" in str(info.value)
        haki.write_facts(
            "s", ["Bob is allergic to shellfish."], idempotency_key=info.value.details["idempotency_key"]
        )
    assert script.requests[-1].headers["idempotency-key"] == key


async def test_async_a_write_whose_answer_was_lost_then_rate_limited_stays_unknown() -> None:
    script = Script(httpx.RemoteProtocolError("cut"), error(429, "rate_limited", "60"))
    async with AsyncHaki("http://haki.test", "hk", transport=httpx.MockTransport(script)) as haki:
        with pytest.raises(RateLimited) as info:
            await haki.write_events("s", [EventIn(content="e", occurred_at=datetime.now(UTC))])
    key = script.requests[0].headers["idempotency-key"]
    assert info.value.details == {"outcome_unknown": True, "idempotency_key": key}
    assert info.value.retry_after == 60.0


def test_every_error_of_a_deduplicated_write_carries_its_key_and_only_a_maybe_applied_one_is_unknown() -> (
    None
):
    """A 429 that no earlier attempt preceded said nothing was written: it keeps saying so, with
    the key. A 409 `idempotency_key_in_progress` says a write under the key is in flight, and a
    gateway's 504 page may stand for a request it forwarded: both are unknown from the start."""
    cases = [
        (error(429, "rate_limited", "60"), False),
        (error(400, "validation_error", field="facts[0].content"), False),
        (error(409, "conflict", **IN_PROGRESS), True),
        (httpx.Response(504, text="<html>gateway time-out</html>"), True),
    ]
    for answer, unknown in cases:
        script = Script(answer)
        with client(script, max_retries=0) as haki, pytest.raises(HakiError) as info:
            haki.write_facts("s", ["x"], idempotency_key="mine")
        assert info.value.details["idempotency_key"] == "mine", answer
        assert info.value.details.get("outcome_unknown", False) is unknown, answer
    # A read carries neither; a gateway's page is `error`, not the contract's server bug `internal`.
    for status in (500, 502, 504):
        page = httpx.Response(status, text="<html>bad gateway</html>")
        with client(Script(page)) as haki, pytest.raises(HakiError) as info:
            haki.list_facts("s")
        assert info.value.code == "error" and info.value.details == {}, status


# --- a batch write waits what the server may take (finding 2) --------------------------------


def test_a_batch_write_waits_at_least_the_server_s_documented_budget() -> None:
    """The server may take its pool wait, the write's embedding (queue included), a pool wait
    again and its store's statements for a legal batch: an attempt given up sooner is resent
    while the first may still commit (embedded and charged again)."""
    server = Settings()
    budget = (
        2 * server.pool_acquire_timeout_seconds
        + server.embed_write_timeout_seconds
        + (server.statement_timeout_ms + MAX_BATCH * server.write_timeout_per_item_ms) / 1000
    )
    script = Script(*[httpx.Response(200, json={}) for _ in range(4)])
    with client(script) as haki:
        for call in (
            lambda: haki.write_facts("s", [f"fact {i}" for i in range(MAX_BATCH)]),
            lambda: haki.write_facts("s", ["one"]),
            lambda: haki.write_events("s", [EventIn(content="e", occurred_at=datetime.now(UTC))]),
            lambda: haki.resolve_conflict(uuid.uuid4(), [uuid.uuid4()]),
        ):
            with pytest.raises(HakiError):  # `{}` is no answer of these: only the wait matters
                call()
    assert all(r.extensions["timeout"]["read"] >= budget for r in script.requests)


# --- timeout=None, and a timeout no call can use (finding 4) ---------------------------------


def test_timeout_none_means_no_limit_for_every_call() -> None:
    script = Script(*[httpx.Response(200, json={}) for _ in range(5)])
    with client(script, timeout=None) as haki:
        for call in (
            lambda: haki.write_facts("s", ["x"]),
            lambda: haki.context("s", "q"),
            lambda: haki.erase_subject("s"),
            lambda: haki.extract("s", [{"role": "user", "content": "x"}]),
            lambda: haki.get_fact(uuid.uuid4()),
        ):
            with pytest.raises(HakiError) as info:
                call()
            assert info.value.code == "invalid_response"  # not a TypeError of `None + float`
    assert all(set(r.extensions["timeout"].values()) == {None} for r in script.requests)


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), "10", True])
@pytest.mark.parametrize("cls", [Haki, AsyncHaki])
def test_a_timeout_no_call_can_use_is_refused_at_construction(cls: type[Haki], timeout: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=r"^timeout: "):
        cls("http://haki.test", "hk", timeout=timeout)


# --- an answer whose body does not decode (finding 5) ----------------------------------------


def not_gzip(status: int = 200) -> httpx.Response:
    body = httpx.ByteStream(b"not gzip at all")  # a stream: decoded when the client reads it
    return httpx.Response(status, headers={"Content-Encoding": "gzip"}, stream=body)


def test_a_body_that_does_not_decode_is_the_sdk_s_error() -> None:
    """httpx's DecodingError is no TransportError: it escaped raw, and a PATCH lost its "outcome
    unknown"; a GET is resent, as after any broken answer."""
    script = Script(not_gzip())
    with client(script) as haki, pytest.raises(HakiConnectionError) as info:
        haki.retract_fact(uuid.uuid4())
    assert info.value.details == {"outcome_unknown": True} and len(script.requests) == 1
    script = Script(not_gzip(), httpx.Response(200, json={"facts": [], "next_cursor": None}))
    with client(script) as haki:
        assert haki.list_facts("s").facts == []
    assert len(script.requests) == 2


async def test_async_a_body_that_does_not_decode_is_the_sdk_s_error() -> None:
    script = Script(not_gzip(201))
    async with AsyncHaki("http://haki.test", "hk", transport=httpx.MockTransport(script)) as haki:
        with pytest.raises(HakiConnectionError) as info:
            await haki.create_webhook("https://hooks.example.com/h", ["fact.retracted"])
    assert info.value.details == {"outcome_unknown": True}


# --- an export splits its lines on "\n" only (finding 3) -------------------------------------

ODD_TEXTS = ["a\u2028b", "c\u2029d", "e\x85f", "g\x1ch\x0bi\x0cj\rk"]


def export_body() -> bytes:
    """An export whose texts hold the characters str.splitlines splits at, raw as JSON allows,
    in chunks that cut lines (and a character) anywhere."""
    lines = [{"haki_export": 1}, *({"kind": "fact", "content": t} for t in ODD_TEXTS), {"kind": "end"}]
    return b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)


class Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    def __init__(self, body: bytes, size: int) -> None:
        self.chunks = [body[i : i + size] for i in range(0, len(body), size)]

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


@pytest.mark.parametrize("size", [1, 7, 10_000])
def test_an_export_splits_lines_on_newline_only(size: int) -> None:
    script = Script(httpx.Response(200, stream=Chunks(export_body(), size)))
    with client(script) as haki:
        items = list(haki.export_subject("s"))
    assert [i.get("content") for i in items[1:-1]] == ODD_TEXTS and items[-1] == {"kind": "end"}


async def test_async_an_export_splits_lines_on_newline_only() -> None:
    script = Script(httpx.Response(200, stream=Chunks(export_body(), 5)))
    async with AsyncHaki("http://haki.test", "hk", transport=httpx.MockTransport(script)) as haki:
        items = [item async for item in haki.export_subject("s")]
    assert [i.get("content") for i in items[1:-1]] == ODD_TEXTS and len(items) == len(ODD_TEXTS) + 2
