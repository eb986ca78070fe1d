"""POST /v1/events, and facts that point at events through source_event_id."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.helpers import (
    assert_error,
    get_fact,
    list_all_facts,
    post_events,
    post_facts,
    write_events,
)


def _event(i: int = 0, **extra: Any) -> dict[str, Any]:
    return {"content": f"Alice called support ({i})", "occurred_at": "2024-03-01T09:30:00+01:00", **extra}


async def test_write_events_happy_path(client: httpx.AsyncClient, key: str) -> None:
    ids = await write_events(
        client, key, [_event(0), _event(1, metadata={"channel": "phone"}), _event(2)], subject_id="ev"
    )
    assert len(set(ids)) == 3
    for eid in ids:
        uuid.UUID(eid)
    # The events exist in this scope: facts of the scope may cite each of them.
    r = await post_facts(
        client,
        key,
        [{"content": f"fact from event {i}", "source_event_id": eid} for i, eid in enumerate(ids)],
        subject_id="ev",
    )
    assert r.status_code == 201, r.text
    for res, eid in zip(r.json()["facts"], ids, strict=True):
        assert (await get_fact(client, key, res["fact_id"]))["source_event_id"] == eid


async def test_event_batch_of_1000_is_accepted(client: httpx.AsyncClient, key: str) -> None:
    ids = await write_events(client, key, [_event(i) for i in range(1000)], subject_id="ev-bulk")
    assert len(set(ids)) == 1000


@pytest.mark.parametrize(
    ("events", "status", "field"),
    [
        ([], 400, "events"),
        ([_event(i) for i in range(1001)], 400, "events"),
        ([_event(0, occurred_at="2024-03-01T09:30:00")], 400, "events[0].occurred_at"),
        ([_event(0), {"content": "no date"}], 400, "events[1].occurred_at"),
        ([_event(0, content="")], 400, "events[0].content"),
        ([_event(0, content="x" * 8001)], 400, "events[0].content"),
        ([_event(0, content="a\x00b")], 400, "events[0].content"),
        ([_event(0, bogus=True)], 400, "events[0].bogus"),
        ([_event(0, metadata="text")], 400, "events[0].metadata"),
        ([_event(0, metadata={"k": "v\x00"})], 422, "events[0].metadata"),
        ([_event(0, occurred_at="0001-01-01T00:00:00+02:00")], 422, "events[0].occurred_at"),
        ([_event(0, occurred_at=[2024, 3, 1])], 400, "events[0].occurred_at"),
    ],
    ids=[
        "empty_batch",
        "batch_of_1001",
        "naive_datetime",
        "missing_occurred_at",
        "empty_content",
        "content_8001",
        "nul_content",
        "unknown_field",
        "metadata_not_object",
        "nul_in_metadata",
        "occurred_at_out_of_range",
        "occurred_at_wrong_type",
    ],
)
async def test_event_validation(
    client: httpx.AsyncClient, key: str, events: list[dict[str, Any]], status: int, field: str
) -> None:
    r = await post_events(client, key, events, subject_id="ev-bad")
    assert_error(r, status, "validation_error", field)


async def test_event_of_another_project_is_403(client: httpx.AsyncClient, key: str) -> None:
    r = await post_events(client, key, [_event()], project_id="proj-b")
    assert_error(r, 403, "forbidden")


async def test_source_event_of_another_subject_is_refused(client: httpx.AsyncClient, key: str) -> None:
    (eid,) = await write_events(client, key, [_event()], subject_id="bob")
    before = len(await list_all_facts(client, key))
    r = await post_facts(
        client,
        key,
        [{"content": "unrelated"}, {"content": "Alice called", "source_event_id": eid}],
        subject_id="alice",
    )
    body = assert_error(r, 422, "validation_error", "facts[1].source_event_id")
    assert body["details"]["event_id"] == eid
    assert len(await list_all_facts(client, key)) == before
    # The same event is a valid source within its own scope.
    r = await post_facts(client, key, [{"content": "Bob called", "source_event_id": eid}], subject_id="bob")
    assert r.status_code == 201, r.text


async def test_source_event_of_another_project_is_refused(
    client: httpx.AsyncClient, key: str, other_key: str
) -> None:
    r = await post_events(client, other_key, [_event()], subject_id="u1", project_id="proj-b")
    assert r.status_code == 201, r.text
    theirs = r.json()["events"][0]["event_id"]
    r = await post_facts(client, key, [{"content": "x", "source_event_id": theirs}], subject_id="u1")
    assert_error(r, 422, "validation_error", "facts[0].source_event_id")


async def test_unknown_source_event_is_refused(client: httpx.AsyncClient, key: str) -> None:
    r = await post_facts(
        client, key, [{"content": "x", "source_event_id": str(uuid.uuid4())}], subject_id="u1"
    )
    assert_error(r, 422, "validation_error", "facts[0].source_event_id")
