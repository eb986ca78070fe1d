"""POST /v1/extract against a scripted OpenAI-compatible chat server (tests/helpers/fake_chat.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from typing import Any, get_args

import asyncpg
import httpx
import msgspec
import pytest
from haki_client import AsyncHaki, ExtractMessage

from service.app import create_app
from service.constants import MAX_BATCH
from service.embedding.embedder import Embedder, HashEmbedder
from service.settings import Settings
from service.structs import RefusalReason
from tests.helpers import assert_error, bearer, stats
from tests.helpers.app import SingleConnectionPool, asgi_transport, make_client, migrated_key, pooled_client
from tests.helpers.fake_chat import FakeChat, Step, answer

SUBJECT = "alice"
MESSAGES = [
    {"role": "user", "content": "Hi! I just started a new job at Globex as a data engineer.",
     "occurred_at": "2026-11-30T09:00:00+00:00"},
    {"role": "assistant", "content": "Congratulations! How is Berlin treating you?"},
    {"role": "user", "content": "Great, I love living in Berlin. Also I am vegetarian now."},
]  # fmt: skip


async def extract(client: httpx.AsyncClient, key: str, **body: Any) -> httpx.Response:
    payload = {"subject_id": SUBJECT, "messages": MESSAGES, **body}
    return await client.post("/v1/extract", json=payload, headers=bearer(key))


async def counts(client: httpx.AsyncClient, key: str) -> tuple[int, int]:
    s = (await stats(client, key)).json()
    return s["facts_total"], s["events_total"]


async def test_not_configured_is_503_naming_the_setting(client: httpx.AsyncClient, key: str) -> None:
    body = assert_error(await extract(client, key), 503, "unavailable")
    assert "HAKI_EXTRACT_BASE_URL" in body["message"]
    assert body["details"]["setting"] == "HAKI_EXTRACT_BASE_URL"
    assert await counts(client, key) == (0, 0)


async def test_writes_events_and_linked_facts(ext: httpx.AsyncClient, key: str, chat: FakeChat) -> None:
    chat.then(
        answer(
            {"content": "Alice works at Globex as a data engineer.", "key": "employer", "source_message": 0},
            {"content": "Alice is vegetarian.", "key": "diet", "source_message": 2},
            {
                "content": "Alice lives in Berlin.",
                "key": "city",
                "source_message": 2,
                "volatility": "volatile",
            },
        )
    )
    r = await extract(ext, key)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["written"] is True and out["model"] == "fake-model" and out["prompt_version"] == "v2"
    assert out["refused"] == []
    events = [e["event_id"] for e in out["events"]]
    assert len(events) == 3
    facts = out["facts"]
    assert [f["key"] for f in facts] == ["employer", "diet", "city"]
    assert [f["source_event_id"] for f in facts] == [events[0], events[2], events[2]]
    stored = (await ext.get(f"/v1/facts/{facts[2]['fact_id']}", headers=bearer(key))).json()
    assert stored["source_event_id"] == events[2]
    assert stored["volatility"] == "volatile" and stored["stale_after_seconds"] > 0
    assert stored["metadata"] == {"extracted_by": "fake-model", "prompt_version": "v2"}
    assert await counts(ext, key) == (3, 3)

    # What the model was sent: the schema, the model, the key, the dated messages.
    sent = chat.requests[0]
    assert sent["model"] == "fake-model"
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert "keeps only durable facts" in sent["messages"][0]["content"]
    assert chat.headers[0]["Authorization"] == "Bearer sk-test"
    payload = chat.user_payload()
    assert payload["known_facts"] == []
    assert [m["role"] for m in payload["messages"]] == ["user", "assistant", "user"]
    assert payload["messages"][0]["occurred_at"].startswith("2026-11-30T09:00:00")

    # Each message is an event `role: content`, so the episode reads as a turn of the conversation.
    packet = (
        await ext.post(
            "/v1/context",
            json={"subject_id": SUBJECT, "query": "Congratulations on the job"},
            headers=bearer(key),
        )
    ).json()
    assert any(e["content"].startswith("assistant: Congratulations!") for e in packet["episodes"])


async def test_known_facts_let_the_model_supersede_and_conflict(
    ext: httpx.AsyncClient, key: str, chat: FakeChat
) -> None:
    written = await ext.post(
        "/v1/facts",
        json={
            "subject_id": SUBJECT,
            "facts": [
                {"content": "Alice works at Acme.", "key": "employer", "valid_from": "2020-01-01T00:00:00Z"},
                {"content": "Alice lives in Paris.", "key": "city"},
                {"content": "Alice plays chess."},
            ],
        },
        headers=bearer(key),
    )
    acme, paris, chess = (f["fact_id"] for f in written.json()["facts"])
    chat.then(Step(answer={"facts": []}))
    await extract(ext, key, write=False)
    known = chat.user_payload()["known_facts"]
    # Keyed facts first, each with its key, so the model can reuse the key or supersede it.
    assert {k["content"] for k in known[:2]} == {"Alice works at Acme.", "Alice lives in Paris."}
    assert known[2]["content"] == "Alice plays chess." and known[2]["key"] is None
    index = {k["content"]: k["index"] for k in known}

    chat.then(
        answer(
            {
                "content": "Alice works at Globex.",
                "key": "employer",
                "source_message": 0,
                "supersedes": index["Alice works at Acme."],
            },
            # Same key, other content, no supersedes: the ordinary write path opens a conflict.
            {"content": "Alice lives in Berlin.", "key": "city", "source_message": 2},
        )
    )
    r = await extract(ext, key)
    assert r.status_code == 201, r.text
    globex, berlin = r.json()["facts"]
    assert globex["supersedes"] == acme and globex["conflict_set_id"] is None
    assert berlin["conflict_set_id"] is not None
    assert (await ext.get(f"/v1/facts/{acme}", headers=bearer(key))).json()["status"] == "superseded"
    conflict = (await ext.get("/v1/conflicts", headers=bearer(key))).json()["conflicts"][0]
    assert {m["fact_id"] for m in conflict["members"]} == {paris, berlin["fact_id"]}
    assert (await ext.get(f"/v1/facts/{chess}", headers=bearer(key))).json()["status"] == "active"


async def test_refused_proposals_are_listed_with_their_reason(
    ext: httpx.AsyncClient, key: str, chat: FakeChat
) -> None:
    later = {"content": "Alice works at Initech.", "key": "job", "valid_from": "2030-01-01T00:00:00Z"}
    written = await ext.post(
        "/v1/facts",
        json={"subject_id": SUBJECT, "facts": [{"content": "Alice is vegetarian.", "key": "diet"}, later]},
        headers=bearer(key),
    )
    # Known facts: 0 is Initech (keyed, newest), 1 vegetarian.
    chat.then(
        answer(
            {"content": "Alice works at Globex.", "key": "employer", "source_message": 0},
            {"content": "  alice is VEGETARIAN. ", "source_message": 2},
            {"content": "Alice works at  Globex.", "source_message": 0},
            {"content": "Alice likes tea.", "source_message": 7},
            {"content": "Alice lives in Berlin.", "source_message": 2, "supersedes": 5},
            {"content": "Alice eats fish.", "source_message": 2, "supersedes": 1},
            {"content": "Alice eats meat.", "source_message": 2, "supersedes": 1},
            # Its successor would start now, before 2030: a refusal, not the write's 422.
            {"content": "Alice left Initech.", "key": "job", "source_message": 0, "supersedes": 0},
            {"content": "   ", "source_message": 0},
            {"content": "Alice has a cat.", "key": "k" * 201, "source_message": 0},
            {"content": "Alice has a dog.", "key": "", "source_message": 2},
        )
    )
    r = await extract(ext, key)
    assert r.status_code == 201, r.text
    out = r.json()
    assert [(f["content"], f["key"]) for f in out["facts"]] == [
        ("Alice works at Globex.", "employer"),
        ("Alice eats fish.", None),
        ("Alice has a dog.", None),
    ]
    # Every refusal reason of the contract, in its declared order (two duplicates: an active fact
    # and an earlier proposal): a reason added to RefusalReason needs a proposal here, or a test
    # of its own (`batch_full`: test_one_extraction_writes_at_most_max_batch_facts).
    reasons = [r for r in get_args(RefusalReason) if r != "batch_full"]
    assert [x["reason"] for x in out["refused"]] == ["duplicate", *reasons]
    assert all(x["message"] for x in out["refused"])
    assert await counts(ext, key) == (5, 3)
    initech = written.json()["facts"][1]["fact_id"]
    assert (await ext.get(f"/v1/facts/{initech}", headers=bearer(key))).json()["status"] == "active"


async def test_a_refused_key_is_cut_as_its_content(ext: httpx.AsyncClient, key: str, chat: FakeChat) -> None:
    """A model's key past its 200 characters is refused; the refusal shows 200 of them, as of
    a content, not the whole text the model wrote."""
    chat.then(answer({"content": "Alice has a cat.", "key": "k" * 50_000, "source_message": 0}))
    r = await extract(ext, key)
    assert r.status_code == 201, r.text
    (refused,) = r.json()["refused"]
    assert (refused["key"], refused["reason"]) == ("k" * 200 + "...", "invalid_key")


@pytest.mark.parametrize("write", [True, False])
async def test_a_proposal_holding_nul_is_refused_not_looked_up(
    ext: httpx.AsyncClient, key: str, chat: FakeChat, write: bool
) -> None:
    chat.then(
        answer(
            {"content": "a\u0000b", "source_message": 0}, {"content": "Alice likes tea.", "source_message": 0}
        )
    )
    r = await extract(ext, key, write=write)
    assert r.status_code == (201 if write else 200), r.text
    out = r.json()
    assert [f["content"] for f in out["facts"]] == ["Alice likes tea."]
    assert [x["reason"] for x in out["refused"]] == ["invalid_content"]


async def test_a_refusal_holding_nul_is_stored_for_its_idempotency_key(
    ext: httpx.AsyncClient, key: str, chat: FakeChat
) -> None:
    """The SDKs send an Idempotency-Key on every extraction, and its record is jsonb, which
    cannot hold NUL: a refusal that showed the model's NUL made every retry a 500."""
    chat.then(
        answer(
            {"content": "a\u0000b", "source_message": 0},
            {"content": "Alice has a cat.", "key": "pet\u0000name", "source_message": 0},
            {"content": "Alice likes tea.", "source_message": 0},
        )
    )
    headers = {**bearer(key), "Idempotency-Key": "extract-nul"}
    payload = {"subject_id": SUBJECT, "messages": MESSAGES}
    first = await ext.post("/v1/extract", json=payload, headers=headers)
    assert first.status_code == 201, first.text
    refused = first.json()["refused"]
    assert [(x["content"], x["key"], x["reason"]) for x in refused] == [
        ("a\ufffdb", None, "invalid_content"),
        ("Alice has a cat.", "pet\ufffdname", "invalid_key"),
    ]
    again = await ext.post("/v1/extract", json=payload, headers=headers)
    assert again.status_code == 201, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert len(chat.requests) == 1
    assert await counts(ext, key) == (1, 3)


