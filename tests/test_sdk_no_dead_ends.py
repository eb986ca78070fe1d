"""The Python SDK retries only what can succeed, needs no project id, and refuses a malformed
argument with its own typed error naming it (a scripted transport, no server); its `render`
offers the ids `recall` shows, byte for byte the service's."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from haki_client import (
    AsyncHaki,
    ContextPacket,
    Haki,
    HakiError,
    InvalidArgument,
    Unavailable,
    ValidationError,
)
from haki_client import render as sdk_render

from service.context.render import render as service_render
from service.structs import ContextPacket as ServicePacket

GOLDEN = Path(__file__).resolve().parents[1] / "sdk" / "typescript" / "test" / "render_golden.json"


class Script:
    """Answers each request with the next scripted response; records what it was sent."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)


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
    assert info.value.status_code == 502 and info.value.details == {"upstream_status": 500}


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
