"""Webhooks from the transactional outbox (docs/webhooks.md), against a real receiver on
127.0.0.1: each committed change delivers exactly its events, a rolled-back one nothing; retries
keep the event id; dead letters show in the API and /metrics; a subject's events go in order;
erasure takes the pending events that carry its content; URLs on other addresses are refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest
from haki_client.webhooks import verify_signature

from service.errors import UrlRefused
from service.ids import uuid7
from service.repository import webhooks as repo
from service.repository.webhooks import Attempt, Claimed
from service.settings import Settings
from service.webhooks import signing, urls, worker
from tests.helpers import PROJECT, assert_error, bearer, metric, post_facts, write_facts
from tests.helpers.app import SingleConnectionPool, make_client
from tests.helpers.chromium import ui_login
from tests.helpers.receiver import Receiver, receiving
from tests.helpers.serving import sessions, waits_or_ends
from tests.helpers.sql import load_test_queries

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "sdk" / "webhook_vectors.json").read_text())
ALL_KINDS = [
    "conflict.opened",
    "conflict.resolved",
    "fact.superseded",
    "fact.retracted",
    "subject.erased",
    "extraction.completed",
]


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    """127.0.0.1 allowed, retries without waiting, few attempts."""
    return msgspec.structs.replace(
        settings,
        webhook_allowed_hosts="127.0.0.1",
        webhook_retry_base_seconds=0.000001,
        webhook_max_attempts=5,
        webhook_timeout_seconds=5.0,
    )


@pytest.fixture
async def wclient(
    wsettings: Settings, conn: asyncpg.Connection, hash_embedder: Any
) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(wsettings, conn, hash_embedder, webhook_allowed_hosts="127.0.0.1") as c:
        yield c


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving(Receiver()) as r:
        yield r


async def subscribe(
    client: httpx.AsyncClient, key: str, url: str, events: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    r = await client.post(
        "/v1/webhooks", json={"url": url, "events": events or ALL_KINDS, **extra}, headers=bearer(key)
    )
    assert r.status_code == 201, r.text
    made: dict[str, Any] = r.json()
    return made


async def deliver(conn: asyncpg.Connection, settings: Settings, rounds: int = 1) -> worker.Round:
    """Rounds of the delivery worker on the test's connection (its transactions are savepoints)."""
    total = worker.Round()
    async with worker.http_client(settings) as http:
        for _ in range(rounds):
            done = await worker.deliver_once(SingleConnectionPool(conn), settings, http)
            total.delivered += done.delivered
            total.failed += done.failed
            total.dead += done.dead
            total.fanned_out += done.fanned_out
    return total


def kinds(receiver: Receiver) -> list[str]:
    return [d.event["type"] for d in receiver.deliveries]


# --- signatures -----------------------------------------------------------------------------------


def test_the_server_signs_as_the_shared_vectors_say() -> None:
    s = VECTORS["signing"]
    assert signing.signature(VECTORS["secret"], s["timestamp"], s["body"].encode()) == s["signature"]


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_the_python_sdk_verifies_each_shared_vector(case: dict[str, Any]) -> None:
    got = verify_signature(
        case["body"].encode(),
        case["header"],
        VECTORS["secret"],
        now=case["now"],
        tolerance_seconds=VECTORS["tolerance_seconds"],
    )
    assert got is case["valid"]


# --- URLs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.2", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("172.16.5.5", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("::ffff:127.0.0.1", "loopback"),
        # 6to4 and Teredo carry an IPv4 address that a relay forwards to: 127.0.0.1, the cloud
        # metadata address, 10.0.0.1; a public one stays public.
        ("2002:7f00:1::", "loopback"),
        ("2002:a9fe:a9fe::", "link-local"),
        ("2002:a00:1::", "private"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),
        ("2002:5db8:d70e::", None),
        ("100.64.0.1", "not public"),
        ("0.0.0.0", "private"),
        ("224.0.0.1", "not public"),
        ("93.184.215.14", None),
    ],
)
def test_addresses_outside_the_public_internet_are_refused(address: str, reason: str | None) -> None:
    assert urls.refused_reason(address) == reason


