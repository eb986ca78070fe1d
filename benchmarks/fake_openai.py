"""An OpenAI-compatible embedding server, for measuring Haki's side of the `openai` provider.

    .venv/bin/python benchmarks/fake_openai.py --port 8765 [--dim 384] [--delay-ms 5]
        [--per-text-ms 0.0625] [--slots 8] [--max-inputs 2048]

`POST /v1/embeddings` with `{"model", "input": [...]}` answers `{"object": "list", "data":
[{"object": "embedding", "index": i, "embedding": [...]}, ...], "model", "usage"}`. The vectors
cost about 30 us a text of real work (BagOfWords). HTTP/1.1 with keep-alive, one thread per
connection, like a real server behind a pool of connections. It runs in its own process, so it
never competes with Haki for the GIL (it does share the machine's cores).

Latency, modelled so that no way of cutting a write into requests gets a free ride:
- `--delay-ms` per request (the round trip and the server's fixed cost) plus `--per-text-ms` per
  input: a request of 1,000 texts takes longer than one of 64, as on a real model server;
- `--slots`: requests the server works on at once (a model server's capacity); more wait their
  turn, so sending everything at once does not multiply the server's throughput (0: no limit);
- `--max-inputs`: larger requests are refused with 400, as OpenAI refuses more than 2,048 inputs.
`GET /stats` answers the requests served, their inputs, the largest request and the most requests
in flight at once (waiting for a slot included); `POST /stats/reset` zeroes them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import numpy as np


def hash_vector_json(text: str) -> bytes:
    """Haki's own hash embedder's vector: the same vectors as HAKI_EMBED_PROVIDER=hash."""
    from service.embedding.embedder import HashEmbedder

    return json.dumps([round(float(x), 7) for x in HashEmbedder().embed_one(text)]).encode()


WORD = re.compile(r"\w+")
TABLE_ROWS = 4096


class BagOfWords:
    """Vectors shaped like a real model's: the sum of a random vector per word (texts sharing
    words are close, as with MiniLM or OpenAI's models), plus a little noise of the text's own so
    no two texts share a vector. Uniformly random vectors, or many equal ones, are the worst case
    of an HNSW index and measure PostgreSQL's index build, not Haki (docs/performance.md).
    About 30 us a text with msgspec."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.table = np.random.default_rng(7).standard_normal((TABLE_ROWS, dim)).astype(np.float32)

    def vector_json(self, text: str) -> bytes:
        rows = [
            int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little") % TABLE_ROWS
            for w in WORD.findall(text.lower())
        ]
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        noise = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        v = self.table[rows].sum(axis=0) + 0.3 * noise if rows else noise
        v /= np.linalg.norm(v)
        return msgspec.json.encode(v.tolist())


class Stats:
    """What the server saw; read by the benchmark through GET /stats."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.inputs = 0
        self.largest = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def enter(self, inputs: int) -> None:
        with self.lock:
            self.requests += 1
            self.inputs += inputs
            self.largest = max(self.largest, inputs)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def as_json(self) -> bytes:
        with self.lock:
            return json.dumps(
                {
                    "requests": self.requests,
                    "inputs": self.inputs,
                    "largest": self.largest,
                    "max_in_flight": self.max_in_flight,
                }
            ).encode()


def make_handler(
    dim: int,
    delay: float,
    hashed: bool = False,
    *,
    per_text: float = 0.0,
    slots: int = 0,
    max_inputs: int = 2048,
) -> type[BaseHTTPRequestHandler]:
    words = BagOfWords(dim)
    stats = Stats()
    # The server's capacity: a request holds a slot for its whole modelled service time.
    capacity = threading.BoundedSemaphore(slots) if slots > 0 else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            self.answer(200, stats.as_json() if self.path == "/stats" else b"{}")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/stats/reset":
                stats.reset()
                self.answer(200, b"{}")
                return
            payload: dict[str, Any] = json.loads(body)
            texts = payload["input"]
            if len(texts) > max_inputs:
                message = b'{"error":{"message":"at most %d inputs a request"}}' % max_inputs
                self.answer(400, message)
                return
            stats.enter(len(texts))
            try:
                out = self.serve(texts, payload.get("model", "m"))
            finally:
                stats.leave()
            self.answer(200, out)

        def serve(self, texts: list[str], model: str) -> bytes:
            if capacity is not None:
                capacity.acquire()
            try:
                started = time.perf_counter()
                parts = []
                for i, text in enumerate(texts):
                    vec = hash_vector_json(text) if hashed else words.vector_json(text)
                    parts.append(b'{"object":"embedding","index":%d,"embedding":%s}' % (i, vec))
                out = (
                    b'{"object":"list","data":['
                    + b",".join(parts)
                    + b'],"model":"%s","usage":{"prompt_tokens":0,"total_tokens":0}}' % model.encode()
                )
                # The modelled service time, of which the vectors' real work is a part.
                left = delay + per_text * len(texts) - (time.perf_counter() - started)
                if left > 0:
                    time.sleep(left)
                return out
            finally:
                if capacity is not None:
                    capacity.release()

        def answer(self, status: int, out: bytes) -> None:
            # Head and body in one write, on a TCP_NODELAY socket, as production servers answer:
            # a separate small body write would wait out the client's delayed ACK (40 ms).
            head = b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            reason = b"OK" if status == 200 else b"Bad Request"
            self.wfile.write(head % (status, reason, len(out)) + out)
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--delay-ms", type=float, default=0.0, help="service time per request, ms")
    p.add_argument("--per-text-ms", type=float, default=0.0, help="service time per input text, ms")
    p.add_argument("--slots", type=int, default=0, help="requests served at once (0: no limit)")
    p.add_argument("--max-inputs", type=int, default=2048, help="inputs a request may hold")
    p.add_argument(
        "--vectors",
        choices=["words", "hash"],
        default="words",
        help="words: bag-of-words vectors (fast, default); hash: Haki's hash embedder's",
    )
    args = p.parse_args()
    if args.vectors == "hash":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    server = ThreadingHTTPServer(
        ("127.0.0.1", args.port),
        make_handler(
            args.dim,
            args.delay_ms / 1000,
            args.vectors == "hash",
            per_text=args.per_text_ms / 1000,
            slots=args.slots,
            max_inputs=args.max_inputs,
        ),
    )
    server.daemon_threads = True
    print(f"fake OpenAI-compatible server on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
