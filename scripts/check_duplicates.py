"""Fails when the code repeats itself more than its ceilings allow, as the `duplicates` command counts.

`duplicates --repo DIR` (/usr/local/bin/duplicates on the development machines) lists the pairs of
places under DIR that share six or more lines, identical or of the same shape. This script runs it
once per folder and sums the pairs of each group against the group's ceiling:

    service/ + queries/ + tests/  at most 30 pairs today (each folder run on its own); the
                                  target is 17. The ceiling comes down as pairs go; it rose
                                  once, 30 to 32, with webhooks, the memory browser and
                                  re-embedding, then came down to 30 (2026-12-03,
                                  docs/changelog.md)
    sdk/                          at most 10 pairs

What the 30 pairs are, and why they stay (a shared helper would hide what each one checks, or
change the contract):
- route and MCP tool declarations (api/): a decorator and a signature around one shared call;
  merging them changes the OpenAPI document or the schema a model reads;
- field and keyword lists of different records (structs.py, probe_of and ContextCall.of, the
  export's FactIn, tests' Settings and Candidate): the same names, other things;
- repository calls naming their parameters (repository/): the generated Queries protocol is
  keyword-only, so mypy checks each statement's parameters;
- one SQL step per table (the erasure chains of lifecycle.sql, embedding_model.sql's facts and
  events): SQL takes no table name as a parameter;
- declarations side by side: ERROR_TABLE rows, constants and settings, metrics, test helpers'
  signatures, parametrize tables.

Generated files are not counted (GENERATED): each folder is copied to a temporary directory
without them (the files git tracks below it and the untracked ones it does not ignore, as the
command itself would read them), and the command runs over the copy: a generated file's pairs,
with itself and with the code it is generated from, are not counted.

    .venv/bin/python scripts/check_duplicates.py   # exit 1, with the rows, past a ceiling

Exit 1 too when `duplicates` is not installed, or when it says it did not read everything
(`incomplete: ...`): a count of part of a tree proves nothing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMAND = "duplicates"
MOST = 200  # rows asked of each run: the most the command lists

# Written by a program, never by hand: their repeats are the generator's, not the code's.
GENERATED = frozenset(
    {
        "service/queries_protocol.py",  # scripts/queries_protocol.py
        "sdk/typescript/src/schema.ts",  # openapi-typescript (sdk/typescript/scripts/generate.mjs)
        "sdk/python/haki_client/_sync.py",  # sdk/python/make_sync.py, from _async.py
    }
)
# Ceiling -> the folders whose pair counts are summed against it. The first is a ratchet at
# today's count (target 17): lower it as duplicates go.
GROUPS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (30, ("service", "queries", "tests")),
    (10, ("sdk",)),
)

# "14 pairs of places (73 files read), ..." or "no duplicates (2 files read)"
_HEADER = re.compile(r"^(?:(?P<pairs>\d+) pairs? of places|no duplicates) \((?P<files>\d+) files? read\)")
_ROW = re.compile(r"^D\d+ ")


@dataclass(frozen=True)
class Count:
    folder: str
    pairs: int
    files: int
    excluded: tuple[str, ...]
    rows: tuple[str, ...]
    notes: tuple[str, ...]  # `left out: ...` lines


def tracked_files(folder: str) -> list[str]:
    """What `duplicates --repo folder` reads in this checkout: tracked, or untracked and not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", folder],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    names = sorted({name.decode() for name in out.split(b"\0") if name})
    return [name for name in names if (REPO / name).is_file()]  # a deleted tracked file is gone


def count(command: str, folder: str, seconds: int) -> Count:
    files = tracked_files(folder)
    excluded = tuple(name for name in files if name in GENERATED)
    with tempfile.TemporaryDirectory(prefix="check_duplicates.") as tmp:
        for name in files:
            if name in GENERATED:
                continue
            target = Path(tmp) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, target)
        result = subprocess.run(
            [command, "--repo", str(Path(tmp) / folder), "--most", str(MOST), "--seconds", str(seconds)],
            capture_output=True,
            text=True,
            check=False,
        )
    lines = result.stdout.splitlines()
    incomplete = [line for line in lines if line.startswith("incomplete:")]
    if result.returncode != 0 or incomplete or not lines:
        problem = "\n".join(incomplete) or result.stderr.strip() or f"exit status {result.returncode}"
        raise RuntimeError(f"`{COMMAND} --repo {folder}` did not count everything: {problem}")
    header = _HEADER.match(lines[0])
    if header is None:
        raise RuntimeError(f"`{COMMAND} --repo {folder}`: unexpected first line {lines[0]!r}")
    rows = tuple(line for line in lines[1:] if _ROW.match(line))
    pairs = int(header["pairs"] or 0)
    if len(rows) != min(pairs, MOST):
        raise RuntimeError(f"`{COMMAND} --repo {folder}`: {pairs} pairs announced, {len(rows)} rows listed")
    notes = tuple(line for line in lines[1:] if line.startswith("left out:"))
    return Count(folder, pairs, int(header["files"]), excluded, rows, notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=int, default=120, help="time each run may take (default 120)")
    parser.add_argument("--rows", action="store_true", help="print every row, not only past a ceiling")
    args = parser.parse_args(argv)
    command = shutil.which(COMMAND)
    if command is None:
        print(
            f"check_duplicates: the `{COMMAND}` command is not installed (not on PATH): nothing was "
            "counted, so nothing is proven",
            file=sys.stderr,
        )
        return 1
    print(
        f"Pairs of places sharing 6+ lines, as `{command} --repo DIR` counts them, each folder run on its "
        "own over a copy without its generated files:"
    )
    over: list[str] = []
    for ceiling, folders in GROUPS:
        try:
            counts = [count(command, folder, args.seconds) for folder in folders]
        except RuntimeError as exc:
            print(f"check_duplicates: {exc}", file=sys.stderr)
            return 1
        group = " + ".join(f"{folder}/" for folder in folders)
        total = sum(c.pairs for c in counts)
        if total > ceiling:
            over.append(f"{group} {total} > {ceiling}")
        verdict = "OVER the ceiling, rows below" if total > ceiling else "ok"
        print(f"{group}: {total} pairs, ceiling {ceiling}: {verdict}")
        for c in counts:
            skipped = f"; generated, not counted: {', '.join(c.excluded)}" if c.excluded else ""
            print(f"  {c.folder}/: {c.pairs} pairs, {c.files} files read{skipped}")
            if total > ceiling or args.rows:
                for line in (*c.rows, *c.notes):
                    print(f"    {line}")
    if over:
        print(f"check_duplicates: FAILED, past a ceiling: {'; '.join(over)}")
        return 1
    print("check_duplicates: every group within its ceiling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
