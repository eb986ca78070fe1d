"""End-to-end latency of POST /v1/context over HTTP, against the real server and the local model.

    .venv/bin/python -m benchmarks.http_latency                 # 10k facts, seeded through the API
    .venv/bin/python -m benchmarks.http_latency --stub-ingest   # + ingest rate with the hash embedder
    .venv/bin/python -m benchmarks.http_latency --facts 1000000 --seed copy --keep
    .venv/bin/python -m benchmarks.http_latency --facts 1000000 --reuse /tmp/haki-http-XXXX  # no seeding

What it does:
1. starts `python -m service.cli serve` on a free port, with a fresh HAKI_DATA_DIR, the local
   all-MiniLM-L6-v2 embedder and no rate limit (HAKI_RATE_LIMIT_PER_MINUTE=0: the benchmark
   is one key sending thousands of requests);
2. seeds one scope: `--seed api` (default) POSTs the facts to /v1/facts in batches of 1,000
   (and 1,000 events to /v1/events), which is also the ingest measurement; `--seed copy` bulk
   loads through COPY instead (for 1M facts: embedding 1M texts with the local model would take
   hours on 2 cores), with vectors made from local-model embeddings of 20,000 distinct fact texts
   plus small noise (cos ~0.97 to their text), so queries embedded by the same model land in the
   same distribution. Either way the tables are then ANALYZEd, as autovacuum would;
3. sends POST /v1/context at concurrency 1 and 8: "uncached" passes use query texts the server
   has never embedded (a fresh text per request), "cached" passes repeat texts already embedded
   (the embedder's LRU cache answers). Reports p50/p95/p99 and requests/s, and the median time per
   stage from the Server-Timing header (embed, candidates, pack, multi_hop, episodes, trace).
   Every pass runs once per profile of `--profiles` (default `unified,facts_first`, the request's
   `profile` field, docs/spec/context-profiles.md), in the same run on the same server.
4. within each pass, the clients of `--clients` take turns request by request, each timing its
   own: `httpx` (what the Python SDK uses) and `raw` (benchmarks/rawhttp.py), whose difference
   is httpx's own cost per call on these two cores (about 2 ms), not the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.machine import cores_and_ram
from benchmarks.rawhttp import RawClient
from benchmarks.seed import (
    EVENT_TEMPLATES,
    ITEMS,
    NAMES,
    QUESTION_TEMPLATES,
    TAILS,
    TOPIC_NAMES,
    VERBS,
    fact_text,
    percentile,
)
from tests.helpers.server import free_port, spawn_serve

PROJECT = "bench-http"
SUBJECT = "user-10k"
STAGES = ("embed", "candidates", "pack", "multi_hop", "episodes", "trace")


@dataclass
class Server:
    data_dir: Path
    env: dict[str, str]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "service.cli", *args],
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def start(self) -> None:
        self.port = free_port()
        self.log_path = self.data_dir / "server.log"
        self.proc = spawn_serve(self.env, self.port, self.log_path, "--log-level", "warning", timeout=180)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@contextlib.contextmanager
def server(
    embed_provider: str, torch_threads: int | None, keep: bool, reuse: Path | None = None
) -> Iterator[tuple[Server, str]]:
    base = Path(os.environ.get("HAKI_BENCH_TMP", tempfile.gettempdir()))
    data_dir = reuse or Path(tempfile.mkdtemp(prefix="haki-http-", dir=base))
    keep = keep or reuse is not None
    env = {
        **os.environ,
        "HAKI_DATA_DIR": str(data_dir),
        "HAKI_EMBED_PROVIDER": embed_provider,
        "HAKI_RATE_LIMIT_PER_MINUTE": "0",
    }
    env.pop("HAKI_DATABASE_URL", None)
    if torch_threads is not None:
        env["HAKI_TORCH_THREADS"] = str(torch_threads)
    srv = Server(data_dir=data_dir, env=env)
    try:
        key = srv.cli("keys", "create", PROJECT, "--label", "benchmark")
        srv.start()
        yield srv, key
    finally:
        srv.stop()
        # This process joined the embedded PostgreSQL too (ANALYZE, COPY seeding): let go of it,
        # so the server stops before its directory goes.
        from service.db.embedded import release_embedded_server

        release_embedded_server(data_dir)
        if not keep:
            shutil.rmtree(data_dir, ignore_errors=True)


# --- seeding ------------------------------------------------------------------------------------


def fact_texts(n: int, seed: int = 11) -> list[str]:
    """n distinct fact texts from the benchmark vocabulary (seed.py), deterministic."""
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        text = fact_text(
            NAMES[rng.integers(len(NAMES))],
            VERBS[rng.integers(len(VERBS))],
            ITEMS[rng.integers(len(ITEMS))],
            TAILS[rng.integers(len(TAILS))],
        )
        if text in seen:  # 48 x 12 x 256 x 16 = 2.4M combinations; repeats get a suffix
            text = f"{text} ({len(out)})"
        seen.add(text)
        out.append(text)
    return out


def event_texts(n: int, seed: int = 12) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        EVENT_TEMPLATES[rng.integers(len(EVENT_TEMPLATES))].format(
            name=NAMES[rng.integers(len(NAMES))], item=ITEMS[rng.integers(len(ITEMS))]
        )
        + f" #{i}"
        for i in range(n)
    ]


def query_texts(n: int, seed: int, exclude: set[str]) -> list[str]:
    """n distinct query texts, none in `exclude` (so a pass never hits the embedding cache)."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    seen = set(exclude)
    while len(out) < n:
        item = int(rng.integers(len(ITEMS)))
        text = QUESTION_TEMPLATES[int(rng.integers(len(QUESTION_TEMPLATES)))].format(
            name=NAMES[rng.integers(len(NAMES))],
            item=ITEMS[item],
            tail=TAILS[rng.integers(len(TAILS))],
            verb=VERBS[rng.integers(len(VERBS))],
            topic=TOPIC_NAMES[item // 8],
        )
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


async def seed_api(client: httpx.AsyncClient, key: str, n_facts: int, n_events: int) -> dict[str, float]:
    """POST /v1/facts in batches of 1,000 (and the events); returns the ingest rates."""
    headers = {"Authorization": f"Bearer {key}"}
    texts = fact_texts(n_facts)
    start = time.perf_counter()
    for i in range(0, n_facts, 1000):
        body = {
            "project_id": PROJECT,
            "subject_id": SUBJECT,
            "facts": [{"content": t} for t in texts[i : i + 1000]],
        }
        r = await client.post("/v1/facts", json=body, headers=headers, timeout=600)
        r.raise_for_status()
    facts_s = time.perf_counter() - start
    start = time.perf_counter()
    etexts = event_texts(n_events)
    for i in range(0, n_events, 1000):
        body = {
            "project_id": PROJECT,
            "subject_id": SUBJECT,
            "events": [{"content": t, "occurred_at": "2025-05-01T12:00:00Z"} for t in etexts[i : i + 1000]],
        }
        r = await client.post("/v1/events", json=body, headers=headers, timeout=600)
        r.raise_for_status()
    events_s = time.perf_counter() - start
    return {
        "facts": n_facts,
        "facts_seconds": facts_s,
        "facts_per_second": n_facts / facts_s,
        "events": n_events,
        "events_per_second": n_events / events_s if events_s else 0.0,
    }


async def seed_copy(
    data_dir: Path, n_facts: int, n_events: int, torch_threads: int | None
) -> dict[str, float]:
    """COPY n_facts facts of one scope: local-model vectors of 20,000 distinct texts + noise."""
    from pgvector import Vector

    from benchmarks.seed import FACT_COLUMNS, NOW
    from benchmarks.sql import load_bench_queries
    from service.db import connect, init_connection
    from service.db.embedded import embedded_url
    from service.db.migrations import migrate
    from service.embedding.embedder import LocalEmbedder
    from service.ids import uuid7
    from service.settings import Settings

    settings = Settings(
        data_dir=data_dir, database_url=embedded_url(data_dir), torch_threads=torch_threads or 0
    )
    distinct = min(n_facts, 20_000)
    texts = fact_texts(distinct)
    embedder = LocalEmbedder(settings)
    t0 = time.perf_counter()
    base = np.stack(await embedder.embed(texts))
    await embedder.aclose()
    embed_s = time.perf_counter() - t0
    rng = np.random.default_rng(5)
    conn = await connect(settings)
    await migrate(conn)
    await init_connection(conn)
    b = load_bench_queries()
    await b.bench_set_maintenance(conn, maintenance_work_mem="4GB", parallel_workers=1)
    await b.bench_stash_indexes(conn)
    stashed = [dict(r) async for r in b.bench_stashed_indexes(conn)]
    t0 = time.perf_counter()
    from datetime import timedelta

    for start in range(0, n_facts, 20_000):
        n = min(20_000, n_facts - start)
        idx = (np.arange(start, start + n) % distinct).astype(np.int64)
        noise = rng.standard_normal((n, base.shape[1])).astype(np.float32)
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        vecs = base[idx] + (0.25 if n_facts > distinct else 0.0) * noise
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        ages = rng.exponential(120.0, n)
        records = []
        for j in range(n):
            recorded = NOW - timedelta(days=float(ages[j]))
            text = texts[idx[j]] if start + j < distinct else f"{texts[idx[j]]} [{start + j}]"
            records.append(
                (
                    PROJECT,
                    uuid7(),
                    SUBJECT,
                    text,
                    None,
                    "active",
                    None,
                    None,
                    recorded,
                    "stable",
                    None,
                    Vector(vecs[j]),
                    None,  # recorded_to: active
                )
            )
        await conn.copy_records_to_table("facts", records=records, columns=FACT_COLUMNS)
        print(f"  copied {start + n} facts", file=sys.stderr)
    copy_s = time.perf_counter() - t0
    index_s: dict[str, float] = {}
    for ix in stashed:
        t1 = time.perf_counter()
        await b.bench_restore_index(conn, index_name=ix["index_name"])
        index_s[ix["index_name"]] = time.perf_counter() - t1
        print(f"  built {ix['index_name']} in {index_s[ix['index_name']]:.1f}s", file=sys.stderr)
    await conn.close()
    return {"embed_seconds": embed_s, "copy_seconds": copy_s, **{f"build_{k}": v for k, v in index_s.items()}}


async def analyze(data_dir: Path) -> None:
    from benchmarks.sql import load_bench_queries
    from service.db import connect
    from service.db.embedded import embedded_url
    from service.settings import Settings

    settings = Settings(data_dir=data_dir, database_url=embedded_url(data_dir))
    conn = await connect(settings)
    try:
        b = load_bench_queries()
        await b.bench_set_maintenance(conn, maintenance_work_mem="256MB", parallel_workers=1)
        await b.bench_vacuum_analyze(conn)
    finally:
        await conn.close()


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Pass:
    name: str
    concurrency: int
    profile: str
    client: str = "httpx"
    latencies_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    wall_s: float = 0.0
    errors: int = 0

    def row(self) -> dict[str, Any]:
        lat = self.latencies_ms
        return {
            "profile": self.profile,
            "pass": self.name,
            "client": self.client,
            "concurrency": self.concurrency,
            "requests": len(lat),
            "errors": self.errors,
            "p50_ms": percentile(lat, 50),
            "p95_ms": percentile(lat, 95),
            "p99_ms": percentile(lat, 99),
            "req_per_s": len(lat) / self.wall_s if self.wall_s else 0.0,
            **{f"{s}_p50_ms": percentile(v, 50) for s, v in self.stages.items() if v},
        }


def parse_server_timing(header: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in header.split(","):
        name, _, rest = part.strip().partition(";")
        if rest.startswith("dur="):
            out[name] = float(rest[4:])
    return out


# The HTTP clients a pass can be timed with (--clients): httpx, what the Python SDK uses, and
# benchmarks/rawhttp.py, without httpx's own ~2 ms a call. Both answer `post(path, json=, headers=)`.
CLIENTS = ("httpx", "raw")
Client = httpx.AsyncClient | RawClient


def client_names(value: str) -> list[str]:
    """An argparse type: a comma-separated list of CLIENTS."""
    names = [x.strip() for x in value.split(",") if x.strip()]
    if unknown := sorted(set(names) - set(CLIENTS)):
        raise argparse.ArgumentTypeError(f"unknown {unknown}; choose among {', '.join(CLIENTS)}")
    return names


async def run_pass(
    clients: dict[str, Client], key: str, name: str, texts: list[str], concurrency: int, profile: str
) -> list[Pass]:
    """The pass's requests, sent by the clients in turn (request i by client i mod n), each
    timed by the client that sent it: side by side on the same server at the same moment. The
    requests per second are the pass's, every client's requests together."""
    results = {c: Pass(name, concurrency, profile, client=c) for c in clients}
    turns = list(clients.items())
    headers = {"Authorization": f"Bearer {key}"}
    queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    for i, t in enumerate(texts):
        queue.put_nowait((i, t))

    async def worker() -> None:
        while True:
            try:
                i, text = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            client_name, client = turns[i % len(turns)]
            result = results[client_name]
            body = {"project_id": PROJECT, "subject_id": SUBJECT, "query": text, "profile": profile}
            t0 = time.perf_counter()
            r = await client.post("/v1/context", json=body, headers=headers)
            elapsed = (time.perf_counter() - t0) * 1000
            if r.status_code != 200:
                result.errors += 1
                continue
            result.latencies_ms.append(elapsed)
            for stage, ms in parse_server_timing(r.headers.get("server-timing", "")).items():
                result.stages.setdefault(stage, []).append(ms)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall_s = time.perf_counter() - start
    answered = sum(len(r.latencies_ms) for r in results.values())
    for r in results.values():
        # Each row's requests over its share of the pass: the pass's rate, in every row.
        r.wall_s = wall_s * len(r.latencies_ms) / max(1, answered)
    return list(results.values())


def machine() -> str:
    return f"{cores_and_ram()}, load {os.getloadavg()[0]:.2f} at start"


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = [
        "profile",
        "pass",
        "client",
        "concurrency",
        "requests",
        "errors",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "req_per_s",
    ]
    cols += [f"{s}_p50_ms" for s in STAGES]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            cells.append(f"{v:.2f}" if isinstance(v, float) else str(v))
        print("| " + " | ".join(cells) + " |")


async def measure(srv: Server, key: str, args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine(), "facts": args.facts, "clients": args.clients}
    async with (
        httpx.AsyncClient(base_url=srv.url, timeout=60) as client,
        RawClient(srv.url) as raw,
    ):
        if args.reuse is None and args.seed == "api":
            report["ingest_local"] = await seed_api(client, key, args.facts, args.events)
            print(f"ingest (local model): {report['ingest_local']}", file=sys.stderr)
        await analyze(srv.data_dir)
        available: dict[str, Client] = {"httpx": client, "raw": raw}
        clients = {name: available[name] for name in args.clients}
        used: set[str] = set()
        warm = query_texts(args.warmup, seed=99, exclude=used)
        used |= set(warm)
        for profile in args.profiles:
            await run_pass(clients, key, "warm-up", warm, 1, profile)
        rows = []
        for conc in (1, 8):
            for i, profile in enumerate(args.profiles):
                # Fresh texts for each profile's uncached pass: none of them was embedded before.
                fresh = query_texts(args.queries, seed=100 + conc + 1000 * i, exclude=used)
                used |= set(fresh)
                uncached = await run_pass(clients, key, "uncached", fresh, conc, profile)
                cached = await run_pass(clients, key, "cached", fresh[: min(len(fresh), 1500)], conc, profile)
                rows += [p.row() for p in (*uncached, *cached)]
                print(f"  done {profile}, concurrency {conc}", file=sys.stderr)
        report["passes"] = rows
    return report


async def stub_ingest(args: argparse.Namespace) -> dict[str, float]:
    with server("hash", None, args.keep) as (srv, key):
        async with httpx.AsyncClient(base_url=srv.url, timeout=600) as client:
            return await seed_api(client, key, args.facts if args.facts <= 100_000 else 10_000, 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--facts", type=int, default=10_000)
    p.add_argument("--events", type=int, default=1_000)
    p.add_argument("--seed", choices=("api", "copy"), default="api")
    p.add_argument("--queries", type=int, default=300, help="requests per uncached pass (default 300)")
    p.add_argument("--torch-threads", type=int, default=None, help="HAKI_TORCH_THREADS of the server")
    p.add_argument("--stub-ingest", action="store_true", help="also measure ingest with the hash embedder")
    p.add_argument(
        "--profiles",
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        default=["unified", "facts_first"],
        help="comma-separated profiles of the request, each measured in turn (default: unified,facts_first)",
    )
    p.add_argument(
        "--clients",
        type=client_names,
        default=list(CLIENTS),
        help="comma-separated HTTP clients that take turns within each pass, each with its own rows: "
        "httpx (what the Python SDK uses) and raw (benchmarks/rawhttp.py, the server's latency "
        "without httpx's own ~2 ms); default: httpx,raw",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    p.add_argument(
        "--warmup",
        type=int,
        default=50,
        help="warm-up requests per profile before the passes (default 50; a 1M scope's pages need more)",
    )
    p.add_argument("--keep", action="store_true", help="keep the server's data directory")
    p.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="measure a data directory kept by an earlier --keep run (no seeding; --facts only labels it)",
    )
    args = p.parse_args(argv)
    report: dict[str, Any] = {}
    if args.stub_ingest:
        report["ingest_stub"] = asyncio.run(stub_ingest(args))
        print(f"ingest (hash embedder): {report['ingest_stub']}", file=sys.stderr)
    with server("local", args.torch_threads, args.keep, args.reuse) as (srv, key):
        if args.reuse is None and args.seed == "copy":
            srv.stop()
            report["seed_copy"] = asyncio.run(
                seed_copy(srv.data_dir, args.facts, args.events, args.torch_threads)
            )
            srv.start()
        report.update(asyncio.run(measure(srv, key, args)))
    print(f"\nPOST /v1/context, {args.facts} facts in one scope, {report['machine']}\n")
    print_table(report["passes"])
    for k in ("ingest_stub", "ingest_local", "seed_copy"):
        if k in report:
            print(
                f"\n{k}: "
                + ", ".join(
                    f"{a}={b:.1f}" if isinstance(b, float) else f"{a}={b}" for a, b in report[k].items()
                )
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
