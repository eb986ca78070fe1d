"""What making a write's vectors in context before it answers costs (HAKI_EVENT_CONTEXT_INLINE).

    .venv/bin/python -m benchmarks.event_write [--sizes 1,16,256] [--rounds 15] [--embed-backend onnx]

One embedded PostgreSQL and the local model; two apps on the same pool and embedder, one with
the setting on (the default) and one with it off, so neither runs the background task. Each
round posts a batch of each size to each app, alternating which goes first, each app into a
subject of its own (turns of a chat, dated a minute apart, each batch after the last), and
reports the p50 of `POST /v1/events` by size and app, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from benchmarks.locomo import fresh_service

PROJECT = "event-write"
TOPICS = [
    "the garden",
    "a violin lesson",
    "the harbour walk",
    "a new recipe",
    "the book club",
    "a job interview",
]


def turns(who: str, start: int, n: int) -> list[dict[str, Any]]:
    """`n` chat turns of `who` from turn number `start`, a minute apart (never a text embedded before)."""
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    out = []
    for i in range(start, start + n):
        speaker = "Ana" if i % 2 else "Ben"
        # `who` in the text: the embedder caches by text, and each app's subject must embed its own.
        text = f"{speaker}: turn {i} of {who}, about {TOPICS[i % len(TOPICS)]} and what happened after it."
        out.append({"content": text, "occurred_at": (t0 + timedelta(minutes=i)).isoformat()})
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    from service.app import create_app
    from tests.helpers.app import asgi_transport

    sizes = [int(s) for s in args.sizes.split(",")]
    quiet = {"httpx": logging.WARNING, "haki": logging.WARNING}
    async with fresh_service(
        "event-write", PROJECT, embed_backend=args.embed_backend, query_precision="fp32", quiet=quiet,
        say=lambda m: print(m, file=sys.stderr),
    ) as svc:  # fmt: skip
        off_app = create_app(
            msgspec.structs.replace(svc.settings, event_context_inline=False),
            pool=svc.pool,
            embedder=svc.embedder,
        )
        async with httpx.AsyncClient(transport=asgi_transport(off_app), base_url="http://off") as off_client:
            clients = {"inline": svc.client, "background": off_client}
            times: dict[tuple[str, int], list[float]] = {(m, n): [] for m in clients for n in sizes}
            written = {(m, n): 0 for m in clients for n in sizes}
            for r in range(args.rounds + 1):  # the first round warms up
                order = list(clients) if r % 2 == 0 else list(clients)[::-1]
                for n in sizes:
                    for mode in order:
                        body = {
                            "project_id": PROJECT,
                            "subject_id": f"{mode}-{n}",
                            "events": turns(f"{mode}-{n}", written[(mode, n)], n),
                        }
                        t0 = time.perf_counter()
                        resp = await clients[mode].post("/v1/events", json=body, headers=svc.headers)
                        took = (time.perf_counter() - t0) * 1000.0
                        resp.raise_for_status()
                        written[(mode, n)] += n
                        if r:
                            times[(mode, n)].append(took)
    out: dict[str, Any] = {}
    for n in sizes:
        inline, background = (statistics.median(times[(m, n)]) for m in ("inline", "background"))
        out[str(n)] = {"inline_p50_ms": inline, "background_p50_ms": background, "ratio": inline / background}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,16,256")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--embed-backend", default="onnx")
    report = asyncio.run(run(parser.parse_args()))
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(report)).decode() + "\n")


if __name__ == "__main__":
    main()
