"""Runs a command against a fresh `haki serve`, then stops the server.

    .venv/bin/python scripts/with_haki_server.py [--project P] -- COMMAND [ARGS...]

The server listens on a free loopback port with its own throwaway data directory (so its own
embedded PostgreSQL) and the hash embedder (it starts in seconds, without the model). The command
gets HAKI_BASE_URL, HAKI_API_KEY (a key for the project), HAKI_PROJECT_ID and HAKI_PYTHON (this
Python, which has the Python SDK: the TypeScript tests compare render() with it). The exit code is
the command's. scripts/test_typescript.sh runs the TypeScript SDK's tests this way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers.server import running_server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--project", default="ts-sdk", help="the project of the API key (default ts-sdk)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    with (
        tempfile.TemporaryDirectory(prefix="haki-serve-") as data_dir,
        running_server(Path(data_dir)) as server,
    ):
        key = server.create_key(args.project)
        env = {
            **os.environ,
            "HAKI_BASE_URL": server.url,
            "HAKI_API_KEY": key,
            "HAKI_PROJECT_ID": args.project,
            "HAKI_PYTHON": sys.executable,
        }
        print(f"with_haki_server: haki serve at {server.url}, project {args.project}", file=sys.stderr)
        done = subprocess.run(command, env=env, check=False)
        if done.returncode != 0:
            print(f"with_haki_server: server log {server.log} (kept until exit):", file=sys.stderr)
            print(server.log.read_text(errors="replace")[-4000:], file=sys.stderr)
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
