"""Micro-batching of query embeddings: throughput and latency by concurrency and batch cap.

    .venv/bin/python benchmarks/embed_batching.py                    # backend auto, caps 1,4,8,16,32
    .venv/bin/python benchmarks/embed_batching.py --backend torch --calls 200

Drives LocalEmbedder.embed(purpose="query") from C concurrent callers, each embedding fresh
(uncached) question-like texts one at a time, as concurrent POST /v1/context calls do. For each
HAKI_EMBED_QUERY_MAX_BATCH cap (1 = no batching), reports queries/s, p50 and p95 per call, and
the mean texts per forward pass. The caps run interleaved, round after round, on one loaded model,
so the ratios hold on a noisy shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from service.embedding.embedder import LocalEmbedder  # noqa: E402
from service.settings import Settings  # noqa: E402


async def run(
    embedder: LocalEmbedder, concurrency: int, calls: int, tag: str
) -> tuple[float, list[float], float]:
    latencies: list[float] = []
    counter = iter(range(calls))
    passes_before = embedder.scheduler.passes

    async def caller(c: int) -> None:
        for i in counter:
            text = f"What did speaker {c} say about the {tag} trip number {i} to the lake last summer?"
            t0 = time.perf_counter()
            await embedder.embed([text], purpose="query", project=f"p{c % 4}")
            latencies.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in range(concurrency)))
    elapsed = time.perf_counter() - t0
    passes = embedder.scheduler.passes - passes_before
    return calls / elapsed, latencies, calls / max(1, passes)


async def main_async(args: argparse.Namespace) -> None:
    caps = [int(c) for c in args.caps.split(",")]
    embedder = LocalEmbedder(Settings(embed_provider="local", embed_backend=args.backend))
    await embedder.load()
    print(f"backend {embedder.backend}; {args.calls} calls per cell; {args.rounds} rounds interleaved")
    results: dict[tuple[int, int], list[tuple[float, list[float], float]]] = {}
    for r in range(args.rounds):
        for concurrency in (1, 4, 16):
            for cap in caps:
                embedder.scheduler.query_max_batch = cap
                out = await run(embedder, concurrency, args.calls, f"r{r}c{concurrency}b{cap}")
                results.setdefault((concurrency, cap), []).append(out)
    print("| clients | max batch | queries/s | p50 ms | p95 ms | texts per pass |")
    print("|---:|---:|---:|---:|---:|---:|")
    for (concurrency, cap), cells in results.items():
        qps = statistics.median(c[0] for c in cells)
        lat = sorted(x for c in cells for x in c[1])
        per_pass = statistics.mean(c[2] for c in cells)
        p95 = lat[int(0.95 * (len(lat) - 1))]
        p50 = statistics.median(lat)
        print(f"| {concurrency} | {cap} | {qps:.0f} | {p50:.1f} | {p95:.1f} | {per_pass:.1f} |")
    await embedder.aclose()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--caps", default="1,4,8,16,32")
    p.add_argument("--calls", type=int, default=160)
    p.add_argument("--rounds", type=int, default=2)
    asyncio.run(main_async(p.parse_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
