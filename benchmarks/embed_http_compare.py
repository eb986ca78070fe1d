"""The embedding layer's effect over HTTP: benchmarks/load.py against two servers side by side.

    .venv/bin/python -m benchmarks.embed_http_compare               # 15 s cells, concurrency 1 and 16, twice

Starts two `haki serve` on the local model at once, each with its own data dir:
- `shipped`: every default (HAKI_EMBED_BACKEND=auto, HAKI_EMBED_QUERY_MAX_BATCH=8);
- `main-like`: HAKI_EMBED_BACKEND=torch and HAKI_EMBED_QUERY_MAX_BATCH=1 (each query its own
  torch forward pass, as before micro-batching);
then runs benchmarks/load.py (80 % fresh context calls, 20 % small writes; its levels of
--concurrency one after another) against each in turn, for --rounds rounds, and prints the
context rows of each cell.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.load import PROJECT  # noqa: E402
from tests.helpers.server import free_port, spawn_serve  # noqa: E402

CONFIGS = {
    "shipped": {},
    "main-like": {"HAKI_EMBED_BACKEND": "torch", "HAKI_EMBED_QUERY_MAX_BATCH": "1"},
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--concurrency", default="1,16")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    servers: dict[str, tuple[str, str]] = {}
    procs: list[subprocess.Popen[bytes]] = []
    dirs: list[Path] = []
    print("| server | clients | context req/s | p50 ms | p95 ms | p99 ms | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    try:
        for name, extra in CONFIGS.items():
            data_dir = Path(tempfile.mkdtemp(prefix="haki-embed-http-"))
            dirs.append(data_dir)
            env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
            env.update(
                HAKI_DATA_DIR=str(data_dir),
                HAKI_EMBED_PROVIDER="local",
                HAKI_RATE_LIMIT_PER_MINUTE="0",
                PYTHONUNBUFFERED="1",
                **extra,
            )
            key = subprocess.run(
                [sys.executable, "-m", "service.cli", "keys", "create", PROJECT],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            port = free_port()
            procs.append(
                spawn_serve(env, port, data_dir / "serve.log", "--log-level", "warning", timeout=300)
            )
            servers[name] = (f"http://127.0.0.1:{port}", key)
        for _ in range(args.rounds):
            for name, (url, key) in servers.items():
                out = Path(tempfile.mkstemp(suffix=".json")[1])
                done = subprocess.run(
                    [
                        *(sys.executable, "-m", "benchmarks.load", "--url", url, "--key", key),
                        *("--concurrency", *args.concurrency.split(",")),
                        *("--duration", str(args.duration)),
                        *("--warmup", "3", "--json", str(out)),
                    ],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if not out.read_text().strip():
                    raise RuntimeError(
                        f"benchmarks/load.py failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
                    )
                summaries = json.loads(out.read_text())
                out.unlink()
                for summary in summaries:  # one per concurrency level
                    c = summary["context"]
                    print(
                        f"| {name} | {summary['concurrency']} | {c['per_s']:.1f} | {c['p50_ms']:.1f} | "
                        f"{c['p95_ms']:.1f} | {c['p99_ms']:.1f} | {summary['errors']} |",
                        flush=True,
                    )
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for data_dir in dirs:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