async def test_dry_run_writes_nothing(ext: httpx.AsyncClient, key: str, chat: FakeChat) -> None:
    chat.then(answer({"content": "Alice works at Globex.", "key": "employer", "source_message": 0}))
    r = await extract(ext, key, write=False)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["written"] is False and out["events"] == []
    (fact,) = out["facts"]
    assert fact["content"] == "Alice works at Globex." and fact["fact_id"] is None
    assert fact["source_event_id"] is None and fact["source_message"] == 0
    assert await counts(ext, key) == (0, 0)


@pytest.mark.parametrize(
    "step",
    [
        Step(content="Sure! Here are the facts: Alice works at Globex."),
        Step(content='```json\n{"facts": []}\n```'),
        Step(answer={"items": []}),
        Step(answer={"facts": [{"content": "Alice works at Globex."}]}),
        Step(answer={"facts": [{"content": "x", "source_message": "0"}]}),
        Step(answer={"facts": [{"content": "x", "source_message": 0, "confidence": 0.9}]}),
        Step(answer={"facts": [{"content": "x", "source_message": 0, "volatility": "sometimes"}]}),
        Step(status=500),
        Step(status=429),
        Step(body=b"<html>gateway</html>"),
        Step(body=b'{"choices": []}'),
        Step(
            body=b'{"choices": [{"message": {"content": "{}"}}], "usage": ' + b"[" * 3000 + b"]" * 3000 + b"}"
        ),
        Step(content='{"facts": ' + "[" * 3000 + "]" * 3000 + "}"),
    ],
    ids=[
        "prose",
        "fenced",
        "wrong-top-key",
        "missing-field",
        "wrong-type",
        "unknown-field",
        "bad-enum",
        "http-500",
        "http-429",
        "not-json",
        "no-choice",
        "nested-past-the-decoder",
        "nested-answer",
    ],
)
async def test_malformed_answer_is_502_and_writes_nothing(
    ext: httpx.AsyncClient, key: str, chat: FakeChat, step: Step
) -> None:
    # One good proposal would be written if Haki validated item by item: the whole answer goes.
    chat.then(step)
    body = assert_error(await extract(ext, key), 502, "extractor_error")
    assert "nothing was written" in body["message"]
    assert await counts(ext, key) == (0, 0)


