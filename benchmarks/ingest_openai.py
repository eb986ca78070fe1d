"""Ingest and context latency over the OpenAI-compatible embedder path, with the default settings.

    .venv/bin/python -m benchmarks.ingest_openai        # 10k facts, 1,000 a request, 1 and 4 clients
    .venv/bin/python -m benchmarks.ingest_openai --facts 5000 --queries 20 --clients 1,4
    .venv/bin/python -m benchmarks.ingest_openai --baseline /tmp/haki-before   # before/after, interleaved

Starts benchmarks/fake_openai.py (an OpenAI-compatible server in its own process, whose service
time is --delay-ms a request plus --per-text-ms a text, --slots requests at a time: by default
5 ms + 0.0625 ms a text, 64 texts in 9 ms as the GPU server of the first measurement, 8 slots)
and, one after the other, a `haki serve` per configuration on a data dir of its own:
- `openai` with the service's default settings (or HAKI_EMBED_CONCURRENCY at each value of
  --concurrency); with --baseline DIR, the same served from another checkout (before/after);
- `hash` (the in-process hash embedder): the ceiling of the write path without any embedder cost.
All servers run at once and every step goes to each in turn (interleaved), so the noise of a
shared machine hits them alike. For each --clients count k, --facts facts go in through bulk
`POST /v1/facts` (--batch facts per request): k clients, one subject each, each posting its next
batch when its last one is answered; facts/s is the facts over the wall time of those rounds.
The fake server's counters give the embedding requests each configuration sent per write batch,
the largest, and the most in flight. Then 100 facts for another subject, and --queries fresh
questions of each, reporting `POST /v1/context` p50/p95 at 100 and at --facts facts and their
ratio (targets: >= 1,000 facts/s, ratio <= 1.5).
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
from tests.helpers.server import free_port, spawn_serve  # noqa: E402

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


class FakeStats:
    """The fake server's counters, taken around one server's step."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def reset(self, client: httpx.AsyncClient) -> None:
        (await client.post(f"{self.url}/stats/reset")).raise_for_status()

    async def read(self, client: httpx.AsyncClient) -> dict[str, int]:
        r = await client.get(f"{self.url}/stats")
        r.raise_for_status()
        out: dict[str, int] = r.json()
        return out


async def measure(servers: list[Server], args: argparse.Namespace, fake_url: str) -> list[dict[str, Any]]:
    """Every step runs on each server in turn (interleaved), so machine noise hits them alike."""
    keys = [{"Authorization": f"Bearer {server.create_key()}"} for server in servers]
    clients = [httpx.AsyncClient(base_url=server.url, timeout=300.0) for server in servers]
    fake, stats_client = FakeStats(fake_url), httpx.AsyncClient(timeout=30.0)
    rng = random.Random(7)
    levels = [int(k) for k in args.clients.split(",")]
    rows: list[dict[int, dict[str, float]]] = [{} for _ in servers]
    lat: list[dict[str, list[float]]] = [{"small": [], "big": []} for _ in servers]
    try:
        for c, h in zip(clients, keys, strict=True):  # warm-up: connections, statements, embedder
            await post_facts(c, h, "warm", [fact_text(rng, i) for i in range(200)])
        for k in levels:
            wall = [0.0] * len(servers)
            requests = [0] * len(servers)
            largest = [0] * len(servers)
            in_flight = [0] * len(servers)
            batches = 0
            per_client = args.facts // k
            for start in range(0, per_client, args.batch):
                size = min(args.batch, per_client - start)
                rounds = [[fact_text(rng, j * per_client + start + i) for i in range(size)] for j in range(k)]
                batches += k
                for n, (c, h) in enumerate(zip(clients, keys, strict=True)):
                    await fake.reset(stats_client)
                    t0 = time.perf_counter()
                    # Same contents, one marker apart: no server gets another's cache hits.
                    await asyncio.gather(
                        *(
                            post_facts(c, h, f"big{k}-{j}", [f"{f} [{n}]" for f in facts])
                            for j, facts in enumerate(rounds)
                        )
                    )
                    wall[n] += time.perf_counter() - t0
                    seen = await fake.read(stats_client)
                    requests[n] += seen["requests"]
                    largest[n] = max(largest[n], seen["largest"])
                    in_flight[n] = max(in_flight[n], seen["max_in_flight"])
            for n in range(len(servers)):
                rows[n][k] = {
                    "facts_per_s": per_client * k / wall[n],
                    "requests_per_batch": requests[n] / batches,
                    "largest": largest[n],
                    "in_flight": in_flight[n],
                }
        for c, h in zip(clients, keys, strict=True):
            await post_facts(c, h, "small", [fact_text(rng, i) for i in range(100)])
        big = f"big{levels[0]}-0"
        for i in range(args.queries):
            query = f"What did {rng.choice(NAMES)} say about {rng.choice(TOPICS)}? (q{i})"
            for n, (c, h) in enumerate(zip(clients, keys, strict=True)):
                for subject in ("small", big):
                    side = "small" if subject == "small" else "big"
                    lat[n][side].append(await context_ms(c, h, subject, f"{query} {subject}"))
    finally:
        for c in clients:
            await c.aclose()
        await stats_client.aclose()
    return [
        {
            "levels": rows[n],
            "p50_small": statistics.median(lat[n]["small"]) if args.queries else float("nan"),
            "p50_big": statistics.median(lat[n]["big"]) if args.queries else float("nan"),
            "p95_small": percentile(lat[n]["small"], 0.95) if args.queries else float("nan"),
            "p95_big": percentile(lat[n]["big"], 0.95) if args.queries else float("nan"),
        }
        for n in range(len(servers))
    ]