@pytest.mark.parametrize(
    "url",
    ["ftp://127.0.0.1/x", "file:///etc/passwd", "gopher://127.0.0.1", "http://", "http://u:p@127.0.0.1/"],
)
async def test_only_http_urls_without_credentials(url: str) -> None:
    with pytest.raises(UrlRefused):
        await urls.check(url, frozenset({"127.0.0.1"}))


async def test_only_the_listed_host_is_allowed() -> None:
    allowed = urls.allowed_hosts(" 127.0.0.1 , Example.internal")
    assert allowed == {"127.0.0.1", "example.internal"}
    target = await urls.check("http://127.0.0.1:9/hook", allowed)
    assert (target.address, target.port) == ("127.0.0.1", 9)
    for refused in ("http://127.0.0.2:9/hook", "http://localhost:9/hook", "http://[::1]:9/"):
        with pytest.raises(UrlRefused, match="HAKI_WEBHOOK_ALLOWED_HOSTS"):
            await urls.check(refused, allowed)


async def test_a_refused_url_is_a_422_and_nothing_is_sent(
    wclient: httpx.AsyncClient, key: str, receiver: Receiver
) -> None:
    url = f"http://127.0.0.2:{receiver.port}/hook"
    r = await wclient.post("/v1/webhooks", json={"url": url, "events": ALL_KINDS}, headers=bearer(key))
    body = assert_error(r, 422, "url_refused", field="url")
    assert body["details"]["reason"] == "loopback" and body["details"]["address"] == "127.0.0.2"
    r = await wclient.get("/v1/webhooks", headers=bearer(key))
    assert r.json() == {"webhooks": []}
    assert receiver.deliveries == []


async def test_bad_bodies_name_their_field(wclient: httpx.AsyncClient, key: str, receiver: Receiver) -> None:
    for body, field in (
        ({"url": receiver.url, "events": []}, "events"),
        ({"url": receiver.url, "events": ["fact.created"]}, "events[0]"),
        ({"url": receiver.url, "events": ALL_KINDS, "secret": "mine"}, "secret"),
        ({"events": ALL_KINDS}, "url"),
    ):
        r = await wclient.post("/v1/webhooks", json=body, headers=bearer(key))
        assert_error(r, 400, "validation_error", field=field)


@pytest.mark.parametrize(
    "tail", ["/\x00", "/?a=\x00", "/a\r\nb", "/a\tb", "/\x1b", "/\x7f", "/\x85", "/nl\n", "/crlf\r\n"]
)
async def test_a_url_with_a_control_character_is_refused(
    wclient: httpx.AsyncClient, key: str, receiver: Receiver, tail: str
) -> None:
    """A 400 naming `url`, as for any string field, never a 500 (PostgreSQL text holds no NUL)
    nor a URL that urlsplit silently shortens (a tab, CR or LF); one stored before the rule is
    refused at delivery, nothing sent."""
    url = f"http://127.0.0.1:{receiver.port}{tail}"
    r = await wclient.post("/v1/webhooks", json={"url": url, "events": ALL_KINDS}, headers=bearer(key))
    assert_error(r, 400, "validation_error", field="url")
    assert (await wclient.get("/v1/webhooks", headers=bearer(key))).json() == {"webhooks": []}
    with pytest.raises(UrlRefused, match="control characters"):
        await urls.check(url, frozenset({"127.0.0.1"}))


