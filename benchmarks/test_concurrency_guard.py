"""CI guard: throughput must rise with concurrent clients, not fall.

`haki serve` on its own embedded PostgreSQL with the real all-MiniLM-L6-v2, the mixed load of
benchmarks/load.py (80% fresh context questions, 20% writes) at one client, then at 16, in one
run on one server. The guard is the ratio of the two throughputs, so a slow or busy machine
moves both sides alike; a timing assert in a unit test would not survive 2 noisy cores.

Target: 16 clients >= 1.8x one client, 0 errors, p95 at 16 clients <= 250 ms;
measured on a quiet machine 1.71x and p95 274 ms, and 1.73x under a load average of 5 (before
the embedder's micro-batching the throughput fell with clients: docs/performance.md). The guard
catches a return to that, with a margin for CI noise: >= 1.4x, p95 <= 600 ms, 0 errors.
HAKI_BENCH_MIN_CONCURRENCY_RATIO and HAKI_BENCH_MAX_P95_MS override it, HAKI_BENCH_LOAD_SECONDS
sets the measured window.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from benchmarks.load import Server, report, run

GUARD_MIN_RATIO = float(os.environ.get("HAKI_BENCH_MIN_CONCURRENCY_RATIO", "1.4"))
GUARD_MAX_P95_MS = float(os.environ.get("HAKI_BENCH_MAX_P95_MS", "600"))
SECONDS = float(os.environ.get("HAKI_BENCH_LOAD_SECONDS", "12"))


def test_throughput_rises_with_clients() -> None:
    args = argparse.Namespace(
        concurrency=[1, 16], duration=SECONDS, warmup=3.0, write_share=0.2, subjects=10, embed="local"
    )
    server = Server("local")
    try:
        key = server.create_key()
        server.start()
        by_level = asyncio.run(run(args, server.url, key))
    finally:
        server.stop()
    one, many = (report(args, level, by_level[level]) for level in (1, 16))
    assert one["errors"] == 0 and many["errors"] == 0, (one["error_kinds"], many["error_kinds"])
    ratio = many["all"]["per_s"] / one["all"]["per_s"]
    print(f"\nthroughput 16 clients / 1 client: {ratio:.2f} (guard {GUARD_MIN_RATIO})")
    assert ratio >= GUARD_MIN_RATIO, f"16 clients reach only {ratio:.2f}x the throughput of one"
    assert many["all"]["p95_ms"] <= GUARD_MAX_P95_MS, many["all"]
