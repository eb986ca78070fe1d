"""A webhook receiver on 127.0.0.1, in a thread: records every delivery (headers and raw body),
answers what the test scripts (a status per request, or a hold until released), and notes two
deliveries of one event in flight at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.helpers.stub_http import reply_json, stub_server


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    @property
    def event_id(self) -> str:
        return self.headers["haki-event-id"]


@dataclass
class Receiver:
    port: int = 0
    # The status of the n-th request (0-based); past the end, 200.
    statuses: list[int] = field(default_factory=list)
    # The status of a delivery, when set (else `statuses`).
    status_of: Callable[[Delivery], int] | None = None
    # Called before answering (to hold a request, to sleep).
    before_answer: Callable[[Delivery], None] | None = None
    deliveries: list[Delivery] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)
    overlaps: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def delivered_ids(self) -> list[str]:
        with self.lock:
            return [d.event_id for d in self.deliveries]

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.deliveries) >= count:
                    return list(self.deliveries)
            time.sleep(0.02)
        with self.lock:
            raise AssertionError(f"{len(self.deliveries)} deliveries after {timeout} s, wanted {count}")


@contextmanager
def receiving(receiver: Receiver) -> Iterator[Receiver]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            delivery = Delivery(headers={k.lower(): v for k, v in self.headers.items()}, body=body)
            with receiver.lock:
                n = len(receiver.deliveries)
                receiver.deliveries.append(delivery)
                eid = delivery.headers.get("haki-event-id", "")
                receiver.in_flight[eid] = receiver.in_flight.get(eid, 0) + 1
                if receiver.in_flight[eid] > 1:
                    receiver.overlaps.append(eid)
            try:
                if receiver.before_answer is not None:
                    receiver.before_answer(delivery)
                status = receiver.statuses[n] if n < len(receiver.statuses) else 200
                if receiver.status_of is not None:
                    status = receiver.status_of(delivery)
                reply_json(self, status, b'{"ok": true}')
            finally:
                with receiver.lock:
                    receiver.in_flight[eid] -= 1

        def log_message(self, format: str, *args: Any) -> None:
            return

    with stub_server(Handler) as port:
        receiver.port = port
        yield receiver
