"""Hostile request bodies: deep nesting, wrong media types, broken JSON.

All are refused before the body is decoded and before the key is read, with a 4xx in the
contract's shape whose message says what is wrong.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import httpx
import msgspec
import pytest

from service.api.strict_body import json_depth
from service.constants import MAX_JSON_DEPTH
from tests.helpers import PROJECT, assert_error, bearer

JSON = {"Content-Type": "application/json"}
SOME_ID = str(uuid.uuid4())
# Every route that takes a JSON body.
BODY_ROUTES = [
    ("POST", "/v1/facts"),
    ("POST", "/v1/events"),
    ("POST", "/v1/context"),
    ("PATCH", f"/v1/facts/{SOME_ID}"),
    ("POST", f"/v1/conflicts/{SOME_ID}/resolve"),
    ("POST", "/v1/extract"),
]


def nested(depth: int) -> bytes:
    """About what the probe sent: 973 levels were 2 KB."""
    return b"[" * depth + b"]" * depth


def facts_with_metadata(depth: int) -> dict[str, Any]:
    """A valid batch whose metadata makes the body `depth` levels deep (body, facts, fact: 3)."""
    value: Any = "leaf"
    for _ in range(depth - 3):
        value = {"k": value}
    return {"project_id": PROJECT, "subject_id": "deep", "facts": [{"content": "deep", "metadata": value}]}


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize("with_key", [False, True])
async def test_deep_nesting_is_a_400_before_the_key(
    client: httpx.AsyncClient,
    key: str,
    method: str,
    path: str,
    with_key: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    headers = {**JSON, **(bearer(key) if with_key else {})}
    with caplog.at_level(logging.INFO):
        r = await client.request(method, path, content=nested(973), headers=headers)
    body = assert_error(r, 400, "validation_error")
    assert "nested 973 levels deep" in body["message"], body
    assert body["details"]["max_depth"] == MAX_JSON_DEPTH
    # One bounded log line, no traceback (a 31-line traceback before).
    records = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(records) == 1 and records[0].exc_info is None, records
    assert len(records[0].getMessage()) < 200 and "\n" not in records[0].getMessage()


async def test_depth_limit_is_exact_and_counts_only_structure(client: httpx.AsyncClient, key: str) -> None:
    r = await client.post("/v1/facts", json=facts_with_metadata(MAX_JSON_DEPTH), headers=bearer(key))
    assert r.status_code == 201, r.text
    r = await client.post("/v1/facts", json=facts_with_metadata(MAX_JSON_DEPTH + 1), headers=bearer(key))
    body = assert_error(r, 400, "validation_error")
    assert body["details"]["depth"] == MAX_JSON_DEPTH + 1
    # Brackets inside strings are text, not nesting: stored as written.
    text = "[" * 500 + '{"\\' + "]" * 3
    r = await client.post(
        "/v1/facts",
        json={"project_id": PROJECT, "subject_id": "deep", "facts": [{"content": text}]},
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text
    fact = (await client.get(f"/v1/facts/{r.json()['facts'][0]['fact_id']}", headers=bearer(key))).json()
    assert fact["content"] == text


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (b"{}", 1),
        (b'{"a": [1, {"b": []}], "c": "[[[["}', 4),
        (b'["\\\\", [["\\"]"]]]', 3),  # an escaped backslash, then an escaped quote in a string
        (b'{"a": "]]]]", "b": [[["[[[["]]]}', 4),
        (b'["", "", [""]]', 2),
        (b"[" * 5000, 5000),  # unterminated: still refused for its depth
        (nested(100_000), 100_000),
        (b"[" + b"[[]]," * 300_000 + b"1]", 3),  # more than one slice of 1 MiB
    ],
)
def test_json_depth(raw: bytes, depth: int) -> None:
    assert json_depth(raw) == depth
    if depth < 500 and raw.count(b"[") == raw.count(b"]"):
        msgspec.json.decode(raw)  # the examples are valid JSON


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "text/json"])
async def test_json_under_another_media_type_is_a_415(
    client: httpx.AsyncClient, key: str, content_type: str
) -> None:
    body = msgspec.json.encode({"project_id": PROJECT, "subject_id": "s", "facts": [{"content": "x"}]})
    r = await client.post("/v1/facts", content=body, headers={**bearer(key), "Content-Type": content_type})
    reply = assert_error(r, 415, "unsupported_media_type")
    assert content_type in reply["message"] and "application/json" in reply["message"], reply
    for accepted in ("application/json; charset=utf-8", "application/vnd.haki+json"):
        r = await client.post("/v1/facts", content=body, headers={**bearer(key), "Content-Type": accepted})
        assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"", "the request body is empty; expected a JSON object (WriteFactsRequest)"),
        (b"  \n", "the request body is empty; expected a JSON object"),
        (
            b'{"project_id": "proj-a", "subject_id": "s", "facts": [{"content": "\\ud800"}]}',
            "\\ud800 at byte 67 is a lone UTF-16 surrogate",
        ),
        (
            b'{"project_id": "proj-a", "facts": [{"content": "\\udc00\\ud83d\\ude00"}]}',
            "invalid utf-16 surrogate pair",
        ),
        (b'{"project_id": "proj-a", "subject_id": "s", "facts": [{"content": "x"}', "ends before its value"),
        (b'{"project_id": "proj-a",}', "trailing comma"),
    ],
)
async def test_broken_json_says_what_is_wrong(
    client: httpx.AsyncClient, key: str, raw: bytes, words: str
) -> None:
    r = await client.post("/v1/facts", content=raw, headers={**bearer(key), **JSON})
    body = assert_error(r, 400, "validation_error")
    assert words in body["message"], body
    assert "Input data was truncated" not in body["message"]
    if b"\\ud" in raw:
        assert "surrogate" in body["message"], body


async def test_a_surrogate_pair_is_fine(client: httpx.AsyncClient, key: str) -> None:
    raw = b'{"project_id": "proj-a", "subject_id": "s", "facts": [{"content": "smile \\ud83d\\ude00"}]}'
    r = await client.post("/v1/facts", content=raw, headers={**bearer(key), **JSON})
    assert r.status_code == 201, r.text
