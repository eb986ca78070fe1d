"""Two checkouts of Haki side by side over HTTP: the same data, fresh queries, requests interleaved.

    .venv/bin/python -m benchmarks.http_ab --reuse /tmp/haki-http-XXXX --a /work/main --b . --queries 300

A change that moves a millisecond is lost in the noise of two runs one after the other on a
shared 2-core machine; interleaved request by request against two servers, both see the same
load. The data directory (kept by `benchmarks.http_latency --keep`) is copied once per side, so
each server has its own embedded PostgreSQL with identical data; each checkout serves with its
own `.venv`. Every query text is fresh (never embedded before by either server), and the order
of the two sides alternates from one query to the next. Prints p50/p95 per side and profile,
the Server-Timing stages' medians, and the B/A ratio of the p50s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.http_latency import PROJECT, SUBJECT, parse_server_timing, query_texts
from benchmarks.seed import percentile
from tests.helpers.server import free_port, spawn_serve, stop_process


class Side:
    def __init__(self, name: str, repo: Path, data_dir: Path, env: dict[str, str]) -> None:
        self.name, self.repo, self.data_dir = name, repo, data_dir
        self.python = str(repo / ".venv" / "bin" / "python")
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HAKI_")},
            "HAKI_DATA_DIR": str(data_dir),
            "HAKI_EMBED_PROVIDER": "local",
            "HAKI_RATE_LIMIT_PER_MINUTE": "0",
            **env,
        }
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.key = ""
        self.latency: dict[str, list[float]] = {}
        self.stages: dict[str, dict[str, list[float]]] = {}

    def start(self) -> None:
        self.key = subprocess.run(
            [self.python, "-m", "service.cli", "keys", "create", PROJECT],
            cwd=self.repo,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        self.proc = spawn_serve(
            self.env,
            self.port,
            self.data_dir / "ab-server.log",
            "--log-level",
            "warning",
            timeout=180,
            python=self.python,
            checkout=self.repo,
        )

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    async def ask(self, client: httpx.AsyncClient, text: str, profile: str, record: bool) -> None:
        t0 = time.perf_counter()
        r = await client.post(
            f"http://127.0.0.1:{self.port}/v1/context",
            json={"project_id": PROJECT, "subject_id": SUBJECT, "query": text, "profile": profile},
            headers={"Authorization": f"Bearer {self.key}"},
        )
        elapsed = (time.perf_counter() - t0) * 1000
        r.raise_for_status()
        if record:
            self.latency.setdefault(profile, []).append(elapsed)
            for stage, ms in parse_server_timing(r.headers.get("server-timing", "")).items():
                self.stages.setdefault(profile, {}).setdefault(stage, []).append(ms)


async def run(sides: list[Side], profiles: list[str], queries: int, warmup: int) -> None:
    texts = query_texts(warmup + queries * len(profiles), seed=4242, exclude=set())
    async with httpx.AsyncClient(timeout=60) as client:
        for i, text in enumerate(texts):
            profile = profiles[i % len(profiles)]
            order = sides if (i // len(profiles)) % 2 == 0 else sides[::-1]
            for side in order:
                await side.ask(client, text, profile, record=i >= warmup)


def report(sides: list[Side], profiles: list[str]) -> None:
    stages = sorted({s for side in sides for p in side.stages.values() for s in p})
    print("| profile | side | n | p50 ms | p95 ms | " + " | ".join(f"{s} p50" for s in stages) + " |")
    print("|---|---|---:|---:|---:|" + "---:|" * len(stages))
    for profile in profiles:
        for side in sides:
            lat = side.latency.get(profile, [])
            cells = [f"{percentile(side.stages.get(profile, {}).get(s, [0.0]), 50):.2f}" for s in stages]
            print(
                f"| {profile} | {side.name} | {len(lat)} | {percentile(lat, 50):.2f} | "
                f"{percentile(lat, 95):.2f} | " + " | ".join(cells) + " |"
            )
        a, b = (percentile(side.latency.get(profile, []), 50) for side in sides)
        print(f"| {profile} | B/A p50 | | **{b / a:.3f}** | | " + " | " * len(stages))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reuse", type=Path, required=True, help="a data dir kept by http_latency --keep")
    p.add_argument("--a", type=Path, required=True, help="checkout A (the reference)")
    p.add_argument("--b", type=Path, required=True, help="checkout B (the change)")
    p.add_argument("--queries", type=int, default=300, help="fresh queries per profile")
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--profiles", default="unified,facts_first")
    p.add_argument("--a-env", action="append", default=[], help="KEY=VALUE for side A's server (repeatable)")
    p.add_argument("--b-env", action="append", default=[], help="KEY=VALUE for side B's server (repeatable)")
    args = p.parse_args(argv)
    profiles = args.profiles.split(",")
    base = Path(tempfile.mkdtemp(prefix="haki-ab-", dir=os.environ.get("HAKI_BENCH_TMP")))
    sides: list[Side] = []
    try:
        for name, repo, env in (("A", args.a.resolve(), args.a_env), ("B", args.b.resolve(), args.b_env)):
            copy = base / name
            # cp -a: PostgreSQL wants its data directory's modes and owner as they were.
            subprocess.run(["cp", "-a", str(args.reuse), str(copy)], check=True)
            sides.append(Side(name, repo, copy, dict(kv.split("=", 1) for kv in env)))
        for side in sides:
            side.start()
        load = os.getloadavg()[0]
        print(f"A {args.a} {args.a_env}, B {args.b} {args.b_env}, load {load:.2f}", file=sys.stderr)
        asyncio.run(run(sides, profiles, args.queries, args.warmup))
        report(sides, profiles)
    finally:
        for side in sides:
            side.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