@pytest.mark.parametrize(
    ("step", "wait"),
    [
        (Step(status=429, headers={"Retry-After": "7"}), "7"),
        (Step(status=503, headers={"Retry-After": "2.5"}), "3"),
        (Step(status=429), "1"),
        (Step(status=503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), "1"),
        (Step(status=500, headers={"Retry-After": "7"}), None),
        (Step(status=400), None),
    ],
    ids=["429-wait", "503-fraction", "429-no-wait", "503-date", "500", "400"],
)
async def test_a_busy_model_s_502_says_when_to_retry(
    ext: httpx.AsyncClient, key: str, chat: FakeChat, step: Step, wait: str | None
) -> None:
    """A model rate-limited or overloaded passes later: the 502 carries its wait (whole seconds,
    at least 1), which the SDKs honour; a model that failed otherwise is not worth a retry."""
    chat.then(step)
    r = await extract(ext, key)
    body = assert_error(r, 502, "extractor_error")
    assert r.headers.get("retry-after") == wait
    assert body["details"].get("retry_after_seconds") == (None if wait is None else int(wait))
    assert body["details"]["upstream_status"] == step.status
    assert await counts(ext, key) == (0, 0)


async def test_the_sdk_retries_a_busy_model_under_one_key(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str, chat: FakeChat
) -> None:
    app_settings = msgspec.structs.replace(settings, extract_base_url=chat.url, extract_model="fake-model")
    app = create_app(app_settings, pool=SingleConnectionPool(conn), embedder=hash_embedder)
    chat.then(
        Step(status=429, headers={"Retry-After": "1"}),
        answer({"content": "Alice works at Globex.", "key": "employer", "source_message": 0}),
    )
    async with AsyncHaki(
        "http://testserver", key, project_id="proj-a", transport=asgi_transport(app)
    ) as haki:
        result = await haki.extract(SUBJECT, [ExtractMessage(role="user", content="I joined Globex.")])
    assert result.written is True and [f.content for f in result.facts] == ["Alice works at Globex."]
    assert len(chat.requests) == 2


