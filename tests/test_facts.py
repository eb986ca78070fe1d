"""POST/GET/PATCH /v1/facts: the write side's contract (docs/spec/api.md, "Write side")."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from service.settings import Settings
from tests.helpers import PROJECT, assert_error, bearer, get_fact, list_all_facts, post_facts, ts, write_facts
from tests.helpers.app import make_client

# --- happy path --------------------------------------------------------------------------------


async def test_write_batch_returns_ids_in_input_order(client: httpx.AsyncClient, key: str) -> None:
    contents = [f"fact number {i}" for i in range(5)]
    results = await write_facts(client, key, [{"content": c} for c in contents], subject_id="order")
    assert [r["status"] for r in results] == ["active"] * 5
    assert all(r["conflict_set_id"] is None for r in results)
    ids = [r["fact_id"] for r in results]
    assert len(set(ids)) == 5
    for fid, content in zip(ids, contents, strict=True):
        uuid.UUID(fid)
        fact = await get_fact(client, key, fid)
        assert fact["content"] == content
        assert fact["status"] == "active"
        assert fact["project_id"] == PROJECT
        assert fact["subject_id"] == "order"
        assert fact["volatility"] == "stable"
        assert fact["stale_after_seconds"] is None
        assert fact["metadata"] == {}
        assert fact["recorded_from"] is not None
    listed = await list_all_facts(client, key, subject_id="order")
    assert [f["fact_id"] for f in listed] == ids


async def test_write_all_fields_round_trip(client: httpx.AsyncClient, key: str) -> None:
    body = {
        "content": "Alice lives in Lisbon",
        "key": "city",
        "valid_from": "2024-01-01T00:00:00+02:00",
        "valid_to": "2025-01-01T00:00:00Z",
        "metadata": {"source": "chat", "n": [1, 2, {"x": None}]},
    }
    (res,) = await write_facts(client, key, [body], subject_id="rt")
    fact = await get_fact(client, key, res["fact_id"])
    assert fact["key"] == "city"
    assert ts(fact["valid_from"]) == datetime(2023, 12, 31, 22, 0, tzinfo=UTC)
    assert ts(fact["valid_to"]) == datetime(2025, 1, 1, tzinfo=UTC)
    assert fact["metadata"] == body["metadata"]
    assert fact["supersedes"] is None
    assert fact["source_event_id"] is None
    assert fact["conflict_set_id"] is None


async def test_full_batch_of_1000_is_accepted(client: httpx.AsyncClient, key: str) -> None:
    results = await write_facts(
        client, key, [{"content": f"bulk {i}"} for i in range(1000)], subject_id="bulk"
    )
    assert len({r["fact_id"] for r in results}) == 1000
    assert len(await list_all_facts(client, key, subject_id="bulk")) == 1000


# --- atomic batches ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad_field", ["supersedes", "source_event_id"])
async def test_batch_with_one_bad_reference_writes_nothing(
    client: httpx.AsyncClient, key: str, bad_field: str
) -> None:
    (old,) = await write_facts(client, key, [{"content": "Alice works at Acme"}], subject_id="atomic")
    before = await list_all_facts(client, key)
    batch = [
        {"content": "Alice works at Globex", "supersedes": old["fact_id"]},
        {"content": "Alice likes tea"},
        {"content": "Alice has a cat", bad_field: str(uuid.uuid4())},
        {"content": "Alice has a dog"},
    ]
    r = await post_facts(client, key, batch, subject_id="atomic")
    assert_error(r, 422, "validation_error", f"facts[2].{bad_field}")
    after = await list_all_facts(client, key)
    assert len(after) == len(before)
    assert [f["fact_id"] for f in after] == [f["fact_id"] for f in before]
    # The supersede of facts[0] was rolled back with the rest of the batch.
    kept = await get_fact(client, key, old["fact_id"])
    assert kept["status"] == "active"
    assert kept["valid_to"] is None


# --- validation --------------------------------------------------------------------------------

_BASE = {"project_id": PROJECT, "subject_id": "val"}


def _facts(*items: dict[str, Any]) -> dict[str, Any]:
    return {**_BASE, "facts": list(items)}


VALIDATION_CASES: list[tuple[str, Any, int, str | None]] = [
    ("unknown_field", _facts({"content": "x", "bogus": 1}), 400, "facts[0].bogus"),
    ("unknown_top_field", {**_facts({"content": "x"}), "extra": True}, 400, "extra"),
    ("missing_content", _facts({"key": "k"}), 400, "facts[0].content"),
    ("missing_subject", {"project_id": PROJECT, "facts": [{"content": "x"}]}, 400, "subject_id"),
    ("missing_facts", dict(_BASE), 400, "facts"),
    ("empty_content", _facts({"content": ""}), 400, "facts[0].content"),
    ("content_8001_chars", _facts({"content": "x" * 8001}), 400, "facts[0].content"),
    ("batch_of_1001", _facts(*[{"content": "x"}] * 1001), 400, "facts"),
    ("empty_batch", _facts(), 400, "facts"),
    (
        "naive_valid_from",
        _facts({"content": "x", "valid_from": "2024-01-01T00:00:00"}),
        400,
        "facts[0].valid_from",
    ),
    ("naive_valid_to", _facts({"content": "x", "valid_to": "2024-01-01T00:00:00"}), 400, "facts[0].valid_to"),
    ("not_a_datetime", _facts({"content": "x", "valid_from": "yesterday"}), 400, "facts[0].valid_from"),
    (
        "valid_to_before_valid_from",
        _facts(
            {"content": "x"},
            {"content": "y", "valid_from": "2024-02-01T00:00:00Z", "valid_to": "2024-01-01T00:00:00Z"},
        ),
        422,
        "facts[1].valid_to",
    ),
    (
        "valid_to_equal_valid_from",
        _facts({"content": "x", "valid_from": "2024-01-01T00:00:00Z", "valid_to": "2024-01-01T00:00:00Z"}),
        422,
        "facts[0].valid_to",
    ),
    (
        "stale_after_on_stable_fact",
        _facts({"content": "x", "stale_after_seconds": 60}),
        422,
        "facts[0].stale_after_seconds",
    ),
    (
        "stale_after_zero",
        _facts({"content": "x", "volatility": "volatile", "stale_after_seconds": 0}),
        400,
        "facts[0].stale_after_seconds",
    ),
    ("nul_in_content", _facts({"content": "a\x00b"}), 400, "facts[0].content"),
    ("nul_in_key", _facts({"content": "x", "key": "a\x00"}), 400, "facts[0].key"),
    ("nul_in_subject", {**_facts({"content": "x"}), "subject_id": "u\x00"}, 400, "subject_id"),
    ("content_wrong_type", _facts({"content": 5}), 400, "facts[0].content"),
    ("facts_wrong_type", {**_BASE, "facts": "nope"}, 400, "facts"),
    ("project_wrong_type", {**_facts({"content": "x"}), "project_id": 7}, 400, "project_id"),
    ("metadata_wrong_type", _facts({"content": "x", "metadata": [1]}), 400, "facts[0].metadata"),
    ("volatility_unknown", _facts({"content": "x", "volatility": "sometimes"}), 400, "facts[0].volatility"),
    ("supersedes_not_uuid", _facts({"content": "x", "supersedes": "abc"}), 400, "facts[0].supersedes"),
    ("empty_subject", {**_facts({"content": "x"}), "subject_id": ""}, 400, "subject_id"),
    ("subject_201_chars", {**_facts({"content": "x"}), "subject_id": "s" * 201}, 400, "subject_id"),
    ("body_not_object", [], 400, None),
    (
        "nul_in_metadata_value",
        _facts({"content": "x", "metadata": {"a": "b\x00c"}}),
        422,
        "facts[0].metadata",
    ),
    ("nul_in_metadata_key", _facts({"content": "x", "metadata": {"a\x00": 1}}), 422, "facts[0].metadata"),
    (
        "valid_from_below_range",
        _facts({"content": "x", "valid_from": "0001-01-01T00:00:00+01:00"}),
        422,
        "facts[0].valid_from",
    ),
    (
        "valid_to_above_range",
        _facts({"content": "x", "valid_to": "9999-12-31T23:59:59-05:00"}),
        422,
        "facts[0].valid_to",
    ),
]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [pytest.param(b, s, f, id=name) for name, b, s, f in VALIDATION_CASES],
)
async def test_write_validation_errors_name_the_field(
    client: httpx.AsyncClient, key: str, body: Any, status: int, field: str | None
) -> None:
    before = len(await list_all_facts(client, key))
    r = await client.post("/v1/facts", json=body, headers=bearer(key))
    assert_error(r, status, "validation_error", field)
    assert len(await list_all_facts(client, key)) == before


@pytest.mark.parametrize(
    "raw",
    [b"{bad json", b'{"project_id": "proj-a",', b"", b"\xff\xfe", b"null", b'"just a string"'],
    ids=["malformed", "truncated", "empty", "not_utf8", "null", "string"],
)
async def test_unparseable_bodies_are_400(client: httpx.AsyncClient, key: str, raw: bytes) -> None:
    r = await client.post(
        "/v1/facts", content=raw, headers={**bearer(key), "content-type": "application/json"}
    )
    assert_error(r, 400, "validation_error")


# --- supersede ---------------------------------------------------------------------------------


async def test_supersede_with_valid_from_closes_the_old_fact_then(
    client: httpx.AsyncClient, key: str
) -> None:
    (old,) = await write_facts(
        client,
        key,
        [{"content": "Bob lives in Paris", "valid_from": "2020-01-01T00:00:00Z"}],
        subject_id="sup",
    )
    (new,) = await write_facts(
        client,
        key,
        [
            {
                "content": "Bob lives in Rome",
                "valid_from": "2024-05-01T12:00:00+02:00",
                "supersedes": old["fact_id"],
            }
        ],
        subject_id="sup",
    )
    assert new["status"] == "active"
    assert new["conflict_set_id"] is None
    old_fact = await get_fact(client, key, old["fact_id"])
    new_fact = await get_fact(client, key, new["fact_id"])
    assert old_fact["status"] == "superseded"
    assert ts(old_fact["valid_to"]) == ts(new_fact["valid_from"]) == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert new_fact["supersedes"] == old["fact_id"]
    assert new_fact["status"] == "active"


async def test_supersede_without_valid_from_closes_the_old_fact_now(
    client: httpx.AsyncClient, key: str
) -> None:
    (old,) = await write_facts(client, key, [{"content": "Bob drives a Fiat"}], subject_id="sup2")
    (new,) = await write_facts(
        client, key, [{"content": "Bob drives a Volvo", "supersedes": old["fact_id"]}], subject_id="sup2"
    )
    old_fact = await get_fact(client, key, old["fact_id"])
    new_fact = await get_fact(client, key, new["fact_id"])
    assert old_fact["status"] == "superseded"
    valid_to = ts(old_fact["valid_to"])
    assert valid_to is not None
    # "now" is the transaction time of the write, which is also the new fact's recorded_from.
    assert valid_to == ts(new_fact["recorded_from"])
    assert abs(datetime.now(UTC) - valid_to) < timedelta(minutes=5)


async def test_supersede_keeps_an_earlier_end(client: httpx.AsyncClient, key: str) -> None:
    """A fact that had already ended is not made true until its successor starts."""
    (old,) = await write_facts(
        client,
        key,
        [
            {
                "content": "Bob lived in Lyon",
                "valid_from": "2020-01-01T00:00:00Z",
                "valid_to": "2021-01-01T00:00:00Z",
            }
        ],
        subject_id="sup4",
    )
    body = {
        "content": "Bob lives in Nice",
        "valid_from": "2023-01-01T00:00:00Z",
        "supersedes": old["fact_id"],
    }
    await write_facts(client, key, [body], subject_id="sup4")
    old_fact = await get_fact(client, key, old["fact_id"])
    assert old_fact["status"] == "superseded"
    assert ts(old_fact["valid_to"]) == datetime(2021, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "case", ["unknown", "other_subject", "already_superseded", "retracted", "starts_later"]
)
async def test_supersede_must_name_an_active_earlier_fact_of_the_scope(
    client: httpx.AsyncClient, key: str, case: str
) -> None:
    target: str
    if case == "unknown":
        target = str(uuid.uuid4())
    elif case == "other_subject":
        (f,) = await write_facts(client, key, [{"content": "x"}], subject_id="someone-else")
        target = f["fact_id"]
    elif case == "already_superseded":
        (f,) = await write_facts(client, key, [{"content": "v1"}], subject_id="sup3")
        await write_facts(client, key, [{"content": "v2", "supersedes": f["fact_id"]}], subject_id="sup3")
        target = f["fact_id"]
    elif case == "retracted":
        (f,) = await write_facts(client, key, [{"content": "v1"}], subject_id="sup3")
        r = await client.patch(f"/v1/facts/{f['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
        assert r.status_code == 200, r.text
        target = f["fact_id"]
    else:
        (f,) = await write_facts(
            client, key, [{"content": "v1", "valid_from": "2024-06-01T00:00:00Z"}], subject_id="sup3"
        )
        target = f["fact_id"]
    r = await post_facts(
        client,
        key,
        [{"content": "replacement", "supersedes": target, "valid_from": "2024-01-01T00:00:00Z"}],
        subject_id="sup3",
    )
    assert_error(r, 422, "validation_error", "facts[0].supersedes")


async def test_two_facts_of_one_batch_cannot_supersede_one_fact(client: httpx.AsyncClient, key: str) -> None:
    (old,) = await write_facts(
        client, key, [{"content": "Dog is brown.", "key": "dog_color"}], subject_id="sup4"
    )
    r = await post_facts(
        client,
        key,
        [
            {"content": "Dog is white.", "key": "dog_color", "supersedes": old["fact_id"]},
            {"content": "Dog is grey.", "key": "dog_color", "supersedes": old["fact_id"]},
        ],
        subject_id="sup4",
    )
    body = assert_error(r, 422, "validation_error", "facts[1].supersedes")
    assert "facts[0]" in body["message"], body
    # The failed batch wrote nothing: the old fact is still the only one, and active.
    assert [(f["fact_id"], f["status"]) for f in await list_all_facts(client, key, subject_id="sup4")] == [
        (old["fact_id"], "active")
    ]


async def test_supersede_of_another_projects_fact_is_refused(
    client: httpx.AsyncClient, key: str, other_key: str
) -> None:
    (theirs,) = (
        await post_facts(client, other_key, [{"content": "B's fact"}], subject_id="u1", project_id="proj-b")
    ).json()["facts"]
    r = await post_facts(client, key, [{"content": "mine", "supersedes": theirs["fact_id"]}], subject_id="u1")
    assert_error(r, 422, "validation_error", "facts[0].supersedes")
    r = await client.get(f"/v1/facts/{theirs['fact_id']}", headers=bearer(other_key))
    assert r.json()["status"] == "active"


# --- PATCH -------------------------------------------------------------------------------------


async def test_patch_retract(client: httpx.AsyncClient, key: str) -> None:
    (f,) = await write_facts(client, key, [{"content": "to retract"}], subject_id="patch")
    r = await client.patch(f"/v1/facts/{f['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "retracted"
    assert r.json()["fact_id"] == f["fact_id"]
    fact = await get_fact(client, key, f["fact_id"])
    assert fact["status"] == "retracted"
    assert fact["content"] == "to retract"  # nothing is deleted
    assert [
        x["fact_id"] for x in await list_all_facts(client, key, subject_id="patch", status="retracted")
    ] == [f["fact_id"]]


async def test_patch_changes_only_an_active_fact(client: httpx.AsyncClient, key: str) -> None:
    """A superseded fact keeps its status and its end (409, naming its status); a retracted one
    may be retracted again, which changes nothing."""
    (old, gone) = await write_facts(
        client, key, [{"content": "Ann uses vim"}, {"content": "Ann uses tabs"}], "p2"
    )
    await write_facts(client, key, [{"content": "Ann uses emacs", "supersedes": old["fact_id"]}], "p2")
    before = await get_fact(client, key, old["fact_id"])
    for body in ({"status": "retracted"}, {"valid_to": "2099-01-01T00:00:00Z"}):
        r = await client.patch(f"/v1/facts/{old['fact_id']}", json=body, headers=bearer(key))
        problem = assert_error(r, 409, "conflict")
        assert problem["details"] == {
            "fact_id": old["fact_id"],
            "status": "superseded",
            "reason": "fact_not_active",
        }
    assert await get_fact(client, key, old["fact_id"]) == before
    retract = {"status": "retracted"}
    first = await client.patch(f"/v1/facts/{gone['fact_id']}", json=retract, headers=bearer(key))
    again = await client.patch(f"/v1/facts/{gone['fact_id']}", json=retract, headers=bearer(key))
    assert first.status_code == again.status_code == 200 and again.json() == first.json()
    r = await client.patch(
        f"/v1/facts/{gone['fact_id']}", json={"valid_to": "2099-01-01T00:00:00Z"}, headers=bearer(key)
    )
    assert assert_error(r, 409, "conflict")["details"]["status"] == "retracted"


async def test_patch_valid_to(client: httpx.AsyncClient, key: str) -> None:
    (f,) = await write_facts(
        client, key, [{"content": "bounded", "valid_from": "2024-01-01T00:00:00Z"}], subject_id="patch"
    )
    r = await client.patch(
        f"/v1/facts/{f['fact_id']}", json={"valid_to": "2024-03-01T00:00:00+01:00"}, headers=bearer(key)
    )
    assert r.status_code == 200, r.text
    fact = await get_fact(client, key, f["fact_id"])
    assert ts(fact["valid_to"]) == datetime(2024, 2, 29, 23, tzinfo=UTC)
    assert fact["status"] == "active"


async def test_patch_retract_and_valid_to_together(client: httpx.AsyncClient, key: str) -> None:
    (f,) = await write_facts(client, key, [{"content": "both"}], subject_id="patch")
    r = await client.patch(
        f"/v1/facts/{f['fact_id']}",
        json={"status": "retracted", "valid_to": "2030-01-01T00:00:00Z"},
        headers=bearer(key),
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "retracted"
    assert ts(r.json()["valid_to"]) == datetime(2030, 1, 1, tzinfo=UTC)


async def test_patch_empty_body_is_422(client: httpx.AsyncClient, key: str) -> None:
    (f,) = await write_facts(client, key, [{"content": "untouched"}], subject_id="patch")
    r = await client.patch(f"/v1/facts/{f['fact_id']}", json={}, headers=bearer(key))
    body = assert_error(r, 422, "validation_error")
    assert body["details"]["field"] in ("status", "valid_to")
    fact = await get_fact(client, key, f["fact_id"])
    assert fact["status"] == "active" and fact["valid_to"] is None


async def test_patch_valid_to_before_valid_from_is_422(client: httpx.AsyncClient, key: str) -> None:
    (f,) = await write_facts(
        client, key, [{"content": "dated", "valid_from": "2024-06-01T00:00:00Z"}], subject_id="patch"
    )
    for bad in ("2024-01-01T00:00:00Z", "2024-06-01T00:00:00Z"):
        r = await client.patch(f"/v1/facts/{f['fact_id']}", json={"valid_to": bad}, headers=bearer(key))
        assert_error(r, 422, "validation_error", "valid_to")
    # The failed PATCH left the fact (and the connection) usable and unchanged.
    fact = await get_fact(client, key, f["fact_id"])
    assert fact["valid_to"] is None and fact["status"] == "active"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "active"}, "status"),
        ({"status": "deleted"}, "status"),
        ({"valid_to": "2024-01-01T00:00:00"}, "valid_to"),
        ({"valid_to": "0001-01-01T00:00:00+05:00"}, "valid_to"),
        ({"content": "rewrite"}, "content"),
    ],
    ids=["status_active", "status_unknown", "naive_valid_to", "valid_to_out_of_range", "unknown_field"],
)
async def test_patch_bad_bodies(
    client: httpx.AsyncClient, key: str, body: dict[str, Any], field: str
) -> None:
    (f,) = await write_facts(client, key, [{"content": "patch target"}], subject_id="patch")
    r = await client.patch(f"/v1/facts/{f['fact_id']}", json=body, headers=bearer(key))
    assert r.status_code in (400, 422), r.text
    assert_error(r, r.status_code, "validation_error", field)
    fact = await get_fact(client, key, f["fact_id"])
    assert fact["status"] == "active" and fact["valid_to"] is None


async def test_patch_and_get_unknown_id_are_404(client: httpx.AsyncClient, key: str) -> None:
    missing = uuid.uuid4()
    r = await client.patch(f"/v1/facts/{missing}", json={"status": "retracted"}, headers=bearer(key))
    assert_error(r, 404, "not_found")
    r = await client.get(f"/v1/facts/{missing}", headers=bearer(key))
    assert_error(r, 404, "not_found")
    r = await client.get("/v1/facts/not-a-uuid", headers=bearer(key))
    assert r.status_code in (400, 404), r.text
    assert_error(r, r.status_code, "validation_error" if r.status_code == 400 else "not_found")


# --- volatile facts ----------------------------------------------------------------------------


async def test_volatile_fact_stores_stale_after_seconds(client: httpx.AsyncClient, key: str) -> None:
    (f,) = await write_facts(
        client,
        key,
        [{"content": "Alice is in a meeting", "volatility": "volatile", "stale_after_seconds": 3600}],
        subject_id="vol",
    )
    fact = await get_fact(client, key, f["fact_id"])
    assert fact["volatility"] == "volatile"
    assert fact["stale_after_seconds"] == 3600


async def test_volatile_default_comes_from_settings(
    client: httpx.AsyncClient, key: str, settings: Settings, conn: asyncpg.Connection, hash_embedder: Any
) -> None:
    (f,) = await write_facts(
        client, key, [{"content": "Alice is travelling", "volatility": "volatile"}], subject_id="vol"
    )
    fact = await get_fact(client, key, f["fact_id"])
    assert fact["stale_after_seconds"] == settings.volatile_stale_after_seconds
    # A different configured default is the one used.
    async with make_client(settings, conn, hash_embedder, volatile_stale_after_seconds=4321) as other:
        (g,) = await write_facts(
            other, key, [{"content": "Alice is at home", "volatility": "volatile"}], "vol"
        )
        assert (await get_fact(other, key, g["fact_id"]))["stale_after_seconds"] == 4321


# --- listing and keyset pagination -------------------------------------------------------------


async def test_keyset_pagination(client: httpx.AsyncClient, key: str) -> None:
    ids = [
        r["fact_id"]
        for r in await write_facts(client, key, [{"content": f"p{i}"} for i in range(4)], "pages")
    ]
    await write_facts(client, key, [{"content": "noise"}], subject_id="not-pages")
    ids += [
        r["fact_id"]
        for r in await write_facts(client, key, [{"content": f"p{i}"} for i in range(4, 7)], "pages")
    ]

    seen: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(10):
        params: dict[str, Any] = {"project_id": PROJECT, "subject_id": "pages", "limit": 3}
        if cursor is not None:
            params["cursor"] = cursor
        r = await client.get("/v1/facts", params=params, headers=bearer(key))
        assert r.status_code == 200, r.text
        page = r.json()
        assert set(page) >= {"facts", "next_cursor"}
        sizes.append(len(page["facts"]))
        seen.extend(f["fact_id"] for f in page["facts"])
        assert all(f["subject_id"] == "pages" for f in page["facts"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sizes == [3, 3, 1]
    assert seen == ids  # creation order, no duplicates, nothing missing


async def test_exact_multiple_of_limit_ends_with_null_cursor(client: httpx.AsyncClient, key: str) -> None:
    await write_facts(client, key, [{"content": f"e{i}"} for i in range(6)], "exact")
    r = await client.get(
        "/v1/facts", params={"project_id": PROJECT, "subject_id": "exact", "limit": 3}, headers=bearer(key)
    )
    r2 = await client.get(
        "/v1/facts",
        params={"project_id": PROJECT, "subject_id": "exact", "limit": 3, "cursor": r.json()["next_cursor"]},
        headers=bearer(key),
    )
    assert len(r2.json()["facts"]) == 3
    if r2.json()["next_cursor"] is not None:
        r3 = await client.get(
            "/v1/facts",
            params={
                "project_id": PROJECT,
                "subject_id": "exact",
                "limit": 3,
                "cursor": r2.json()["next_cursor"],
            },
            headers=bearer(key),
        )
        assert r3.json() == {"facts": [], "next_cursor": None}


async def test_list_filters_by_subject_and_status(
    client: httpx.AsyncClient, key: str, other_key: str
) -> None:
    a = await write_facts(client, key, [{"content": f"a{i}"} for i in range(3)], "filter-a")
    b = await write_facts(client, key, [{"content": f"b{i}"} for i in range(2)], "filter-b")
    await post_facts(client, other_key, [{"content": "other project"}], "filter-a", project_id="proj-b")
    r = await client.patch(f"/v1/facts/{a[1]['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200

    only_a = await list_all_facts(client, key, subject_id="filter-a")
    assert [f["fact_id"] for f in only_a] == [x["fact_id"] for x in a]
    assert all(f["project_id"] == PROJECT for f in only_a)
    active_a = await list_all_facts(client, key, subject_id="filter-a", status="active")
    assert [f["fact_id"] for f in active_a] == [a[0]["fact_id"], a[2]["fact_id"]]
    retracted = await list_all_facts(client, key, status="retracted")
    assert [f["fact_id"] for f in retracted] == [a[1]["fact_id"]]
    everything = {f["fact_id"] for f in await list_all_facts(client, key)}
    assert {x["fact_id"] for x in a + b} <= everything
    assert all(f["project_id"] == PROJECT for f in await list_all_facts(client, key))
    assert await list_all_facts(client, key, subject_id="filter-a", status="superseded") == []


@pytest.mark.parametrize(
    ("params", "status", "field"),
    [
        ({"cursor": "not-a-cursor!"}, 422, "cursor"),
        ({"cursor": "AAAA"}, 422, "cursor"),
        ({"limit": 0}, 400, "limit"),
        ({"limit": 501}, 400, "limit"),
        ({"limit": -1}, 400, "limit"),
        ({"limit": "ten"}, 400, "limit"),
        ({"status": "deleted"}, 400, "status"),
        ({"subject_id": "s" * 201}, 400, "subject_id"),
        ({"subject_id": "a\x00b"}, 400, "subject_id"),
    ],
    ids=[
        "bad_cursor",
        "short_cursor",
        "limit0",
        "limit501",
        "limit_neg",
        "limit_str",
        "status",
        "subject_long",
        "subject_nul",
    ],
)
async def test_list_bad_params(
    client: httpx.AsyncClient, key: str, params: dict[str, Any], status: int, field: str
) -> None:
    r = await client.get("/v1/facts", params={"project_id": PROJECT, **params}, headers=bearer(key))
    assert_error(r, status, "validation_error", field)


async def test_list_without_project_id_is_the_keys_project(client: httpx.AsyncClient, key: str) -> None:
    # The key already names the project; an empty project_id is still refused.
    r = await client.get("/v1/facts", headers=bearer(key))
    assert r.status_code == 200, r.text
    r = await client.get("/v1/facts", params={"project_id": ""}, headers=bearer(key))
    assert_error(r, 400, "validation_error", "project_id")


async def test_limits_accept_boundaries(client: httpx.AsyncClient, key: str) -> None:
    await write_facts(client, key, [{"content": "one"}, {"content": "two"}], "bounds")
    for limit, n in ((1, 1), (500, 2)):
        r = await client.get(
            "/v1/facts",
            params={"project_id": PROJECT, "subject_id": "bounds", "limit": limit},
            headers=bearer(key),
        )
        assert r.status_code == 200, r.text
        assert len(r.json()["facts"]) == n
    assert json.loads(r.text)["next_cursor"] is None
