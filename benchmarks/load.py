"""Sustained mixed load against the real server at several concurrencies: throughput, latency, errors.

    .venv/bin/python -m benchmarks.load                       # 1, 4 and 16 clients, 30 s each, local model
    .venv/bin/python -m benchmarks.load --concurrency 16 --duration 60
    .venv/bin/python -m benchmarks.load --duration 10 --embed hash   # a quick smoke run

What it does:
1. starts `python -m service.cli serve` on a free port with a fresh HAKI_DATA_DIR (its own embedded
   PostgreSQL), the chosen embedder (`local`: all-MiniLM-L6-v2, the default of the service) and
   HAKI_RATE_LIMIT_PER_MINUTE=0 (one key sends thousands of requests a minute here; the limit is a
   per-agent guard, not what is measured). Every other setting is the service's default.
2. seeds --subjects subjects with 100 facts and 20 events each, through the API;
3. for each --concurrency level in turn, on the same server, runs that many clients for
   --duration seconds, each sending its next request as soon as the previous one is answered:
   80% POST /v1/context (a question never asked before, so the embedder's cache does not help),
   20% writes (3 in 4 POST /v1/facts of 2 facts, 1 in 4 POST /v1/events of 2 events), on random
   subjects;
4. prints throughput, p50/p95/p99 per kind and overall, every error (any non-2xx or transport
   failure counts), and the throughput of each level as a ratio to the first level's (the
   target: 16 clients >= 1.8x one client). Exit status 1 when there was any error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.rawhttp import RawClient, RawHTTPError
from tests.helpers.server import free_port, spawn_serve

REPO = Path(__file__).resolve().parent.parent
PROJECT = "bench-load"
NAMES = ["Alice", "Bob", "Chloé", "Dmitri", "Emeka", "Fatima", "Giulia", "Hiro", "Ines", "Jonas"]
TOPICS = ["coffee", "Lyon", "Acme", "tennis", "jazz", "Rust", "gardening", "Kyoto", "sailing", "chess"]
VERBS = ["likes", "works at", "moved to", "plays", "studies", "visited", "dislikes", "collects"]


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def fact_text(rng: random.Random, subject: int) -> str:
    return f"{NAMES[subject % len(NAMES)]} {rng.choice(VERBS)} {rng.choice(TOPICS)} ({rng.randrange(10**6)})"


class Server:
    """`haki serve` as an operator runs it, on a data dir of its own (also a context manager:
    started on entry, stopped and its data dir removed on exit). `env` adds or overrides
    HAKI_* settings; benchmarks/ingest_openai.py runs its embedder configurations this way."""

    def __init__(
        self,
        embed: str = "hash",
        *,
        env: dict[str, str] | None = None,
        project: str = PROJECT,
        prefix: str = "haki-load-",
    ) -> None:
        base = Path(os.environ.get("HAKI_BENCH_TMP", tempfile.gettempdir()))
        self.data_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        self.port = free_port()
        self.project = project
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
        self.env.update(
            HAKI_DATA_DIR=str(self.data_dir),
            HAKI_EMBED_PROVIDER=embed,
            HAKI_RATE_LIMIT_PER_MINUTE="0",
            PYTHONUNBUFFERED="1",
        )
        self.env.update(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.data_dir / "serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def create_key(self) -> str:
        res = subprocess.run(
            [sys.executable, "-m", "service.cli", "keys", "create", self.project],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return res.stdout.strip()

    def start(self) -> None:
        self.proc = spawn_serve(self.env, self.port, self.log, "--log-level", "warning", timeout=300)

    def __enter__(self) -> Server:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        pid_file = self.data_dir / "pgdata" / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().split("\n", 1)[0]), signal.SIGINT)  # fast shutdown
            for _ in range(100):
                if not pid_file.exists():
                    break
                time.sleep(0.1)
        shutil.rmtree(self.data_dir, ignore_errors=True)


@dataclass
class Results:
    latencies: dict[str, list[float]] = field(
        default_factory=lambda: {"context": [], "facts": [], "events": []}
    )
    errors: Counter[str] = field(default_factory=Counter)
    started: float = 0.0
    ended: float = 0.0


async def seed(client: httpx.AsyncClient, key: str, subjects: int) -> None:
    rng = random.Random(1)
    headers = {"Authorization": f"Bearer {key}"}
    for s in range(subjects):
        facts = [{"content": fact_text(rng, s)} for _ in range(100)]
        r = await client.post(
            "/v1/facts", json={"project_id": PROJECT, "subject_id": f"u{s}", "facts": facts}, headers=headers
        )
        r.raise_for_status()
        events = [
            {"content": fact_text(rng, s), "occurred_at": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}T10:00:00Z"}
            for i in range(20)
        ]
        r = await client.post(
            "/v1/events",
            json={"project_id": PROJECT, "subject_id": f"u{s}", "events": events},
            headers=headers,
        )
        r.raise_for_status()


async def client_loop(
    client: httpx.AsyncClient | RawClient,
    key: str,
    worker: int,
    args: argparse.Namespace,
    deadline: float,
    out: Results,
) -> None:
    rng = random.Random(1000 + worker)
    headers = {"Authorization": f"Bearer {key}"}
    n = 0
    while time.monotonic() < deadline:
        n += 1
        subject = rng.randrange(args.subjects)
        scope = {"project_id": PROJECT, "subject_id": f"u{subject}"}
        if rng.random() >= args.write_share:
            kind, url = "context", "/v1/context"
            question = (
                f"What does {NAMES[subject % len(NAMES)]} think of {rng.choice(TOPICS)}? ({worker}.{n})"
            )
            body: dict[str, Any] = {**scope, "query": question}
        elif rng.random() < 0.75:
            kind, url = "facts", "/v1/facts"
            body = {**scope, "facts": [{"content": fact_text(rng, subject)} for _ in range(2)]}
        else:
            kind, url = "events", "/v1/events"
            body = {
                **scope,
                "events": [{"content": fact_text(rng, subject), "occurred_at": "2025-06-01T09:00:00Z"}] * 2,
            }
        started = time.perf_counter()
        try:
            r = await client.post(url, json=body, headers=headers)
        except (httpx.HTTPError, RawHTTPError) as exc:
            out.errors[f"{kind}: {type(exc).__name__}"] += 1
            continue
        elapsed = time.perf_counter() - started
        if r.status_code >= 300:
            out.errors[f"{kind}: {r.status_code} {r.text[:120]}"] += 1
        else:
            out.latencies[kind].append(elapsed)


async def run(args: argparse.Namespace, base_url: str, key: str) -> dict[int, Results]:
    most = max(args.concurrency)
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client,
        RawClient(base_url) as raw,
    ):
        print(f"seeding {args.subjects} subjects x (100 facts + 20 events)...", file=sys.stderr)
        await seed(client, key, args.subjects)
        # The concurrency guard builds its arguments by hand, without --client: httpx.
        sender = raw if getattr(args, "client", "httpx") == "raw" else client
        by_level: dict[int, Results] = {}
        for level in args.concurrency:
            # A short warm-up (model, pool, plans, the level's connections) outside the window.
            warm = Results()
            warm_end = time.monotonic() + args.warmup
            await asyncio.gather(*(client_loop(sender, key, w, args, warm_end, warm) for w in range(level)))
            print(f"running {level} clients for {args.duration:.0f} s...", file=sys.stderr)
            out = Results()
            out.started = time.monotonic()
            deadline = out.started + args.duration
            await asyncio.gather(*(client_loop(sender, key, w, args, deadline, out) for w in range(level)))
            out.ended = time.monotonic()
            by_level[level] = out
        return by_level


def report(args: argparse.Namespace, level: int, out: Results) -> dict[str, Any]:
    seconds = out.ended - out.started
    every = [v for values in out.latencies.values() for v in values]
    errors = sum(out.errors.values())

    def row(values: list[float]) -> dict[str, float]:
        return {
            "requests": len(values),
            "per_s": round(len(values) / seconds, 1),
            "p50_ms": round(percentile(values, 50) * 1000, 1),
            "p95_ms": round(percentile(values, 95) * 1000, 1),
            "p99_ms": round(percentile(values, 99) * 1000, 1),
        }

    summary = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()}",
        "embedder": args.embed,
        "client": getattr(args, "client", "httpx"),
        "concurrency": level,
        "duration_s": round(seconds, 1),
        "write_share": args.write_share,
        "all": row(every),
        **{kind: row(values) for kind, values in out.latencies.items()},
        "errors": errors,
        "error_kinds": dict(out.errors),
    }
    print(
        f"\n{summary['machine']}; embedder {args.embed}; {summary['client']} client; "
        f"{level} clients for {seconds:.1f} s"
    )
    print(f"{'':9} {'requests':>9} {'req/s':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for name in ("all", "context", "facts", "events"):
        r = summary[name]
        print(
            f"{name:9} {r['requests']:>9} {r['per_s']:>7} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['p99_ms']:>8}"
        )
    print(f"errors: {errors}")
    for kind, n in out.errors.most_common():
        print(f"  {n} x {kind}")
    return summary


def add_mix_arguments(parser: argparse.ArgumentParser, *, duration: float) -> None:
    """The mix's options, which `run` reads (benchmarks/load_ab.py shares them)."""
    parser.add_argument("--duration", type=float, default=duration, help="measured seconds per level")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--write-share", type=float, default=0.2)
    parser.add_argument("--subjects", type=int, default=20)
    parser.add_argument("--embed", choices=["local", "hash"], default="local")
    parser.add_argument(
        "--client",
        choices=["httpx", "raw"],
        default="httpx",
        help="the clients' HTTP library: httpx (default, as every earlier figure) or raw "
        "(benchmarks/rawhttp.py: about 2 ms less of the load generator's CPU a call, on the "
        "server's two cores)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 4, 16], help="client counts, in turn"
    )
    add_mix_arguments(parser, duration=30.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    parser.add_argument("--url", default=None, help="an already running server (with --key) instead")
    parser.add_argument("--key", default=None)
    args = parser.parse_args(argv)

    server: Server | None = None
    try:
        if args.url:
            base_url, key = args.url, args.key
        else:
            server = Server(args.embed)
            print(f"starting haki serve ({args.embed} embedder) in {server.data_dir}...", file=sys.stderr)
            key = server.create_key()
            server.start()
            base_url = server.url
        by_level = asyncio.run(run(args, base_url, key))
    finally:
        if server is not None:
            server.stop()
    summaries = [report(args, level, out) for level, out in by_level.items()]
    first = summaries[0]
    print("\n| clients | req/s | ratio to " + str(first["concurrency"]) + " | p50 ms | p95 ms | errors |")
    print("|---|---|---|---|---|---|")
    for s in summaries:
        ratio = s["all"]["per_s"] / first["all"]["per_s"] if first["all"]["per_s"] else float("nan")
        print(
            f"| {s['concurrency']} | {s['all']['per_s']} | {ratio:.2f} | {s['all']['p50_ms']} "
            f"| {s['all']['p95_ms']} | {s['errors']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=2) + "\n")
    return 1 if any(s["errors"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
