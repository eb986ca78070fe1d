"""A fast OpenAI-compatible embedding server, for measuring Haki's side of the `openai` provider.

    .venv/bin/python benchmarks/fake_openai.py --port 8765 [--dim 384] [--delay-ms 0]

`POST /v1/embeddings` with `{"model", "input": [...]}` answers `{"object": "list", "data":
[{"object": "embedding", "index": i, "embedding": [...]}, ...], "model", "usage"}` in well under
a millisecond per text: each text's vector is one of 4,096 precomputed unit vectors (picked by a
hash of the text, so equal texts get equal vectors) whose JSON is pre-rendered, so the answer is
a string join. HTTP/1.1 with keep-alive, one thread per connection, like a real server behind a
pool of connections. It runs in its own process, so it never competes with Haki for the GIL.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import sys
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


def make_handler(dim: int, delay: float, hashed: bool = False) -> type[BaseHTTPRequestHandler]:
    words = BagOfWords(dim)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            payload: dict[str, Any] = json.loads(body)
            texts = payload["input"]
            parts = []
            for i, text in enumerate(texts):
                vec = hash_vector_json(text) if hashed else words.vector_json(text)
                parts.append(b'{"object":"embedding","index":%d,"embedding":%s}' % (i, vec))
            out = (
                b'{"object":"list","data":['
                + b",".join(parts)
                + b'],"model":"%s","usage":{"prompt_tokens":0,"total_tokens":0}}'
                % payload.get("model", "m").encode()
            )
            if delay:
                time.sleep(delay)
            # Head and body in one write, on a TCP_NODELAY socket, as production servers answer:
            # a separate small body write would wait out the client's delayed ACK (40 ms).
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            self.wfile.write(head % len(out) + out)
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--delay-ms", type=float, default=0.0, help="extra wait per request")
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
        make_handler(args.dim, args.delay_ms / 1000, args.vectors == "hash"),
    )
    server.daemon_threads = True
    print(f"fake OpenAI-compatible server on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
