"""A scripted OpenAI-compatible chat server (POST {base}/chat/completions), for POST /v1/extract.

A real HTTP server on a loopback port, in a thread (benchmarks/fake_openai.py is its embeddings
sibling). Each request takes the next step of the script: an answer (its JSON becomes the
message content), raw content, an HTTP error, a raw body, or a delay longer than the caller
waits. Requests are recorded, so a test can check what Haki sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.helpers.stub_http import reply_json, stub_server


@dataclass(frozen=True)
class Step:
    """One scripted reply: `answer` (a JSON value sent as the message content), else `content`
    (a raw content string), else `status` + `body` (an HTTP error or a raw body), with `headers`
    besides; after `delay`, and once `hold` is set (at most 30 s) when given."""

    answer: Any = None
    content: str | None = None
    status: int = 200
    body: bytes | None = None
    delay: float = 0.0
    hold: threading.Event | None = None
    headers: dict[str, str] = field(default_factory=dict)


def answer(*facts: dict[str, Any]) -> Step:
    """A well-formed answer proposing these facts (key, supersedes, volatility filled in)."""
    full = [{"key": None, "supersedes": None, "volatility": "stable", **f} for f in facts]
    return Step(answer={"facts": full})


@dataclass
class FakeChat:
    url: str
    script: list[Step] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Released once per request, when it has arrived (before its step runs).
    arrived: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def then(self, *steps: Step) -> FakeChat:
        with self.lock:
            self.script.extend(steps)
        return self

    def next_step(self) -> Step:
        with self.lock:
            return self.script.pop(0) if self.script else Step(answer={"facts": []})

    def user_payload(self, n: int = -1) -> dict[str, Any]:
        """The JSON the n-th request gave the model as its user message."""
        parsed: dict[str, Any] = json.loads(self.requests[n]["messages"][1]["content"])
        return parsed


def _completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
        }
    ).encode()


@contextmanager
def fake_chat() -> Iterator[FakeChat]:
    state = FakeChat(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with state.lock:
                state.requests.append(json.loads(raw))
                state.headers.append(dict(self.headers))
            step = state.next_step()
            state.arrived.release()
            if step.delay:
                time.sleep(step.delay)
            if step.hold is not None:
                step.hold.wait(timeout=30)
            if self.path != "/v1/chat/completions":
                status, out = 404, b'{"error": "not found"}'
            elif step.body is not None or step.status != 200:
                status, out = step.status, step.body or b'{"error": {"message": "scripted failure"}}'
            elif step.content is not None:
                status, out = 200, _completion(step.content)
            else:
                status, out = 200, _completion(json.dumps(step.answer))
            reply_json(self, status, out, step.headers)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with stub_server(Handler) as port:
        state.url = f"http://127.0.0.1:{port}/v1"
        yield state