async def test_model_time_out_is_504_and_writes_nothing(
    ext: httpx.AsyncClient, key: str, chat: FakeChat
) -> None:
    chat.then(Step(answer={"facts": []}, delay=3.0))
    body = assert_error(await extract(ext, key), 504, "extractor_timeout")
    assert "HAKI_EXTRACT_TIMEOUT_SECONDS" in body["message"]
    assert "127.0.0.1" not in str(body)
    assert await counts(ext, key) == (0, 0)


SECRET_URL = "http://admin:s3cret@127.0.0.1:{port}/v1"


@pytest.mark.parametrize(
    "step",
    [
        None,  # nothing listens on the port
        Step(status=401, body=b'{"error": "key sk-test refused by gateway 10.9.8.7"}'),
        Step(body=b"<html>10.9.8.7 sk-test</html>"),
    ],
    ids=["unreachable", "http-error", "not-a-completion"],
)
async def test_extractor_errors_show_tenants_no_operator_secret(
    settings: Settings,
    conn: asyncpg.Connection,
    hash_embedder: Embedder,
    key: str,
    chat: FakeChat,
    step: Step | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The model's URL (its userinfo, its host) and what the endpoint itself answered are the
    operator's: the server logs them, redacted, and the client reads neither."""
    port = httpx.URL(chat.url).port if step is not None else 9
    if step is not None:
        chat.then(step)
    base = SECRET_URL.format(port=port)
    async with make_client(
        settings, conn, hash_embedder, extract_base_url=base, extract_model="m", extract_api_key="sk-test"
    ) as c:
        # Building the app configured logging anew, without caplog's handler on the root.
        logger = logging.getLogger("haki.extraction")
        logger.addHandler(caplog.handler)
        try:
            r = await extract(c, key)
        finally:
            logger.removeHandler(caplog.handler)
    assert_error(r, 502, "extractor_error")
    for secret in ("s3cret", "admin", "127.0.0.1", "10.9.8.7", "sk-test"):
        assert secret not in r.text, r.text
    logged = [m.getMessage() for m in caplog.records if m.name == "haki.extraction"]
    assert any(f"http://127.0.0.1:{port}/v1/chat/completions" in m for m in logged), logged
    assert not any("s3cret" in m for m in logged), logged


async def test_another_projects_key_is_403(
    ext: httpx.AsyncClient, key: str, other_key: str, chat: FakeChat
) -> None:
    r = await extract(ext, other_key, project_id="proj-a")
    assert_error(r, 403, "forbidden")
    assert chat.requests == []  # the model never saw proj-a's facts


async def test_a_write_on_another_model_is_409_before_the_model_is_asked(
    ext: httpx.AsyncClient, settings: Settings, conn: asyncpg.Connection, key: str, chat: FakeChat
) -> None:
    written = await ext.post(
        "/v1/facts", json={"subject_id": SUBJECT, "facts": [{"content": "x"}]}, headers=bearer(key)
    )
    assert written.status_code == 201, written.text  # the project's vectors are the hash model's
    async with make_client(
        settings,
        conn,
        HashEmbedder(model="model-b"),
        extract_base_url=chat.url,
        extract_model="fake-model",
        extract_api_key="sk-test",
    ) as other:
        r = await extract(other, key)
    assert_error(r, 409, "embedding_model_mismatch")
    assert chat.requests == []  # neither the chat model nor the embedder was billed
    assert await counts(ext, key) == (1, 0)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0].content"),
        (
            {"messages": [{"role": "user", "content": "hi", "occurred_at": "yesterday"}]},
            "messages[0].occurred_at",
        ),
        ({"write": "yes"}, "write"),
    ],
)
async def test_bad_input_names_the_field(
    ext: httpx.AsyncClient, key: str, chat: FakeChat, body: dict[str, Any], field: str
) -> None:
    r = await extract(ext, key, **body)
    assert r.status_code == 400, r.text
    assert r.json()["details"]["field"] == field
    assert chat.requests == []


