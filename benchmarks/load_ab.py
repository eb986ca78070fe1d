"""Two server settings side by side under benchmarks.load's mix: servers started in turn.

    .venv/bin/python -m benchmarks.load_ab --a HAKI_EMBED_WRITE_MAX_WAIT_MS=100 \\
        --b HAKI_EMBED_WRITE_MAX_WAIT_MS=25 --rounds 4            # about 9 minutes
    .venv/bin/python -m benchmarks.load_ab --b HAKI_EMBED_QUERY_MAX_BATCH=16 --embed hash \\
        --duration 5 --rounds 1                                      # a quick smoke run

One run of benchmarks/load.py at one concurrency is noisier than most scheduling changes on a
shared 2-core machine (one server's throughput ranged 90-125 req/s between runs in a row). This
measures two settings in pairs: each round starts a fresh server (its own data dir and embedded
PostgreSQL) with side A's settings, seeds it and runs the mix, then does the same with side B's,
the order alternating by round so that neither side always runs first. It prints each run's row
and, per side, the median of the runs' req/s and of each kind's p50 and p95. Compare the pairs and
the medians, not one run. docs/performance.md ("Sixth session") has a result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import load

KINDS = ("all", "context", "facts", "events")


def setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("HAKI_"):
        raise argparse.ArgumentTypeError(f"expected HAKI_NAME=value, got {text!r}")
    return name, value


def label(env: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items()) or "defaults"


def one_run(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """A fresh server with `env`, seeded, under the mix at args.concurrency: load.report's summary."""
    server = load.Server(args.embed, env=env)
    try:
        key = server.create_key()
        server.start()
        by_level = asyncio.run(load.run(args, server.url, key))
    finally:
        server.stop()
    level = args.concurrency[0]
    return load.report(args, level, by_level[level])


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    out = {"req/s": statistics.median(r["all"]["per_s"] for r in runs)}
    for kind in KINDS:
        for p in ("p50_ms", "p95_ms"):
            out[f"{kind} {p[:3]}"] = statistics.median(r[kind][p] for r in runs)
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--a", type=setting, action="append", default=[], help="side A: HAKI_NAME=value")
    parser.add_argument("--b", type=setting, action="append", default=[], help="side B: HAKI_NAME=value")
    parser.add_argument("--rounds", type=int, default=4, help="pairs of runs")
    parser.add_argument("--concurrency", type=int, default=16)
    load.add_mix_arguments(parser, duration=20.0)
    parser.add_argument("--json", type=Path, default=None, help="also write every run's summary here")
    args = parser.parse_args(argv)
    if not args.a and not args.b:
        parser.error("give --a and/or --b settings (a side without any runs the defaults)")
    args.concurrency = [args.concurrency]
    sides = {"A": dict(args.a), "B": dict(args.b)}

    runs: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
            print(f"round {r + 1}, side {side}: {label(sides[side])}", file=sys.stderr, flush=True)
            runs[side].append({"side": side, "round": r + 1, **one_run(args, sides[side])})

    print(f"\n{args.rounds} runs a side, {args.concurrency[0]} clients, {args.duration:.0f} s each; medians")
    table = {side: medians(side_runs) for side, side_runs in runs.items()}
    columns = list(table["A"])
    print("| side | settings | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for side, row in table.items():
        cells = [f"{row[c]:g}" for c in columns]
        print(f"| {side} | {label(sides[side])} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({"sides": sides, "runs": runs, "medians": table}, indent=2))
    return 1 if any(row["errors"] for row in table.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
