"""A scripted httpx transport for the SDK's tests: no server, each request gets the next answer."""

from __future__ import annotations

import httpx


class Script:
    """Answers each request with the next scripted response (or raises it, an httpx failure);
    records what it was sent. Pass it to `httpx.MockTransport`."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