@pytest.mark.parametrize("write", [True, False])
@pytest.mark.parametrize(
    "instant", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "0001-01-01T00:30:00+01:00"]
)
async def test_an_unstorable_occurred_at_is_422_before_the_model(
    ext: httpx.AsyncClient, key: str, chat: FakeChat, instant: str, write: bool
) -> None:
    messages = [MESSAGES[1], {**MESSAGES[0], "occurred_at": instant}]
    r = await extract(ext, key, messages=messages, write=write)
    assert_error(r, 422, "validation_error", field="messages[1].occurred_at")
    assert chat.requests == []


async def test_duplicate_covers_every_active_fact_of_the_scope(
    ext: httpx.AsyncClient, key: str, chat: FakeChat
) -> None:
    """The model sees 100 facts of the scope; a restated fact beyond them is still one it holds."""
    for facts in (
        [{"content": "Alice plays chess."}],
        [{"content": f"Alice read book {i}."} for i in range(100)],
    ):
        body = {"subject_id": SUBJECT, "facts": facts}
        assert (await ext.post("/v1/facts", json=body, headers=bearer(key))).status_code == 201
    chat.then(
        answer(
            {"content": " Alice plays chess. ", "source_message": 2},
            {"content": "Alice plays go.", "source_message": 2},
        )
    )
    r = await extract(ext, key)
    assert r.status_code == 201, r.text
    assert "Alice plays chess." not in [k["content"] for k in chat.user_payload()["known_facts"]]
    assert [f["content"] for f in r.json()["facts"]] == ["Alice plays go."]
    assert [x["reason"] for x in r.json()["refused"]] == ["duplicate"]
    assert await counts(ext, key) == (102, 3)


async def test_restating_a_stale_fact_renews_it(ext: httpx.AsyncClient, key: str, chat: FakeChat) -> None:
    """A stale volatile fact is not served, so saying it again is no duplicate: the restatement is
    written and supersedes it, whether the model was shown it (marked stale) or not. It keeps
    the window of the fact it renews, not the server's default."""
    stale = {"volatility": "volatile", "stale_after_seconds": 1, "valid_from": "2020-01-01T00:00:00Z"}
    for facts in (
        [
            {"content": "Alice is in Lisbon.", **stale, "stale_after_seconds": 7200},
            {"content": "Alice is in Rome.", **stale},
        ],
        [{"content": f"Alice read book {i}.", "key": f"book_{i}"} for i in range(99)],
        [
            {"content": "Alice is in Oslo.", "volatility": "volatile"},
            {"content": "Alice is in Porto.", **stale, "stale_after_seconds": 3600},
        ],
    ):
        body = {"subject_id": SUBJECT, "facts": facts}
        assert (await ext.post("/v1/facts", json=body, headers=bearer(key))).status_code == 201
    listed = (await ext.get(f"/v1/facts?subject_id={SUBJECT}&limit=500", headers=bearer(key))).json()
    ids = {f["content"]: f["fact_id"] for f in listed["facts"]}
    chat.then(
        answer(
            {"content": "Alice is in Porto.", "source_message": 2, "volatility": "volatile"},
            {"content": "Alice is in Lisbon.", "source_message": 2, "volatility": "volatile"},
            {"content": "Alice is in Oslo.", "source_message": 2, "volatility": "volatile"},
            {"content": "alice is in  porto.", "source_message": 2, "volatility": "volatile"},
        )
    )
    r = await extract(ext, key)
    assert r.status_code == 201, r.text
    shown = {k["content"]: k["stale"] for k in chat.user_payload()["known_facts"]}
    # 99 keyed facts, then the newest unkeyed one: Porto is shown, marked stale; the rest are not.
    assert shown["Alice is in Porto."] is True and len(shown) == 100
    written = {f["content"]: f["supersedes"] for f in r.json()["facts"]}
    assert written == {
        "Alice is in Porto.": ids["Alice is in Porto."],
        "Alice is in Lisbon.": ids["Alice is in Lisbon."],
    }
    # Oslo is still served: a duplicate; so is Porto said again, by the earlier proposal.
    assert [x["reason"] for x in r.json()["refused"]] == ["duplicate", "duplicate"]
    for content, status in (("Alice is in Porto.", "superseded"), ("Alice is in Lisbon.", "superseded"),
                            ("Alice is in Rome.", "active")):  # fmt: skip
        fact = (await ext.get(f"/v1/facts/{ids[content]}", headers=bearer(key))).json()
        assert fact["status"] == status, content
    windows = {}
    for f in r.json()["facts"]:
        renewed = (await ext.get(f"/v1/facts/{f['fact_id']}", headers=bearer(key))).json()
        windows[f["content"]] = (renewed["volatility"], renewed["stale_after_seconds"])
    assert windows == {"Alice is in Porto.": ("volatile", 3600), "Alice is in Lisbon.": ("volatile", 7200)}