def test_an_internationalised_host_is_sent_in_its_ascii_form() -> None:
    """Host and the TLS server name of bücher.example are its IDNA form: an HTTP header is ASCII."""
    target = urls.Target(
        url="https://bücher.example:8443/h",
        scheme="https",
        host="bücher.example",
        port=8443,
        address="192.0.2.7",
    )
    url, headers, extensions = worker.pinned(target)
    assert (url, headers, extensions) == (
        "https://192.0.2.7:8443/h",
        {"Host": "xn--bcher-kva.example:8443"},
        {"sni_hostname": "xn--bcher-kva.example"},
    )


@pytest.mark.parametrize(
    ("url", "host", "address"),
    [
        ("http://[::1]:18952/v6", "[::1]:18952", "::1"),
        ("http://[::1]/v6", "[::1]", "::1"),
        ("http://127.0.0.1:18952/v4", "127.0.0.1:18952", "127.0.0.1"),
    ],
)
async def test_the_host_header_names_the_urls_host(
    wsettings: Settings, url: str, host: str, address: str
) -> None:
    """An IPv6 literal keeps its brackets in Host (RFC 9110: uri-host [":" port]), and the
    request goes to the address checked."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(204)

    claimed = Claimed(
        webhook_id=uuid7(),
        event_id=uuid7(),
        subject_id="s",
        attempts=1,
        url=url,
        secret="whsec_test",
        include_content=False,
        kind="fact.retracted",
        data={},
        content=None,
        created_at=datetime.now(UTC),
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        done = await worker.attempt(http, wsettings, frozenset({"::1", "127.0.0.1"}), PROJECT, claimed)
    assert done.delivered, done.error
    (request,) = sent
    assert request.headers["host"] == host
    assert request.url.host == address


# --- subscriptions ----------------------------------------------------------------------------------


async def test_subscribe_list_delete(
    wclient: httpx.AsyncClient, key: str, other_key: str, receiver: Receiver
) -> None:
    made = await subscribe(wclient, key, receiver.url, ["fact.retracted", "fact.retracted"])
    assert made["secret"].startswith("whsec_") and len(made["secret"]) > 40
    assert made["events"] == ["fact.retracted"] and made["include_content"] is False
    assert made["project_id"] == PROJECT
    r = await wclient.get("/v1/webhooks", headers=bearer(key))
    (listed,) = r.json()["webhooks"]
    assert "secret" not in listed
    assert listed["webhook_id"] == made["webhook_id"]
    assert (listed["pending"], listed["delivered"], listed["dead"]) == (0, 0, 0)
    # Another project sees nothing of it and cannot delete it.
    assert (await wclient.get("/v1/webhooks", headers=bearer(other_key))).json() == {"webhooks": []}
    path = f"/v1/webhooks/{made['webhook_id']}"
    assert_error(await wclient.delete(path, headers=bearer(other_key)), 404, "not_found")
    assert_error(await wclient.get(f"{path}/deliveries", headers=bearer(other_key)), 404, "not_found")
    r = await wclient.delete(path, headers=bearer(key))
    assert r.status_code == 200 and r.json() == {"webhook_id": made["webhook_id"], "deleted": True}
    assert_error(await wclient.delete(path, headers=bearer(key)), 404, "not_found")


# --- events --------------------------------------------------------------------------------------------


async def test_each_committed_change_delivers_exactly_its_events(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    hook = await subscribe(wclient, key, receiver.url)
    (a,) = await write_facts(wclient, key, [{"content": "Alice works at Acme", "key": "employer"}], "s1")
    (b,) = await write_facts(wclient, key, [{"content": "Alice works at Globex", "key": "employer"}], "s1")
    set_id = b["conflict_set_id"]
    r = await wclient.post(
        f"/v1/conflicts/{set_id}/resolve", json={"keep": [b["fact_id"]]}, headers=bearer(key)
    )
    assert r.status_code == 200, r.text
    (c,) = await write_facts(wclient, key, [{"content": "Alice lives in Lyon", "key": "city"}], "s1")
    (d,) = await write_facts(
        wclient, key, [{"content": "Alice lives in Paris", "supersedes": c["fact_id"]}], "s1"
    )
    r = await wclient.patch(f"/v1/facts/{d['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text
    # A batch refused after its supersedes ran writes nothing, and no event.
    r = await post_facts(
        wclient,
        key,
        [
            {"content": "Alice is 31", "supersedes": b["fact_id"]},
            {"content": "x", "supersedes": a["fact_id"]},
        ],
        "s1",
    )
    assert_error(r, 422, "validation_error", field="facts[1].supersedes")
    r = await wclient.delete("/v1/subjects/s1", headers=bearer(key))
    assert r.status_code == 200, r.text

    done = await deliver(conn, wsettings, rounds=12)
    assert done.failed == done.dead == 0
    # A resolution's set changes before its members (one statement, the set's row first).
    assert kinds(receiver) == [
        "conflict.opened",
        "conflict.resolved",
        "fact.superseded",
        "fact.superseded",
        "fact.retracted",
        "subject.erased",
    ]
    events = [d.event for d in receiver.deliveries]
    opened, resolved, dropped, superseded, retracted, erased = events
    assert opened["data"]["conflict_set_id"] == set_id
    assert opened["data"]["key"] == "employer" and opened["data"]["subject_id"] == "s1"
    assert sorted(opened["data"]["member_fact_ids"]) == sorted([a["fact_id"], b["fact_id"]])
    assert dropped["data"]["fact_id"] == a["fact_id"]
    assert resolved["data"]["kept_fact_ids"] == [b["fact_id"]]
    assert resolved["data"]["superseded_fact_ids"] == [a["fact_id"]]
    assert resolved["data"]["retracted_fact_ids"] == []
    assert superseded["data"]["fact_id"] == c["fact_id"] and superseded["data"]["key"] == "city"
    assert retracted["data"]["fact_id"] == d["fact_id"]
    assert erased["data"]["facts"] == 4 and erased["data"]["conflict_sets"] == 1
    # No content unless asked for, and each body is signed under the webhook's secret.
    for delivery in receiver.deliveries:
        assert "Alice" not in delivery.body.decode()
        assert delivery.event["project_id"] == PROJECT
        assert delivery.event["event_id"] == delivery.event_id
        assert verify_signature(delivery.body, delivery.headers["haki-signature"], hook["secret"])
    assert len(set(receiver.delivered_ids())) == 6
    # Nothing is left to send.
    assert (await deliver(conn, wsettings)).delivered == 0
    listed = (await wclient.get("/v1/webhooks", headers=bearer(key))).json()["webhooks"][0]
    assert (listed["pending"], listed["delivered"], listed["dead"], listed["last_status"]) == (0, 6, 0, 200)


async def test_a_set_resolved_by_a_retraction_lists_the_member_retracted(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    """A set left with one claim because a member was retracted is resolved; its
    `conflict.resolved` listed the retracted member among `superseded_fact_ids`, although the fact
    is `retracted` (its own event says so)."""
    await subscribe(wclient, key, receiver.url, ["conflict.resolved", "fact.retracted"])
    (a,) = await write_facts(wclient, key, [{"content": "Bo works at Acme", "key": "employer"}], "s-ret")
    (b,) = await write_facts(wclient, key, [{"content": "Bo works at Globex", "key": "employer"}], "s-ret")
    r = await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text
    await deliver(conn, wsettings, rounds=4)
    resolved = next(d.event for d in receiver.deliveries if d.event["type"] == "conflict.resolved")
    data = resolved["data"]
    assert data["conflict_set_id"] == b["conflict_set_id"]
    assert (data["kept_fact_ids"], data["superseded_fact_ids"], data["retracted_fact_ids"]) == (
        [b["fact_id"]],
        [],
        [a["fact_id"]],
    )


async def test_a_subscription_gets_only_its_kinds_and_content_when_asked(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    await subscribe(wclient, key, receiver.url, ["fact.retracted"], include_content=True)
    (a,) = await write_facts(wclient, key, ["Bob likes tea"], "s2")
    (b,) = await write_facts(
        wclient, key, [{"content": "Bob likes coffee", "supersedes": a["fact_id"]}], "s2"
    )
    await wclient.patch(f"/v1/facts/{b['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    await deliver(conn, wsettings, rounds=3)
    (only,) = receiver.deliveries
    assert only.event["type"] == "fact.retracted"
    assert only.event["data"]["content"] == "Bob likes coffee"


async def test_a_failing_receiver_gets_the_same_event_until_it_accepts(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    receiver.statuses = [500, 503, 404]
    hook = await subscribe(wclient, key, receiver.url, ["fact.retracted"])
    (a,) = await write_facts(wclient, key, ["Carol plays chess"], "s3")
    await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    done = await deliver(conn, wsettings, rounds=6)
    assert (done.failed, done.delivered, done.dead) == (3, 1, 0)
    assert len(receiver.deliveries) == 4
    assert len(set(receiver.delivered_ids())) == 1
    assert len({d.body for d in receiver.deliveries}) == 1
    r = await wclient.get(f"/v1/webhooks/{hook['webhook_id']}/deliveries", headers=bearer(key))
    (row,) = r.json()["deliveries"]
    assert (row["status"], row["attempts"], row["last_status"], row["last_error"]) == (
        "delivered",
        4,
        200,
        None,
    )
    assert row["event_id"] == receiver.deliveries[0].event_id


async def test_dead_letters_show_in_the_api_and_metrics(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    receiver.statuses = [500] * 10
    hook = await subscribe(wclient, key, receiver.url, ["fact.retracted"])
    before = await metric(wclient, "haki_webhook_dead_letters")
    (a,) = await write_facts(wclient, key, ["Dan owns a boat"], "s4")
    await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    done = await deliver(conn, wsettings, rounds=8)
    assert (done.failed, done.dead) == (wsettings.webhook_max_attempts - 1, 1)
    assert len(receiver.deliveries) == wsettings.webhook_max_attempts
    r = await wclient.get(f"/v1/webhooks/{hook['webhook_id']}/deliveries?status=dead", headers=bearer(key))
    (row,) = r.json()["deliveries"]
    assert (row["status"], row["attempts"], row["last_status"]) == ("dead", 5, 500)
    assert row["last_error"] == "HTTP 500"
    listed = (await wclient.get("/v1/webhooks", headers=bearer(key))).json()["webhooks"][0]
    assert listed["dead"] == 1
    assert await metric(wclient, "haki_webhook_dead_letters") == before + 1


async def test_the_memory_browser_shows_subscriptions_and_their_last_deliveries(
    wclient: httpx.AsyncClient,
    key: str,
    other_key: str,
    conn: asyncpg.Connection,
    wsettings: Settings,
    receiver: Receiver,
) -> None:
    """/ui/webhooks: each subscription with its deliveries by status and its latest deliveries,
    from the same service calls as GET /v1/webhooks; another project's session sees none."""
    receiver.statuses = [500] * 10
    hook = await subscribe(wclient, key, receiver.url, ["fact.retracted"])
    (a,) = await write_facts(wclient, key, ["Eve sails"], "s-ui")
    await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    await deliver(conn, wsettings, rounds=8)
    page = await wclient.get("/ui/webhooks", headers=(await ui_login(wclient, key)).headers)
    assert page.status_code == 200, page.text
    assert f'data-webhook-id="{hook["webhook_id"]}"' in page.text and receiver.url in page.text
    assert "1 dead" in page.text and 'class="delivery dead"' in page.text and "HTTP 500" in page.text
    theirs = await wclient.get("/ui/webhooks", headers=(await ui_login(wclient, other_key)).headers)
    assert theirs.status_code == 200 and hook["webhook_id"] not in theirs.text


