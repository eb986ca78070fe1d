"""`haki import` facts/s over the OpenAI-compatible embedder, by --concurrency.

    .venv/bin/python -m benchmarks.import_speed          # 10k facts, concurrency 1 and 2, 2 rounds
    .venv/bin/python -m benchmarks.import_speed --facts 5000 --concurrency 1,2,4 --rounds 3

Starts benchmarks/fake_openai.py (its defaults: 5 ms + 0.0625 ms a text, 8 requests at once) and
a throw-away embedded PostgreSQL, writes a JSONL file of --facts facts, and imports it in-process
(service.memory.importer.run_import: the code behind `haki import`, local writer, default settings
but the `openai` provider) once per concurrency value and round, interleaved, each into a
subject of its own whose scope bucket no other run uses: every run builds a graph of the same
size. facts/s is the lines over the import's wall time, start-up included (one pool, one
embedder check).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.ingest_openai import fact_text
from benchmarks.sql import load_bench_queries
from service.db import connect
from service.db.embedded import embedded_url, release_embedded_server
from service.db.migrations import migrate
from service.memory import importer
from service.settings import Settings
from tests.helpers.server import REPO, free_port

PROJECT = "import-speed"


async def subjects_in_distinct_buckets(conn: Any, n: int) -> list[str]:
    """`n` subject ids of PROJECT whose scopes hash to `n` different buckets (migration 0008)."""
    candidates = [f"subject-{i}" for i in range(256)]
    queries = load_bench_queries()
    rows = [r async for r in queries.bench_scope_buckets(conn, project_id=PROJECT, subject_ids=candidates)]
    chosen: dict[int, str] = {}
    for row in rows:
        chosen.setdefault(row["bucket"], row["subject_id"])
    if len(chosen) < n:
        raise SystemExit(f"{n} runs (--rounds x --concurrency values), but only {len(chosen)} scope buckets")
    return [chosen[b] for b in sorted(chosen)][:n]


async def run(args: argparse.Namespace, fake_url: str) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="haki-import-speed-"))
    try:
        settings = Settings(
            data_dir=base,
            database_url=embedded_url(base),
            embed_provider="openai",
            embed_base_url=fake_url,
        )
        plan = [(r, c) for r in range(args.rounds) for c in args.concurrency]
        conn = await connect(settings)
        try:
            await migrate(conn)
            subjects = await subjects_in_distinct_buckets(conn, len(plan))
        finally:
            await conn.close()
        rng = random.Random(7)
        path = base / "facts.jsonl"
        path.write_text("".join(json.dumps({"content": fact_text(rng, i)}) + "\n" for i in range(args.facts)))
        rates: dict[int, list[float]] = {c: [] for c in args.concurrency}
        for (round_no, concurrency), subject in zip(plan, subjects, strict=True):
            opts = importer.ImportOptions(
                path=path,
                project_id=PROJECT,
                subject_id=subject,
                restart=True,
                show_progress=False,
                concurrency=concurrency,
            )
            start = time.perf_counter()
            status = await importer.run_import(settings, opts)
            took = time.perf_counter() - start
            if status != importer.Exit.OK:
                raise SystemExit(f"import of round {round_no}, concurrency {concurrency}: exit {status}")
            rates[concurrency].append(args.facts / took)
            print(
                f"round {round_no} concurrency {concurrency}: {args.facts / took:,.0f} facts/s",
                file=sys.stderr,
            )
        return {
            "facts": args.facts,
            "facts_per_second": {
                str(c): {"median": statistics.median(v), "runs": [round(x) for x in v]}
                for c, v in rates.items()
            },
        }
    finally:
        release_embedded_server(base)
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--facts", type=int, default=10_000, help="lines of the imported file")
    p.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 2],
        help="the import's --concurrency values, comma-separated",
    )
    p.add_argument("--rounds", type=int, default=2, help="runs of each value, interleaved")
    args = p.parse_args()
    fake_port = free_port()
    fake = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "fake_openai.py"), "--port", str(fake_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert fake.stdout is not None
        fake.stdout.readline()  # ready
        report = asyncio.run(run(args, f"http://127.0.0.1:{fake_port}/v1"))
    finally:
        fake.terminate()
        fake.wait(timeout=30)
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(report)).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
