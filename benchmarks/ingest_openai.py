"""Ingest and context latency over the OpenAI-compatible embedder path, against a fast server.

    .venv/bin/python benchmarks/ingest_openai.py                  # 10k facts, 1,000 per request
    .venv/bin/python benchmarks/ingest_openai.py --facts 5000 --queries 60 --concurrency 1,4

Starts benchmarks/fake_openai.py (a fast OpenAI-compatible server in its own process) and, one
after the other, a `haki serve` per configuration on a data dir of its own:
- `openai` with HAKI_EMBED_CONCURRENCY at each value of --concurrency (1 = the batches one after
  another, as before issue 13);
- `hash` (the in-process hash embedder): the ceiling of the write path without any embedder cost.
All servers run at once and every step goes to each in turn (interleaved), so the noise of a
shared machine hits them alike. Each gets --facts facts for one subject through bulk
`POST /v1/facts` (--batch facts per request, one request at a time; facts/s counts the time
inside those requests), then 100 facts for another subject; then --queries fresh questions of
each subject, reporting `POST /v1/context` p50/p95 at 100 and at --facts facts and their ratio
(issue 13's targets: >= 1,000 facts/s, ratio <= 1.5). --delay-ms makes the fake server answer
each batch that much later (the issue's server took 9 ms per 64-text batch).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.load import Server  # noqa: E402
from tests.helpers.server import free_port  # noqa: E402

PROJECT = "ingest-bench"
NAMES = ["Lena", "Omar", "Aiko", "Jonas", "Priya", "Mateo", "Sofia", "Kwame"]
VERBS = ["likes", "visited", "booked", "cancelled", "reviewed", "ordered", "planned", "fixed"]
TOPICS = [
    "the Oslo trip",
    "dark roast coffee",
    "the billing migration",
    "a standing desk",
    "the quarterly report",
    "sushi on Fridays",
    "the VPN outage",
    "a road bike",
]


def fact_text(rng: random.Random, i: int) -> str:
    return (
        f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(TOPICS)} (note {i}, ref {rng.randrange(10**6)})"
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def post_facts(
    client: httpx.AsyncClient, headers: dict[str, str], subject: str, facts: list[str]
) -> float:
    started = time.perf_counter()
    r = await client.post(
        "/v1/facts",
        headers=headers,
        json={"project_id": PROJECT, "subject_id": subject, "facts": [{"content": f} for f in facts]},
    )
    r.raise_for_status()
    elapsed = time.perf_counter() - started
    if os.environ.get("HAKI_BENCH_VERBOSE"):
        print(
            f"[ingest_openai] {client.base_url} {subject}: {len(facts)} facts in {elapsed:.2f} s",
            file=sys.stderr,
        )
    return elapsed


async def context_ms(client: httpx.AsyncClient, headers: dict[str, str], subject: str, query: str) -> float:
    t0 = time.perf_counter()
    r = await client.post(
        "/v1/context",
        headers=headers,
        json={"project_id": PROJECT, "subject_id": subject, "query": query},
    )
    elapsed = (time.perf_counter() - t0) * 1000
    r.raise_for_status()
    assert r.json()["status"] == "ok", r.text
    return elapsed


async def measure(servers: list[Server], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every step runs on each server in turn (interleaved), so machine noise hits them alike."""
    keys = [{"Authorization": f"Bearer {server.create_key()}"} for server in servers]
    clients = [httpx.AsyncClient(base_url=server.url, timeout=300.0) for server in servers]
    rng = random.Random(7)
    write_s = [0.0] * len(servers)
    lat: list[dict[str, list[float]]] = [{"small": [], "big": []} for _ in servers]
    try:
        for c, h in zip(clients, keys, strict=True):  # warm-up: connections, statements, embedder
            await post_facts(c, h, "warm", [fact_text(rng, i) for i in range(200)])
        for start in range(0, args.facts, args.batch):
            facts = [fact_text(rng, i) for i in range(start, min(args.facts, start + args.batch))]
            for n, (c, h) in enumerate(zip(clients, keys, strict=True)):
                # Same contents, one marker apart: no server gets another's cache hits.
                write_s[n] += await post_facts(c, h, "big", [f"{f} [{n}]" for f in facts])
        for c, h in zip(clients, keys, strict=True):
            await post_facts(c, h, "small", [fact_text(rng, i) for i in range(100)])
        for i in range(args.queries):
            query = f"What did {rng.choice(NAMES)} say about {rng.choice(TOPICS)}? (q{i})"
            for n, (c, h) in enumerate(zip(clients, keys, strict=True)):
                for subject in ("small", "big"):
                    lat[n][subject].append(await context_ms(c, h, subject, f"{query} {subject}"))
    finally:
        for c in clients:
            await c.aclose()
    return [
        {
            "facts_per_s": args.facts / write_s[n],
            "p50_small": statistics.median(lat[n]["small"]),
            "p50_big": statistics.median(lat[n]["big"]),
            "p95_small": percentile(lat[n]["small"], 0.95),
            "p95_big": percentile(lat[n]["big"], 0.95),
        }
        for n in range(len(servers))
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--facts", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=1000, help="facts per POST /v1/facts")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--concurrency", default="1,4", help="HAKI_EMBED_CONCURRENCY values to run")
    p.add_argument("--delay-ms", type=float, default=0.0, help="the fake server's extra wait per batch")
    p.add_argument("--no-hash", action="store_true", help="skip the hash-embedder baseline")
    p.add_argument(
        "--vectors",
        choices=["words", "hash"],
        default="words",
        help="what the fake server answers (benchmarks/fake_openai.py --vectors)",
    )
    args = p.parse_args()
    fake_port = free_port()
    fake = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "benchmarks" / "fake_openai.py"),
            "--port",
            str(fake_port),
            "--delay-ms",
            str(args.delay_ms),
            "--vectors",
            args.vectors,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert fake.stdout is not None
    fake.stdout.readline()  # ready
    configs: list[tuple[str, dict[str, str]]] = [
        (
            f"openai, HAKI_EMBED_CONCURRENCY={c}",
            {
                "HAKI_EMBED_PROVIDER": "openai",
                "HAKI_EMBED_BASE_URL": f"http://127.0.0.1:{fake_port}/v1",
                "HAKI_EMBED_CONCURRENCY": c,
            },
        )
        for c in args.concurrency.split(",")
    ]
    if not args.no_hash:
        configs.append(("hash (no embedder cost)", {"HAKI_EMBED_PROVIDER": "hash"}))
    try:
        with contextlib.ExitStack() as stack:
            servers = [
                stack.enter_context(
                    Server(
                        env={"HAKI_EMBED_CHARS_PER_MINUTE": "0", **env},
                        project=PROJECT,
                        prefix="haki-ingest-",
                    )
                )
                for _, env in configs
            ]
            rows = list(
                zip([label for label, _ in configs], asyncio.run(measure(servers, args)), strict=True)
            )
    finally:
        fake.terminate()
        fake.wait(timeout=10)
    command = "benchmarks/ingest_openai.py " + " ".join(sys.argv[1:])
    print(f"Command: `{command.strip()}`  ")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}  ")
    print(
        f"{args.facts} facts to one subject, {args.batch} per request; "
        f"{args.queries} fresh queries per subject\n"
    )
    print("| embedder | ingest facts/s | context p50 at 100 | p50 at big | ratio | p95 at 100 | p95 at big |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, r in rows:
        print(
            f"| {label} | {r['facts_per_s']:.0f} | {r['p50_small']:.1f} ms | {r['p50_big']:.1f} ms | "
            f"{r['p50_big'] / r['p50_small']:.2f} | {r['p95_small']:.1f} ms | {r['p95_big']:.1f} ms |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
