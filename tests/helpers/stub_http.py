"""A real HTTP server on a loopback port, in a thread, for the scripted stand-ins of external
services (an OpenAI-compatible embeddings or chat endpoint) that tests talk to."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def reply_json(
    handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    """Writes a JSON response (with `headers` besides); a caller that already gave up (a time-out
    test) is not an error."""
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        pass


@contextmanager
def stub_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serves `handler` until the block ends; yields the port. The serving loop looks for the
    shutdown every 10 ms (the default 0.5 s was half of each extraction test's time)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def serve_posts(
    answer: Callable[[str, dict[str, str], bytes], tuple[int, bytes] | tuple[int, bytes, dict[str, str]]],
) -> Iterator[int]:
    """`stub_server` answering each POST with `answer(path, headers, body)`: a status, a JSON
    body and maybe response headers. The request's header names are lower-cased. Yields the port."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply_json(self, *answer(self.path, headers, body))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with stub_server(Handler) as port:
        yield port
