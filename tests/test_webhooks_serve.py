"""Webhook delivery by real `haki serve` processes (docs/webhooks.md, "Delivery"): a process
killed with SIGKILL mid-delivery leaves the event to be delivered after the restart, with the
same id; two processes on one database never deliver an event twice at the same time."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import bearer
from tests.helpers.receiver import Delivery, Receiver, receiving
from tests.helpers.server import free_port, new_key, scratch_data_dir, server_env, spawn_serve, stop_process

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROJECT = "hooks"


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with scratch_data_dir("haki-wh-") as path:
        yield path


def webhook_env(data_dir: Path) -> dict[str, str]:
    return server_env(
        data_dir,
        HAKI_WEBHOOK_ALLOWED_HOSTS="127.0.0.1",
        HAKI_WEBHOOK_POLL_INTERVAL_SECONDS="0.05",
        HAKI_WEBHOOK_RETRY_BASE_SECONDS="0.05",
        HAKI_WEBHOOK_TIMEOUT_SECONDS="20",
    )


def serve(data_dir: Path, env: dict[str, str], name: str) -> tuple[Any, str]:
    port = free_port()
    proc = spawn_serve(env, port, data_dir / f"{name}.log")
    return proc, f"http://127.0.0.1:{port}"


def retract_facts(url: str, key: str, subjects: list[str]) -> list[str]:
    """One fact per subject, written then retracted: one fact.retracted event each."""
    ids = []
    with httpx.Client(base_url=url, headers=bearer(key), timeout=30) as http:
        for subject in subjects:
            r = http.post(
                "/v1/facts", json={"subject_id": subject, "facts": [{"content": f"{subject} is here"}]}
            )
            assert r.status_code == 201, r.text
            fact_id = r.json()["facts"][0]["fact_id"]
            r = http.patch(f"/v1/facts/{fact_id}", json={"status": "retracted"})
            assert r.status_code == 200, r.text
            ids.append(fact_id)
    return ids


def subscribe(url: str, key: str, receiver: Receiver) -> str:
    r = httpx.post(
        f"{url}/v1/webhooks",
        json={"url": receiver.url, "events": ["fact.retracted"]},
        headers=bearer(key),
        timeout=30,
    )
    assert r.status_code == 201, r.text
    webhook_id: str = r.json()["webhook_id"]
    return webhook_id


def deliveries(url: str, key: str, webhook_id: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/v1/webhooks/{webhook_id}/deliveries", headers=bearer(key), timeout=30)
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["deliveries"]
    return rows


def test_an_event_held_by_a_killed_process_is_delivered_after_the_restart(data_dir: Path) -> None:
    held = threading.Event()
    release = threading.Event()

    def hold_the_first(delivery: Delivery) -> None:
        if not held.is_set():
            held.set()
            release.wait(60)  # answers after its sender is dead

    env = webhook_env(data_dir)
    with receiving(Receiver(before_answer=hold_the_first)) as receiver:
        proc, url = serve(data_dir, env, "first")
        try:
            key = new_key(env, PROJECT)
            webhook_id = subscribe(url, key, receiver)
            (fact_id,) = retract_facts(url, key, ["kim"])
            assert held.wait(30), "the first delivery never arrived"
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            release.set()
            stop_process(proc)
        proc, url = serve(data_dir, env, "second")
        try:
            first, again = receiver.wait_for(2, timeout=60)[:2]
            assert again.event_id == first.event_id and again.body == first.body
            assert again.event["data"]["fact_id"] == fact_id
            deadline = time.monotonic() + 30
            while (rows := deliveries(url, key, webhook_id))[0]["status"] != "delivered":
                assert time.monotonic() < deadline, rows
                time.sleep(0.1)
            assert rows[0]["event_id"] == first.event_id
        finally:
            stop_process(proc)


def test_two_processes_on_one_database_never_deliver_an_event_twice_at_once(data_dir: Path) -> None:
    def slow(delivery: Delivery) -> None:
        time.sleep(0.2)  # long enough for the other process to try the same event

    env = webhook_env(data_dir)
    with receiving(Receiver(before_answer=slow)) as receiver:
        one, url_one = serve(data_dir, env, "one")
        two = None
        try:
            key = new_key(env, PROJECT)
            two, url_two = serve(data_dir, env, "two")
            subscribe(url_one, key, receiver)
            subjects = [f"s{i}" for i in range(12)]
            # Half of the changes through each process, for each to deliver.
            ids = retract_facts(url_one, key, subjects[:6]) + retract_facts(url_two, key, subjects[6:])
            got = receiver.wait_for(len(ids), timeout=60)
            time.sleep(1.0)  # any duplicate would have arrived by now
            assert receiver.overlaps == []
            assert sorted(d.event["data"]["fact_id"] for d in receiver.deliveries) == sorted(ids)
            assert len({d.event_id for d in got}) == len(receiver.deliveries)
        finally:
            stop_process(one)
            if two is not None:
                stop_process(two)