async def test_a_subjects_events_wait_for_the_earlier_one(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    await subscribe(wclient, key, receiver.url, ["fact.retracted"])
    facts = await write_facts(wclient, key, ["one", "two", "three"], "s5")
    failures = {facts[0]["fact_id"]: 2}

    def status_of(delivery: Any) -> int:
        fact_id = delivery.event["data"]["fact_id"]
        if failures.get(fact_id, 0) > 0:
            failures[fact_id] -= 1
            return 500
        return 200

    receiver.status_of = status_of
    (other,) = await write_facts(wclient, key, ["elsewhere"], "s6")
    for f in [*facts, other]:
        await wclient.patch(f"/v1/facts/{f['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    await deliver(conn, wsettings, rounds=10)
    order = [d.event["data"]["fact_id"] for d in receiver.deliveries]
    s5 = [fid for fid in order if fid != other["fact_id"]]
    # The first is tried three times before the second goes; the other subject did not wait.
    assert s5 == [facts[0]["fact_id"]] * 3 + [facts[1]["fact_id"], facts[2]["fact_id"]]
    assert order.count(other["fact_id"]) == 1
    assert order.index(other["fact_id"]) < order.index(facts[1]["fact_id"])


async def test_erasure_takes_pending_events_that_carry_the_subjects_content(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    await subscribe(wclient, key, receiver.url, ["fact.retracted", "subject.erased"], include_content=True)
    (a,) = await write_facts(wclient, key, ["Erin's secret diagnosis"], "s7")
    (b,) = await write_facts(wclient, key, ["Erin's other fact"], "s7")
    for f in (a, b):
        await wclient.patch(f"/v1/facts/{f['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    # Erasing one fact takes its own pending event; erasing the subject takes the rest.
    assert (await wclient.delete(f"/v1/facts/{a['fact_id']}", headers=bearer(key))).status_code == 200
    assert (await wclient.delete("/v1/subjects/s7", headers=bearer(key))).status_code == 200
    await deliver(conn, wsettings, rounds=3)
    (erased,) = receiver.deliveries
    assert erased.event["type"] == "subject.erased"
    assert erased.event["data"]["webhook_events"] == 1
    assert "Erin" not in erased.body.decode()


async def test_a_url_refused_at_delivery_is_never_called(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    """Allowed when subscribed, no longer allowed when delivered: checked again, nothing sent."""
    await subscribe(wclient, key, receiver.url, ["fact.retracted"])
    (a,) = await write_facts(wclient, key, ["Finn sails"], "s8")
    await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    strict = msgspec.structs.replace(wsettings, webhook_allowed_hosts=None, webhook_max_attempts=1)
    done = await deliver(conn, strict)
    assert done.dead == 1
    assert receiver.deliveries == []
    r = await wclient.get("/v1/webhooks", headers=bearer(key))
    hook = r.json()["webhooks"][0]
    r = await wclient.get(f"/v1/webhooks/{hook['webhook_id']}/deliveries", headers=bearer(key))
    (row,) = r.json()["deliveries"]
    assert row["last_status"] is None and "loopback" in row["last_error"]


async def test_deleting_a_webhook_stops_its_deliveries(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    hook = await subscribe(wclient, key, receiver.url, ["fact.retracted"])
    (a,) = await write_facts(wclient, key, ["Gus swims"], "s9")
    await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    await wclient.delete(f"/v1/webhooks/{hook['webhook_id']}", headers=bearer(key))
    await deliver(conn, wsettings, rounds=2)
    assert receiver.deliveries == []


async def test_changes_without_a_subscription_write_no_outbox_row(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    """A change made before any subscription is not delivered to a later one."""
    (a,) = await write_facts(wclient, key, ["Hana runs"], "s10")
    await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    await subscribe(wclient, key, receiver.url)
    done = await deliver(conn, wsettings, rounds=2)
    assert done.fanned_out == 0 and receiver.deliveries == []


async def test_a_claim_leases_its_delivery_and_a_late_record_changes_nothing(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, wsettings: Settings, receiver: Receiver
) -> None:
    """A claim commits a lease instead of holding a row lock through the attempt: no claim takes
    a leased delivery; once the lease has run out (a process killed mid-attempt) the next claim
    takes it over, and the first attempt's late record finds nothing to change."""
    hook = await subscribe(wclient, key, receiver.url, ["fact.retracted"])
    (a,) = await write_facts(wclient, key, ["Ivy rows"], "s11")
    await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    assert await repo.fan_out(conn, PROJECT, 10) == 1
    (first,) = await repo.claim(conn, PROJECT, 10, lease_seconds=0)
    (second,) = await repo.claim(conn, PROJECT, 10, lease_seconds=3600)
    assert second.event_id == first.event_id and (first.attempts, second.attempts) == (1, 2)
    assert await repo.claim(conn, PROJECT, 10, lease_seconds=3600) == []
    limits = (wsettings.webhook_max_attempts, wsettings.webhook_retry_base_seconds)
    late = Attempt(first.webhook_id, first.event_id, first.attempts, None, "late")
    assert await repo.record_attempt(conn, PROJECT, late, *limits) is None
    current = Attempt(second.webhook_id, second.event_id, second.attempts, 200, None)
    assert await repo.record_attempt(conn, PROJECT, current, *limits) == "delivered"
    r = await wclient.get(f"/v1/webhooks/{hook['webhook_id']}/deliveries", headers=bearer(key))
    (row,) = r.json()["deliveries"]
    assert (row["status"], row["attempts"], row["last_status"]) == ("delivered", 2, 200)


async def test_a_delivery_past_a_thousand_attempts_is_retried_an_hour_later(
    wclient: httpx.AsyncClient, key: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    """HAKI_WEBHOOK_MAX_ATTEMPTS has no ceiling: the doubling delay stops growing at the hour.
    Before, 2^(attempts - 1) overflowed float8 past attempt 1,025 and every record failed, the
    delivery never dead nor delivered."""
    await subscribe(wclient, key, receiver.url, ["fact.retracted"])
    (a,) = await write_facts(wclient, key, ["Jo dives"], "s12")
    await wclient.patch(f"/v1/facts/{a['fact_id']}", json={"status": "retracted"}, headers=bearer(key))
    assert await repo.fan_out(conn, PROJECT, 10) == 1
    (claimed,) = await repo.claim(conn, PROJECT, 10, lease_seconds=0)
    await load_test_queries().test_set_delivery_attempts(
        conn, project_id=PROJECT, event_id=claimed.event_id, attempts=2000
    )
    failed = Attempt(claimed.webhook_id, claimed.event_id, 2000, 500, "HTTP 500")
    assert await repo.record_attempt(conn, PROJECT, failed, 5000, 2.0) == "pending"
    assert await repo.claim(conn, PROJECT, 10, lease_seconds=0) == []  # not due for the hour


async def test_two_subscriptions_racing_for_the_last_place_store_one(
    settings: Settings, migrated: str
) -> None:
    """Both counted the project's webhooks before either was stored, and both were: the project's
    lock makes the second count after the first commits."""
    project = f"hooks-{uuid7().hex[:12]}"

    def subscribe_to(conn: asyncpg.Connection) -> Any:
        return repo.insert_webhook(
            conn, project, uuid7(), "https://example.com/h", ["fact.retracted"], False, "s", 1
        )

    async with sessions(settings, 3) as (first, second, observer):
        try:
            async with first.transaction():
                assert await subscribe_to(first) is not None
                racing = asyncio.create_task(subscribe_to(second))
                assert await waits_or_ends(observer, racing, second), "it counted before the first committed"
            assert await racing is None
            assert len(await repo.list_webhooks(observer, project)) == 1
        finally:
            for hook in await repo.list_webhooks(observer, project):
                await repo.delete_webhook(observer, project, hook.webhook_id)