async def test_a_supersede_that_lost_a_race_names_the_proposals_message(
    settings: Settings, migrated: str, hash_embedder: Embedder, chat: FakeChat
) -> None:
    """The known fact the model replaces is retracted while it answers: the write is refused
    whole, and its 422 names the message the proposal came from (a field of the request), not
    `facts[0].supersedes` of the internal write, which the client never sent."""
    app_settings, project, key = await pooled_project(settings, chat, pool_max_size=4)
    hold = threading.Event()
    proposals = answer(
        {"content": "Alice likes tea.", "source_message": 0},
        {"content": "Alice works at Globex.", "key": "employer", "source_message": 2, "supersedes": 0},
    )
    chat.then(Step(answer=proposals.answer, hold=hold))
    try:
        async with pooled_client(app_settings, hash_embedder) as (client, _):
            acme = {
                "content": "Alice works at Acme.",
                "key": "employer",
                "valid_from": "2020-01-01T00:00:00Z",
            }
            body = {"project_id": project, "subject_id": SUBJECT, "facts": [acme]}
            written = await client.post("/v1/facts", json=body, headers=bearer(key))
            assert written.status_code == 201, written.text
            fact_id = written.json()["facts"][0]["fact_id"]
            extraction = asyncio.create_task(extract(client, key, project_id=project))
            assert await asyncio.to_thread(chat.arrived.acquire, True, 30), "the model was never asked"
            patched = await client.patch(
                f"/v1/facts/{fact_id}",
                params={"project_id": project},
                json={"status": "retracted"},
                headers=bearer(key),
            )
            assert patched.status_code == 200, patched.text
            hold.set()
            r = await extraction
            details = assert_error(r, 422, "validation_error", field="messages[2]")["details"]
            assert details["fact_id"] == fact_id
            s = (await stats(client, key, project)).json()
            assert (s["facts_total"], s["events_total"]) == (1, 0)
    finally:
        hold.set()


async def test_one_extraction_writes_at_most_max_batch_facts(
    ext: httpx.AsyncClient, key: str, chat: FakeChat
) -> None:
    """POST /v1/facts takes 1..MAX_BATCH facts; so does the write of one extraction."""
    chat.then(
        answer(*({"content": f"Alice owns book {i}.", "source_message": 0} for i in range(MAX_BATCH + 500)))
    )
    r = await extract(ext, key)
    assert r.status_code == 201, r.text
    out = r.json()
    assert len(out["facts"]) == MAX_BATCH
    assert out["facts"][-1]["content"] == f"Alice owns book {MAX_BATCH - 1}."
    assert {x["reason"] for x in out["refused"]} == {"batch_full"} and len(out["refused"]) == 500
    assert await counts(ext, key) == (MAX_BATCH, 3)