class CheckoutServer(Server):
    """`haki serve` from another checkout of Haki (the --baseline of a before/after run)."""

    def __init__(self, checkout: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkout = checkout

    def create_key(self) -> str:
        res = subprocess.run(
            [sys.executable, "-m", "service.cli", "keys", "create", self.project],
            env=self.env,
            cwd=self.checkout,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return res.stdout.strip()

    def start(self) -> None:
        self.proc = spawn_serve(
            self.env, self.port, self.log, "--log-level", "warning", timeout=300, checkout=self.checkout
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--facts", type=int, default=10_000, help="facts written at each --clients count")
    p.add_argument("--batch", type=int, default=1000, help="facts per POST /v1/facts")
    p.add_argument("--clients", default="1,4", help="concurrent writing clients, one subject each")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument(
        "--concurrency",
        default="",
        help="HAKI_EMBED_CONCURRENCY values to run (default: the service's default setting only)",
    )
    p.add_argument("--baseline", type=Path, help="another checkout to serve the default config from")
    p.add_argument("--delay-ms", type=float, default=5.0, help="the fake server's service time a request")
    p.add_argument("--per-text-ms", type=float, default=0.0625, help="... and a text")
    p.add_argument("--slots", type=int, default=8, help="the fake server's requests at once (0: no limit)")
    p.add_argument("--no-hash", action="store_true", help="skip the hash-embedder baseline")
    p.add_argument("--env", action="append", default=[], help="HAKI_X=Y for every server (repeatable)")
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
            "--per-text-ms",
            str(args.per_text_ms),
            "--slots",
            str(args.slots),
            "--vectors",
            args.vectors,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert fake.stdout is not None
    fake.stdout.readline()  # ready
    openai_env = {"HAKI_EMBED_PROVIDER": "openai", "HAKI_EMBED_BASE_URL": f"http://127.0.0.1:{fake_port}/v1"}
    configs: list[tuple[str, dict[str, str], Path | None]] = []
    if args.baseline is not None:
        configs.append((f"openai, defaults, {args.baseline}", openai_env, args.baseline))
    if args.concurrency:
        configs.extend(
            (f"openai, HAKI_EMBED_CONCURRENCY={c}", {**openai_env, "HAKI_EMBED_CONCURRENCY": c}, None)
            for c in args.concurrency.split(",")
        )
    else:
        configs.append(("openai, defaults", openai_env, None))
    if not args.no_hash:
        configs.append(("hash (no embedder cost)", {"HAKI_EMBED_PROVIDER": "hash"}, None))
    try:
        with contextlib.ExitStack() as stack:
            servers: list[Server] = []
            for _, env, checkout in configs:
                # The work rate limit is a per-project guard, not what is measured here.
                options: dict[str, Any] = {
                    "env": {
                        "HAKI_EMBED_CHARS_PER_MINUTE": "0",
                        **env,
                        **dict(e.split("=", 1) for e in args.env),
                    },
                    "project": PROJECT,
                    "prefix": "haki-ingest-",
                }
                server = Server(**options) if checkout is None else CheckoutServer(checkout, **options)
                servers.append(stack.enter_context(server))
            results = asyncio.run(measure(servers, args, f"http://127.0.0.1:{fake_port}"))
    finally:
        fake.terminate()
        fake.wait(timeout=10)
    command = "python -m benchmarks.ingest_openai " + " ".join(sys.argv[1:])
    print(f"Command: `{command.strip()}`  ")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}  ")
    print(
        f"{args.facts} facts at each client count, {args.batch} per request; fake embedder "
        f"{args.delay_ms} ms + {args.per_text_ms} ms a text, {args.slots or 'unlimited'} slots; "
        f"{args.queries} fresh queries per subject\n"
    )
    print("| embedder | clients | facts/s | requests / batch | largest | most in flight |")
    print("|---|---:|---:|---:|---:|---:|")
    for (label, _, _), r in zip(configs, results, strict=True):
        for k, level in r["levels"].items():
            print(
                f"| {label} | {k} | {level['facts_per_s']:.0f} | {level['requests_per_batch']:.1f} | "
                f"{level['largest']} | {level['in_flight']} |"
            )
    if args.queries:
        print("\n| embedder | context p50 at 100 | p50 at big | ratio | p95 at 100 | p95 at big |")
        print("|---|---:|---:|---:|---:|---:|")
        for (label, _, _), r in zip(configs, results, strict=True):
            print(
                f"| {label} | {r['p50_small']:.1f} ms | {r['p50_big']:.1f} ms | "
                f"{r['p50_big'] / r['p50_small']:.2f} | {r['p95_small']:.1f} ms | {r['p95_big']:.1f} ms |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
