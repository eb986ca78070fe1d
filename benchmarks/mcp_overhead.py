"""What an MCP `recall` costs over POST /v1/context + render, measured in one run on one server.

    .venv/bin/python -m benchmarks.mcp_overhead [--calls 100] [--facts 200]

Starts `haki serve` (hash embedder, no rate limit, a fresh data directory), writes `--facts`
facts about one subject, then alternates, call after call, between the three ways to get the same
block: the SDK (`render(haki.context(...))` over HTTP), the `recall` tool over streamable HTTP
(`/mcp`, one MCP session, the SDK's own client) and the `recall` tool over stdio (`haki mcp`, one
session). Alternating keeps the machine's noise the same for the three. Prints the median and p95
of each and the medians' ratios to the SDK's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from haki_client import AsyncHaki, render
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers.server import REPO, running_server

QUERIES = ["Where does Alice work?", "What does Alice eat?", "Who are Alice's friends?"]


def summary(name: str, times: list[float], base: float | None) -> str:
    median = statistics.median(times) * 1000
    p95 = sorted(times)[int(0.95 * (len(times) - 1))] * 1000
    ratio = f"  {median / base:.2f}x" if base else ""
    return f"{name:<24} median {median:7.2f} ms  p95 {p95:7.2f} ms{ratio}"


async def run(calls: int, facts: int) -> None:
    with running_server(
        Path(tempfile.mkdtemp(prefix="haki-mcp-bench-")), HAKI_RATE_LIMIT_PER_MINUTE="0"
    ) as s:
        key = s.create_key("bench")
        async with AsyncHaki(s.url, key, project_id="bench", timeout=60) as haki:
            texts = [
                f"Alice fact number {i}: she likes topic {i % 17} and works on project {i % 5}."
                for i in range(facts)
            ]
            await haki.write_facts("alice", texts)
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "service.cli", "mcp"],
                cwd=str(REPO),
                env={"HAKI_URL": s.url, "HAKI_API_KEY": key},
            )
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
                streamable_http_client(f"{s.url}/mcp", http_client=http) as (hr, hw),
                ClientSession(hr, hw) as over_http,
                stdio_client(params) as (sr, sw),
                ClientSession(sr, sw) as over_stdio,
            ):
                await over_http.initialize()
                await over_stdio.initialize()
                times: dict[str, list[float]] = {"sdk": [], "mcp http": [], "mcp stdio": []}
                for i in range(calls + 5):  # the first 5 warm up
                    query = QUERIES[i % len(QUERIES)]
                    args = {"subject_id": "alice", "query": query}
                    t0 = time.perf_counter()
                    render(await haki.context("alice", query))
                    t1 = time.perf_counter()
                    r1 = await over_http.call_tool("recall", args)
                    t2 = time.perf_counter()
                    r2 = await over_stdio.call_tool("recall", args)
                    t3 = time.perf_counter()
                    assert not r1.is_error and not r2.is_error
                    if i >= 5:
                        times["sdk"].append(t1 - t0)
                        times["mcp http"].append(t2 - t1)
                        times["mcp stdio"].append(t3 - t2)
    base = statistics.median(times["sdk"]) * 1000
    print(f"{calls} calls each, {facts} facts, hash embedder")
    for name, values in times.items():
        print(summary(name, values, None if name == "sdk" else base))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--facts", type=int, default=200)
    args = p.parse_args()
    asyncio.run(run(args.calls, args.facts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