async def test_the_embedding_budget_charges_an_extraction_once(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str, chat: FakeChat
) -> None:
    """Events and facts (1,106 characters) against 1,000 a minute: a full budget lets them
    through, as it does a POST /v1/facts larger than the budget. Charged in two parts, the
    events' part passed and the facts' was refused, on every retry for ever."""
    chat.then(
        answer({"content": "y" * 600, "source_message": 0}), answer({"content": "z", "source_message": 0})
    )
    async with make_client(
        settings,
        conn,
        hash_embedder,
        extract_base_url=chat.url,
        extract_model="m",
        embed_chars_per_minute=1000,
    ) as c:
        messages = [{"role": "user", "content": "x" * 500}]
        r = await extract(c, key, messages=messages)
        assert r.status_code == 201, r.text
        # Overdrawn now: the next extraction is refused whole.
        assert_error(await extract(c, key, messages=messages), 429, "rate_limited")
        assert await counts(c, key) == (1, 1)


async def test_idempotency_key_replays_the_first_answer(
    ext: httpx.AsyncClient, key: str, chat: FakeChat
) -> None:
    chat.then(answer({"content": "Alice works at Globex.", "source_message": 0}))
    headers = {**bearer(key), "Idempotency-Key": "extract-1"}
    payload = {"subject_id": SUBJECT, "messages": MESSAGES}
    first = await ext.post("/v1/extract", json=payload, headers=headers)
    again = await ext.post("/v1/extract", json=payload, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert len(chat.requests) == 1
    assert await counts(ext, key) == (1, 3)


def test_settings_from_env() -> None:
    s = Settings.from_env(
        {
            "HAKI_EXTRACT_BASE_URL": "http://127.0.0.1:8080/v1",
            "HAKI_EXTRACT_MODEL": "qwen2.5-7b-instruct",
            "HAKI_EXTRACT_API_KEY": "sk-x",
            "HAKI_EXTRACT_TIMEOUT_SECONDS": "12.5",
        }
    )
    assert (s.extract_base_url, s.extract_model, s.extract_api_key, s.extract_timeout_seconds) == (
        "http://127.0.0.1:8080/v1",
        "qwen2.5-7b-instruct",
        "sk-x",
        12.5,
    )


async def test_async_sdk_extract(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str, chat: FakeChat
) -> None:
    app_settings = msgspec.structs.replace(settings, extract_base_url=chat.url, extract_model="fake-model")
    app = create_app(app_settings, pool=SingleConnectionPool(conn), embedder=hash_embedder)
    chat.then(answer({"content": "Alice works at Globex.", "key": "employer", "source_message": 0}))
    transport = asgi_transport(app)
    async with AsyncHaki("http://testserver", key, project_id="proj-a", transport=transport) as haki:
        result = await haki.extract(SUBJECT, [ExtractMessage(role="user", content="I joined Globex.")])
    assert result.written is True
    (fact,) = result.facts
    assert fact.key == "employer" and fact.source_event_id == result.events[0].event_id
    assert fact.fact_id is not None and result.refused == []


async def test_the_model_sees_only_the_keys_project(
    ext: httpx.AsyncClient, key: str, other_key: str, chat: FakeChat
) -> None:
    for k, content in ((key, "Alice works at Acme."), (other_key, "Alice works at Initech.")):
        body = {"subject_id": SUBJECT, "facts": [{"content": content, "key": "employer"}]}
        assert (await ext.post("/v1/facts", json=body, headers=bearer(k))).status_code == 201
    r = await extract(ext, other_key, write=False)
    assert r.status_code == 200, r.text
    assert [f["content"] for f in chat.user_payload()["known_facts"]] == ["Alice works at Initech."]


async def pooled_project(settings: Settings, chat: FakeChat, **pool: Any) -> tuple[Settings, str, str]:
    """Settings of an app on a real pool (`pool`: its size...) whose model is `chat`, and a fresh
    project with its key, committed: the app's connections see it."""
    app_settings = msgspec.structs.replace(
        settings,
        extract_base_url=chat.url,
        extract_model="fake-model",
        extract_api_key="sk-test",
        extract_timeout_seconds=30.0,
        rate_limit_per_minute=0,
        pool_min_size=0,
        **pool,
    )
    project = f"ext-{uuid.uuid4().hex[:12]}"
    return app_settings, project, await migrated_key(app_settings, project)


async def test_the_model_is_asked_without_a_connection(
    settings: Settings, migrated: str, hash_embedder: Embedder, chat: FakeChat
) -> None:
    """On a pool of one connection, while the model thinks, the scope is still read. Until the
    extraction gave its connection back for the model's answer, a pool of 10 was 10 slow
    extractions, and every other request of the deployment waited, then got a 503."""
    app_settings, project, key = await pooled_project(
        settings, chat, pool_max_size=1, pool_acquire_timeout_seconds=3.0
    )
    hold = threading.Event()
    chat.then(
        Step(
            answer=answer({"content": "Alice is vegetarian.", "key": "diet", "source_message": 2}).answer,
            hold=hold,
        )
    )
    try:
        async with pooled_client(app_settings, hash_embedder) as (client, _):
            extraction = asyncio.create_task(extract(client, key, project_id=project))
            assert await asyncio.to_thread(chat.arrived.acquire, True, 30), "the model was never asked"
            listed = await client.get("/v1/facts", params={"project_id": project}, headers=bearer(key))
            assert listed.status_code == 200, listed.text
            assert listed.json()["facts"] == []
            assert not extraction.done()
            hold.set()
            r = await extraction
            assert r.status_code == 201, r.text
            assert [f["content"] for f in r.json()["facts"]] == ["Alice is vegetarian."]
            s = (await stats(client, key, project)).json()
            assert (s["facts_total"], s["events_total"]) == (1, 3)
    finally:
        hold.set()


async def test_concurrent_extractions_write_a_fact_once(
    settings: Settings, migrated: str, hash_embedder: Embedder, chat: FakeChat
) -> None:
    """Two extractions of the same messages, both checked before either wrote: the second to
    write finds the first's fact (lock_extraction_scope) and refuses it as a duplicate, and still
    writes its other proposal. Before, both wrote it."""
    app_settings, project, key = await pooled_project(settings, chat, pool_max_size=4)
    hold = threading.Event()
    for other in ("Alice drinks tea.", "Alice drinks coffee."):
        both = answer(
            {"content": "Alice is vegetarian.", "source_message": 2}, {"content": other, "source_message": 2}
        )
        chat.then(Step(answer=both.answer, hold=hold))
    try:
        async with pooled_client(app_settings, hash_embedder) as (client, _):
            runs = [asyncio.create_task(extract(client, key, project_id=project)) for _ in range(2)]
            for _ in runs:
                assert await asyncio.to_thread(chat.arrived.acquire, True, 30), "the model was never asked"
            hold.set()
            answers = [(await run).json() for run in runs]
            listed = await client.get(
                "/v1/facts", params={"project_id": project, "subject_id": SUBJECT}, headers=bearer(key)
            )
    finally:
        hold.set()
    contents = sorted(f["content"] for f in listed.json()["facts"])
    assert contents == ["Alice drinks coffee.", "Alice drinks tea.", "Alice is vegetarian."]
    refused = [x for a in answers for x in a["refused"]]
    assert [(x["content"], x["reason"]) for x in refused] == [("Alice is vegetarian.", "duplicate")]
    assert sorted(len(a["facts"]) for a in answers) == [1, 2]


@pytest.mark.parametrize("write", [True, False])
async def test_a_fact_erased_while_the_model_answers_is_never_restated(
    settings: Settings, migrated: str, hash_embedder: Embedder, chat: FakeChat, write: bool
) -> None:
    """The model read a fact that an erasure took while it answered: its restatement would come
    back as a `duplicate` refusal holding the erased text (or as a new fact, merged with other
    words), after the erasure returned. The extraction answers a retryable 503 and writes nothing;
    the retry asks the model without the fact."""
    app_settings, project, key = await pooled_project(settings, chat, pool_max_size=4)
    erased = "Alice is allergic to peanuts."
    hold = threading.Event()
    chat.then(Step(answer=answer({"content": erased, "source_message": 2}).answer, hold=hold))
    try:
        async with pooled_client(app_settings, hash_embedder) as (client, _):
            body = {"project_id": project, "subject_id": SUBJECT, "facts": [{"content": erased}]}
            written = await client.post("/v1/facts", json=body, headers=bearer(key))
            assert written.status_code == 201, written.text
            fact_id = written.json()["facts"][0]["fact_id"]
            extraction = asyncio.create_task(extract(client, key, project_id=project, write=write))
            assert await asyncio.to_thread(chat.arrived.acquire, True, 30), "the model was never asked"
            gone = await client.delete(
                f"/v1/facts/{fact_id}", params={"project_id": project}, headers=bearer(key)
            )
            assert gone.status_code == 200, gone.text
            hold.set()
            r = await extraction
            assert erased not in r.text
            assert_error(r, 503, "unavailable")
            assert "erased" in r.json()["message"]
            s = (await stats(client, key, project)).json()
            assert (s["facts_total"], s["events_total"]) == (0, 0)
            retried = await extract(client, key, project_id=project, write=write)
            assert retried.status_code == (201 if write else 200), retried.text
            assert chat.user_payload()["known_facts"] == []
    finally:
        hold.set()
